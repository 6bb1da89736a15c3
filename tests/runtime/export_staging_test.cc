// Re-exporting over an earlier export, with a failure, a full disk or a kill at every file-system
// call: the directory holds the earlier export or the new one, each whole (config.json, every
// shard and the index that names them), never a mixture or neither (issue 35: a re-export cut
// short left config.json and 4 of 7 shards, no index, and no earlier export). A kill is
// FaultInjectingFileSystem::CrashAfter: from the chosen call on, nothing reaches the disk, not
// even the cleanup a failed export would do.
#include "runtime/interchange/export_staging.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/model/gpt2.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(HOIST_SOURCE_DIR) + "/tests/data/gpt2_hf/fp32";

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_export_staging_test" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// The weights at `path`, or empty when they cannot be read whole.
std::vector<float> ReadWeights(const std::string& path) {
  auto source = OpenWeightSource(path);
  if (!source.ok()) return {};
  const ParamLayout layout = ParamLayout::For((*source)->model());
  std::vector<float> weights(static_cast<size_t>(layout.total));
  for (int u = 0; u < layout.num_units(); ++u) {
    if (!(*source)->FillUnit(u, weights.data() + layout.unit_offsets[u]).ok()) return {};
  }
  return weights;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Passes every call on to `base`; tests override the calls they change.
class ForwardingFileSystem : public FileSystem {
 public:
  explicit ForwardingFileSystem(FileSystem& base) : base_(base) {}
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return base_.NewWritableFile(path);
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return base_.NewRandomAccessFile(path);
  }
  StatusOr<std::unique_ptr<ReadOnlyMapping>> MapReadOnly(const std::string& path) override {
    return base_.MapReadOnly(path);
  }
  StatusOr<FileInfo> Stat(const std::string& path) override { return base_.Stat(path); }
  StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    return base_.ListDirectory(path);
  }
  Status CreateDirs(const std::string& path) override { return base_.CreateDirs(path); }
  Status SyncDir(const std::string& path) override { return base_.SyncDir(path); }
  Status Rename(const std::string& from, const std::string& to) override {
    return base_.Rename(from, to);
  }
  Status Exchange(const std::string& a, const std::string& b) override {
    return base_.Exchange(a, b);
  }
  Status Link(const std::string& from, const std::string& to) override {
    return base_.Link(from, to);
  }
  Status Remove(const std::string& path) override { return base_.Remove(path); }
  Status RemoveAll(const std::string& path) override { return base_.RemoveAll(path); }

 protected:
  FileSystem& base_;
};

// A file system without RENAME_EXCHANGE (NFS, for one): the swap falls back to two renames.
class NoExchangeFileSystem final : public ForwardingFileSystem {
 public:
  using ForwardingFileSystem::ForwardingFileSystem;
  Status Exchange(const std::string& a, const std::string& b) override {
    return UnimplementedError("no exchange of '" + a + "' and '" + b + "' here");
  }
};

// Another program writes `file` into the target just before the swap.
class WritesBeforeTheSwapFileSystem final : public ForwardingFileSystem {
 public:
  WritesBeforeTheSwapFileSystem(FileSystem& base, std::string file)
      : ForwardingFileSystem(base), file_(std::move(file)) {}
  Status Exchange(const std::string& a, const std::string& b) override {
    std::ofstream(file_) << "notes";
    return base_.Exchange(a, b);
  }

 private:
  std::string file_;
};

class ReexportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto source = OpenWeightSource(kData);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    model_ = (*source)->model();
    earlier_ = ReadWeights(kData);
    ASSERT_FALSE(earlier_.empty());
    later_ = earlier_;
    for (float& w : later_) w *= 0.5f;  // a later checkpoint of the run
    sharded_.max_shard_bytes = 12000;
  }

  // The earlier export: three shards and an index, and a file of the user's beside them.
  void WriteEarlier(const std::string& out) {
    fs::remove_all(out);
    ASSERT_TRUE(WriteHfCheckpoint(out, model_, earlier_.data(), sharded_).ok());
    std::ofstream(out + "/tokenizer.json") << "{}";
  }

  ModelConfig model_;
  std::vector<float> earlier_, later_;
  HfExportOptions sharded_;
  const std::vector<std::string> earlier_names_ = {"config.json",
                                                   "model-00001-of-00003.safetensors",
                                                   "model-00002-of-00003.safetensors",
                                                   "model-00003-of-00003.safetensors",
                                                   "model.safetensors.index.json",
                                                   "tokenizer.json"};
  const std::vector<std::string> later_names_ = {"config.json", "model.safetensors",
                                                 "tokenizer.json"};
};

TEST_F(ReexportTest, AKillAtEveryCallLeavesTheEarlierExportOrTheNewOneWhole) {
  const std::string parent = TempDir("kill");
  const std::string out = parent + "/export";
  int earlier_seen = 0, later_seen = 0;
  bool finished = false;
  for (int64_t calls = 0; calls < 1000 && !finished; ++calls) {
    WriteEarlier(out);
    FaultInjectingFileSystem crashing;
    crashing.CrashAfter(calls);
    finished = WriteHfCheckpoint(out, model_, later_.data(), {}, crashing).ok();
    const std::vector<float> found = ReadWeights(out);
    if (found == earlier_) {
      ++earlier_seen;
      EXPECT_EQ(Names(out), earlier_names_) << "killed after " << calls << " calls";
    } else {
      ASSERT_EQ(found, later_) << "killed after " << calls
                               << " calls, the directory holds neither export whole";
      ++later_seen;
      EXPECT_EQ(Names(out), later_names_) << "killed after " << calls << " calls";
    }
  }
  ASSERT_TRUE(finished);
  EXPECT_GT(earlier_seen, 5);
  EXPECT_GT(later_seen, 0);
  // What a killed export leaves beside the target, the next one clears.
  WriteEarlier(out);
  FaultInjectingFileSystem crashing;
  crashing.CrashAfter(8);
  ASSERT_FALSE(WriteHfCheckpoint(out, model_, later_.data(), {}, crashing).ok());
  EXPECT_EQ(Names(parent).size(), 2u) << "no staging directory was left to clear";
  ASSERT_TRUE(WriteHfCheckpoint(out, model_, later_.data(), {}).ok());
  EXPECT_EQ(Names(parent), std::vector<std::string>{"export"});
  EXPECT_EQ(ReadWeights(out), later_);
}

// Without an atomic exchange, a kill between the two renames leaves the earlier export whole
// beside the target, and the next export puts it back before anything else.
TEST_F(ReexportTest, WithoutAnExchangeAKillLeavesAnExportTheNextOneRestores) {
  const std::string parent = TempDir("no_exchange");
  const std::string out = parent + "/export";
  bool finished = false, restored = false;
  for (int64_t calls = 0; calls < 1000 && !finished; ++calls) {
    WriteEarlier(out);
    FaultInjectingFileSystem crashing;
    crashing.CrashAfter(calls);
    NoExchangeFileSystem no_exchange(crashing);
    finished = WriteHfCheckpoint(out, model_, later_.data(), {}, no_exchange).ok();
    if (!fs::exists(out)) {
      auto begun = StagedExportDir::Begin(out, FileSystem::Posix());
      ASSERT_TRUE(begun.ok()) << begun.status().ToString();
      restored = true;
    }
    const std::vector<float> found = ReadWeights(out);
    ASSERT_TRUE(found == earlier_ || found == later_)
        << "killed after " << calls << " calls, the directory holds neither export whole";
    EXPECT_EQ(Names(out), found == earlier_ ? earlier_names_ : later_names_) << calls;
  }
  ASSERT_TRUE(finished);
  EXPECT_TRUE(restored) << "no kill fell between the two renames";
}

TEST_F(ReexportTest, AFullDiskLeavesTheEarlierExportAndNothingBesideIt) {
  const std::string parent = TempDir("full");
  const std::string out = parent + "/export";
  // The new export in two shards over the earlier three: the disk fills in the first or the
  // second.
  HfExportOptions halves;
  halves.max_shard_bytes = 24000;
  const int64_t whole = static_cast<int64_t>(fs::file_size(kData + "/model.safetensors"));
  for (int64_t budget : {int64_t{0}, int64_t{100}, whole / 2, whole - 1000}) {
    WriteEarlier(out);
    FaultInjectingFileSystem full;
    full.SetWriteBudget(budget);
    const Status status = WriteHfCheckpoint(out, model_, later_.data(), halves, full);
    ASSERT_FALSE(status.ok()) << "a budget of " << budget << " bytes held the whole export";
    EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
    EXPECT_EQ(ReadWeights(out), earlier_) << budget;
    EXPECT_EQ(Names(out), earlier_names_) << budget;
    EXPECT_EQ(Names(parent), std::vector<std::string>{"export"}) << budget;
  }
}

TEST_F(ReexportTest, ADirectoryInsideTheTargetIsRefusedBeforeAnythingIsWritten) {
  const std::string parent = TempDir("subdir");
  const std::string out = parent + "/export";
  WriteEarlier(out);
  fs::create_directories(out + "/.git");
  const Status status = WriteHfCheckpoint(out, model_, later_.data(), {});
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("holds the directory '.git'"), std::string::npos)
      << status.message();
  EXPECT_EQ(ReadWeights(out), earlier_);
  EXPECT_EQ(Names(parent), std::vector<std::string>{"export"});
}

// An --output that is a symbolic link to the export directory (on another file system, say):
// the link stays a link, the export replaces the directory it leads to, and the staging
// directory is made beside that directory.
TEST_F(ReexportTest, ASymbolicLinkToTheExportStaysALinkAndTheExportGoesWhereItLeads) {
  const std::string parent = TempDir("symlink");
  const std::string real = parent + "/disk/export";
  WriteEarlier(real);
  fs::create_directories(parent + "/links");
  const std::string link = parent + "/links/export";
  fs::create_directory_symlink(real, link);
  ASSERT_TRUE(WriteHfCheckpoint(link, model_, later_.data(), {}).ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link), real);
  EXPECT_EQ(ReadWeights(real), later_);
  EXPECT_EQ(Names(real), later_names_);
  EXPECT_EQ(Names(parent + "/links"), std::vector<std::string>{"export"});
  EXPECT_EQ(Names(parent + "/disk"), std::vector<std::string>{"export"});
}

TEST(StagedExportDir, ADanglingSymbolicLinkIsRefusedByName) {
  const std::string parent = TempDir("dangling");
  fs::create_directory_symlink(parent + "/nowhere", parent + "/export");
  auto staged = StagedExportDir::Begin(parent + "/export", FileSystem::Posix());
  ASSERT_FALSE(staged.ok());
  EXPECT_NE(staged.status().message().find("symbolic link to " + parent + "/nowhere"),
            std::string::npos)
      << staged.status().message();
  EXPECT_TRUE(fs::is_symlink(parent + "/export"));
}

// A file added to the target between the carrying over and the swap is only in the earlier
// export afterwards: that is kept, beside the target and out of the next export's cleanup.
TEST(StagedExportDir, AFileAddedDuringTheSwapKeepsTheEarlierExport) {
  const std::string parent = TempDir("added");
  const std::string out = parent + "/export";
  fs::create_directories(out);
  std::ofstream(out + "/model.safetensors") << "old";
  std::ofstream(out + "/tokenizer.json") << "{}";
  WritesBeforeTheSwapFileSystem writer(FileSystem::Posix(), out + "/notes.txt");
  auto staged = StagedExportDir::Begin(out, writer);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  std::ofstream(staged->path() + "/model.safetensors") << "new";
  ::testing::internal::CaptureStderr();
  const Status committed =
      staged->Commit([](std::string_view name) { return name == "model.safetensors"; });
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(committed.ok()) << committed.ToString();
  EXPECT_EQ(Names(out), (std::vector<std::string>{"model.safetensors", "tokenizer.json"}));
  const std::string kept = parent + "/.export.hoist-kept-" + std::to_string(::getpid());
  EXPECT_EQ(Names(parent), (std::vector<std::string>{kept.substr(parent.size() + 1), "export"}));
  EXPECT_TRUE(fs::exists(kept + "/notes.txt"));
  EXPECT_NE(log.find("'notes.txt' appeared"), std::string::npos) << log;
  EXPECT_NE(log.find(kept), std::string::npos) << log;
  // The next export leaves it alone.
  auto next = StagedExportDir::Begin(out, FileSystem::Posix());
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(fs::exists(kept + "/notes.txt"));
}

TEST(StagedExportDir, AFileWhereTheDirectoryShouldBeIsRefusedByName) {
  const std::string parent = TempDir("file");
  std::ofstream(parent + "/export") << "x";
  auto staged = StagedExportDir::Begin(parent + "/export", FileSystem::Posix());
  ASSERT_FALSE(staged.ok());
  EXPECT_NE(staged.status().message().find(parent + "/export: it is a file"), std::string::npos)
      << staged.status().message();
}

}  // namespace
}  // namespace hoist::runtime
