#include "runtime/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include "core/file_system.h"

namespace hoist::runtime {
namespace {

namespace fs_std = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteAll(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  ASSERT_TRUE(out.good()) << path;
}

void FlipByte(const std::string& path, int64_t offset) {
  std::string bytes = ReadAll(path);
  ASSERT_LT(offset, static_cast<int64_t>(bytes.size())) << path;
  bytes[static_cast<size_t>(offset)] ^= 0x20;
  WriteAll(path, bytes);
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs_std::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

// Sets manifest_xxh64 to match the edited `manifest`, as a deliberate rewrite would.
void Reseal(nlohmann::json& manifest) {
  manifest["manifest_xxh64"] = CheckpointManifestChecksum(manifest).value();
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_ckpt_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    params_.resize(1000);
    adam_m_.resize(1000);
    for (float& x : params_) x = normal(rng);
    for (float& x : adam_m_) x = normal(rng);
  }
  void TearDown() override { fs_std::remove_all(dir_); }

  std::vector<CheckpointBlob> Blobs() {
    return {{"params", params_.data(), int64_t(params_.size() * sizeof(float))},
            {"adam_m", adam_m_.data(), int64_t(adam_m_.size() * sizeof(float))},
            {"loader_state", loader_, int64_t{sizeof(loader_)}},
            {"empty", nullptr, 0}};
  }

  // Saves `step` on one rank with the current buffers.
  void Save(int64_t step, FileSystem& fs = FileSystem::Posix()) {
    ASSERT_TRUE(WriteRankShard(dir_, step, 0, Blobs(), fs).ok());
    const nlohmann::json metadata = {{"loss", 2.5}, {"seed", 7}};
    const Status status = CommitCheckpoint(dir_, step, 1, metadata, fs);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }

  std::string StepDir(int64_t step) { return dir_ + "/" + CheckpointStepDirName(step); }
  std::string ShardPath(int64_t step) { return StepDir(step) + "/rank_00000.bin"; }

  // Reads "params" of the step `latest` names and checks it against the current buffer.
  void ExpectLatestHoldsParams(int64_t step) {
    StatusOr<std::string> latest = FindLatestCheckpoint(dir_);
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_EQ(*latest, StepDir(step));
    StatusOr<CheckpointReader> reader = CheckpointReader::Open(*latest, 0);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    std::vector<float> back(params_.size());
    ASSERT_TRUE(reader->Read("params", back.data(), int64_t(back.size() * 4)).ok());
    EXPECT_EQ(back, params_);
  }

  std::string ManifestPath(int64_t step) { return StepDir(step) + "/manifest.json"; }

  // Rewrites the manifest of `step` after `edit` and opens the step on rank 0.
  StatusOr<CheckpointReader> OpenWithEditedManifest(
      int64_t step, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json manifest = nlohmann::json::parse(ReadAll(ManifestPath(step)));
    edit(manifest);
    Reseal(manifest);
    WriteAll(ManifestPath(step), manifest.dump());
    return CheckpointReader::Open(StepDir(step), 0);
  }

  // A DataLoss that names the manifest file and `field`.
  void ExpectBadField(const StatusOr<CheckpointReader>& reader, const std::string& field) {
    ASSERT_FALSE(reader.ok()) << field;
    EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss) << reader.status().ToString();
    EXPECT_TRUE(Contains(reader.status(), ManifestPath(2))) << reader.status().message();
    EXPECT_TRUE(Contains(reader.status(), "\"" + field + "\"")) << reader.status().message();
  }

  std::string dir_;
  std::vector<float> params_;
  std::vector<float> adam_m_;
  int64_t loader_[2] = {3, 123456789};
};

TEST_F(CheckpointTest, RoundTripRestoresEveryBlobAndTheMetadata) {
  Save(42);
  StatusOr<std::string> latest = FindLatestCheckpoint(dir_);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, dir_ + "/step_00000042");
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(*latest, 0);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->step(), 42);
  EXPECT_EQ(reader->world_size(), 1);
  EXPECT_EQ(reader->metadata()["loss"].get<double>(), 2.5);
  EXPECT_EQ(reader->metadata()["seed"].get<int>(), 7);

  std::vector<float> params(params_.size()), adam_m(adam_m_.size());
  int64_t loader[2] = {0, 0};
  ASSERT_TRUE(reader->Read("params", params.data(), int64_t(params.size() * 4)).ok());
  ASSERT_TRUE(reader->Read("adam_m", adam_m.data(), int64_t(adam_m.size() * 4)).ok());
  ASSERT_TRUE(reader->Read("loader_state", loader, sizeof(loader)).ok());
  EXPECT_TRUE(reader->Read("empty", nullptr, 0).ok());
  EXPECT_EQ(params, params_);
  EXPECT_EQ(adam_m, adam_m_);
  EXPECT_EQ(loader[0], 3);
  EXPECT_EQ(loader[1], 123456789);
  EXPECT_EQ(Entries(*latest), (std::set<std::string>{"manifest.json", "rank_00000.bin"}));
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000042"}));
}

TEST_F(CheckpointTest, ManifestRecordsEachBlobsXxh64) {
  Save(1);
  const nlohmann::json manifest = nlohmann::json::parse(ReadAll(StepDir(1) + "/manifest.json"));
  EXPECT_EQ(manifest["step"], 1);
  EXPECT_EQ(manifest["world_size"], 1);
  ASSERT_EQ(manifest["files"].size(), 1u);
  const nlohmann::json& file = manifest["files"][0];
  EXPECT_EQ(file["name"], "rank_00000.bin");
  EXPECT_EQ(file["bytes"].get<int64_t>(), static_cast<int64_t>(fs_std::file_size(ShardPath(1))));
  char expected[17];
  std::snprintf(expected, sizeof(expected), "%016llx",
                static_cast<unsigned long long>(XXH64(params_.data(), params_.size() * 4, 0)));
  EXPECT_EQ(file["blobs"][0]["name"], "params");
  EXPECT_EQ(file["blobs"][0]["xxh64"], expected);
  EXPECT_EQ(manifest["metadata"]["seed"], 7);
}

TEST_F(CheckpointTest, ShardFileFollowsTheDocumentedLayout) {
  Save(9);
  const std::string bytes = ReadAll(ShardPath(9));
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<unsigned char>(bytes[at + i])) << 8 * i;
    return v;
  };
  auto u64 = [&](size_t at) { return uint64_t(u32(at)) | uint64_t(u32(at + 4)) << 32; };
  EXPECT_EQ(bytes.substr(0, 8), "HOISTCKP");
  EXPECT_EQ(u32(8), 1u);   // version
  EXPECT_EQ(u32(12), 0u);  // rank
  EXPECT_EQ(u64(16), 9u);  // step
  EXPECT_EQ(u32(24), 4u);  // blobs
  const uint32_t index_bytes = u32(28);
  // Four entries of 4 + name + 24 bytes between the 32-byte header and the 8-byte checksum.
  EXPECT_EQ(index_bytes, 32u + (28 + 6) + (28 + 6) + (28 + 12) + (28 + 5) + 8u);
  EXPECT_EQ(u32(32), 6u);
  EXPECT_EQ(bytes.substr(36, 6), "params");
  const uint64_t offset = u64(42);
  EXPECT_EQ(offset % 64, 0u);
  EXPECT_GE(offset, index_bytes);
  EXPECT_EQ(u64(50), params_.size() * 4);
  EXPECT_EQ(std::memcmp(bytes.data() + offset, params_.data(), params_.size() * 4), 0);
  EXPECT_EQ(u64(index_bytes - 8), XXH64(bytes.data(), index_bytes - 8, 0));
}

TEST_F(CheckpointTest, TruncatedShardIsDataLossNamingTheFile) {
  Save(3);
  fs_std::resize_file(ShardPath(3), fs_std::file_size(ShardPath(3)) - 10);
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(3), 0);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(reader.status(), ShardPath(3))) << reader.status().message();
  EXPECT_TRUE(Contains(reader.status(), "truncated")) << reader.status().message();
}

TEST_F(CheckpointTest, ShardTruncatedInsideItsIndexIsDataLoss) {
  Save(3);
  fs_std::resize_file(ShardPath(3), 40);
  StatusOr<ShardFile> shard = ShardFile::Open(ShardPath(3));
  ASSERT_TRUE(shard.ok());
  StatusOr<ShardIndex> index = shard->ReadIndex();
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(index.status(), "truncated")) << index.status().message();
}

TEST_F(CheckpointTest, FlippedDataByteFailsOnlyThatBlobsChecksum) {
  Save(5);
  const nlohmann::json manifest = nlohmann::json::parse(ReadAll(StepDir(5) + "/manifest.json"));
  const int64_t adam_offset = manifest["files"][0]["blobs"][1]["offset"];
  FlipByte(ShardPath(5), adam_offset + 100);
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(5), 0);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::vector<float> back(params_.size());
  EXPECT_TRUE(reader->Read("params", back.data(), int64_t(back.size() * 4)).ok());
  const Status status = reader->Read("adam_m", back.data(), int64_t(back.size() * 4));
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(status, "'adam_m'")) << status.message();
  EXPECT_TRUE(Contains(status, ShardPath(5))) << status.message();
}

TEST_F(CheckpointTest, FlippedIndexByteFailsOpen) {
  Save(5);
  FlipByte(ShardPath(5), 37);  // inside the first blob's name
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(5), 0);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(reader.status(), "index checksum")) << reader.status().message();
}

TEST_F(CheckpointTest, WrongMagicSaysItIsNotAShard) {
  Save(5);
  FlipByte(ShardPath(5), 0);
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(5), 0);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(reader.status(), "magic")) << reader.status().message();
}

TEST_F(CheckpointTest, ManifestDisagreeingWithShardIsDataLoss) {
  Save(5);
  const std::string path = StepDir(5) + "/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(ReadAll(path));
  manifest["files"][0]["index_xxh64"] = "0000000000000000";
  Reseal(manifest);
  WriteAll(path, manifest.dump());
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(5), 0);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(reader.status(), "manifest says")) << reader.status().message();
}

TEST_F(CheckpointTest, MissingManifestIsNotFoundNamingTheStep) {
  Save(6);
  fs_std::remove(StepDir(6) + "/manifest.json");
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(6), 0);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(reader.status(), "manifest.json")) << reader.status().message();
  EXPECT_TRUE(Contains(reader.status(), StepDir(6))) << reader.status().message();
}

TEST_F(CheckpointTest, UnparsableManifestIsDataLoss) {
  Save(6);
  WriteAll(StepDir(6) + "/manifest.json", "{\"format\": ");
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(6), 0);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
}

TEST_F(CheckpointTest, ReadOfWrongSizeOrUnknownBlobNamesIt) {
  Save(2);
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(2), 0);
  ASSERT_TRUE(reader.ok());
  std::vector<float> back(params_.size() + 1);
  Status status = reader->Read("params", back.data(), int64_t(back.size() * 4));
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(status, "'params'")) << status.message();
  EXPECT_TRUE(Contains(status, ShardPath(2))) << status.message();
  status = reader->Read("adam_v", back.data(), 4);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(status, "'adam_v'")) << status.message();
}

TEST_F(CheckpointTest, NoCheckpointIsNotFound) {
  EXPECT_EQ(FindLatestCheckpoint(dir_).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(FindLatestCheckpoint(dir_ + "/absent").status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, LatestNamingMissingDirectoryIsDataLoss) {
  Save(1);
  WriteAll(dir_ + "/latest", "step_00000077\n");
  StatusOr<std::string> latest = FindLatestCheckpoint(dir_);
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(latest.status(), "step_00000077")) << latest.status().message();
  WriteAll(dir_ + "/latest", "../../etc");
  EXPECT_EQ(FindLatestCheckpoint(dir_).status().code(), StatusCode::kDataLoss);
}

TEST_F(CheckpointTest, LatestMovesForwardAndOlderStepsStayReadable) {
  Save(1);
  ExpectLatestHoldsParams(1);
  const std::vector<float> first = params_;
  params_[0] += 1.0f;
  Save(2);
  ExpectLatestHoldsParams(2);
  StatusOr<CheckpointReader> old = CheckpointReader::Open(StepDir(1), 0);
  ASSERT_TRUE(old.ok());
  std::vector<float> back(first.size());
  ASSERT_TRUE(old->Read("params", back.data(), int64_t(back.size() * 4)).ok());
  EXPECT_EQ(back, first);
}

TEST_F(CheckpointTest, LeftoverStagingIsIgnoredThenReplacedByTheNextSave) {
  Save(4);
  // A crashed save of step 5: a partial shard, a shard of a rank from a larger world, a temp.
  const std::string staging = dir_ + "/.tmp_step_00000005";
  fs_std::create_directories(staging);
  WriteAll(staging + "/rank_00000.bin", "HOISTCKP partial");
  WriteAll(staging + "/rank_00003.bin", "other rank");
  WriteAll(staging + "/rank_00000.bin.part", "x");
  fs_std::create_directories(dir_ + "/.tmp_step_00000002");
  ExpectLatestHoldsParams(4);

  params_[1] = 17.0f;
  Save(5);
  ExpectLatestHoldsParams(5);
  EXPECT_EQ(Entries(StepDir(5)), (std::set<std::string>{"manifest.json", "rank_00000.bin"}));
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000004", "step_00000005"}));
}

TEST_F(CheckpointTest, ResavingAStepReplacesIt) {
  Save(3);
  params_[2] = -5.0f;
  Save(3);
  ExpectLatestHoldsParams(3);
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000003"}));
}

TEST_F(CheckpointTest, CommitWithAMissingRankFailsAndKeepsLatest) {
  Save(1);
  ASSERT_TRUE(WriteRankShard(dir_, 2, 0, Blobs()).ok());
  const Status status = CommitCheckpoint(dir_, 2, /*world_size=*/2, nlohmann::json::object());
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(status, "rank 1")) << status.message();
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000001"}));
  ExpectLatestHoldsParams(1);
}

TEST_F(CheckpointTest, CommitWithoutShardsIsFailedPrecondition) {
  EXPECT_EQ(CommitCheckpoint(dir_, 8, 1, nlohmann::json::object()).code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(CheckpointTest, EachRankReadsItsOwnShard) {
  std::vector<float> rank1(params_.size());
  for (size_t i = 0; i < rank1.size(); ++i) rank1[i] = params_[i] * 2.0f;
  const std::vector<CheckpointBlob> blobs1 = {{"params", rank1.data(), int64_t(rank1.size() * 4)}};
  ASSERT_TRUE(WriteRankShard(dir_, 7, 1, blobs1).ok());
  ASSERT_TRUE(WriteRankShard(dir_, 7, 0, Blobs()).ok());
  ASSERT_TRUE(CommitCheckpoint(dir_, 7, 2, nlohmann::json::object()).ok());
  EXPECT_EQ(Entries(StepDir(7)),
            (std::set<std::string>{"manifest.json", "rank_00000.bin", "rank_00001.bin"}));
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(7), 1);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->world_size(), 2);
  std::vector<float> back(rank1.size());
  ASSERT_TRUE(reader->Read("params", back.data(), int64_t(back.size() * 4)).ok());
  EXPECT_EQ(back, rank1);
  StatusOr<CheckpointReader> outside = CheckpointReader::Open(StepDir(7), 2);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(outside.status(), "2 ranks")) << outside.status().message();
}

TEST_F(CheckpointTest, DiskFullWhileWritingAShardLeavesThePreviousCheckpoint) {
  Save(1);
  FaultInjectingFileSystem faulty;
  faulty.SetWriteBudget(2000);  // runs out inside "params"
  const Status status = WriteRankShard(dir_, 2, 0, Blobs(), faulty);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(status, "rank_00000.bin")) << status.message();
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000001"}));
  ExpectLatestHoldsParams(1);
}

TEST_F(CheckpointTest, DiskFullWhileWritingTheManifestLeavesThePreviousCheckpoint) {
  Save(1);
  ASSERT_TRUE(WriteRankShard(dir_, 2, 0, Blobs()).ok());
  FaultInjectingFileSystem faulty;
  faulty.SetWriteBudget(10);
  const Status status = CommitCheckpoint(dir_, 2, 1, nlohmann::json::object(), faulty);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(status, "manifest.json")) << status.message();
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000001"}));
  ExpectLatestHoldsParams(1);
}

TEST_F(CheckpointTest, FailedLatestUpdateKeepsTheOldPointer) {
  Save(1);
  ASSERT_TRUE(WriteRankShard(dir_, 2, 0, Blobs()).ok());
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kRename, EIO).OnPathsContaining("/latest"));
  const Status status = CommitCheckpoint(dir_, 2, 1, nlohmann::json::object(), faulty);
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_EQ(ReadAll(dir_ + "/latest"), "step_00000001\n");
  EXPECT_EQ(faulty.faults_fired(), 1);
  ExpectLatestHoldsParams(1);
  // The step itself was published whole and is readable on its own.
  EXPECT_TRUE(CheckpointReader::Open(StepDir(2), 0).ok());
}

TEST_F(CheckpointTest, PruneKeepsTheNewestAndWhatLatestNames) {
  for (int64_t step = 1; step <= 5; ++step) Save(step);
  ASSERT_TRUE(PruneCheckpoints(dir_, 2).ok());
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000004", "step_00000005"}));
  WriteAll(dir_ + "/latest", "step_00000004\n");
  fs_std::create_directories(dir_ + "/.tmp_step_00000003");
  ASSERT_TRUE(PruneCheckpoints(dir_, 1).ok());
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000004", "step_00000005"}));
  EXPECT_EQ(PruneCheckpoints(dir_, 0).code(), StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, FailedRenameOfTheStepDirectoryKeepsLatestAndLeavesNoStaging) {
  Save(1);
  ASSERT_TRUE(WriteRankShard(dir_, 2, 0, Blobs()).ok());
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kRename, EIO).OnPathsContaining("/step_00000002"));
  const Status status = CommitCheckpoint(dir_, 2, 1, nlohmann::json::object(), faulty);
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_TRUE(Contains(status, "step_00000002")) << status.message();
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000001"}));
  ExpectLatestHoldsParams(1);
}

TEST_F(CheckpointTest, FailedShardFsyncIsReportedAndLeavesThePreviousCheckpoint) {
  Save(1);
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kSync, EIO).OnPathsContaining("rank_00000.bin"));
  const Status status = WriteRankShard(dir_, 2, 0, Blobs(), faulty);
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_TRUE(Contains(status, "rank_00000.bin")) << status.message();
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000001"}));
}

TEST_F(CheckpointTest, ReadErrorWhileOpeningIsIoErrorNamingTheShard) {
  Save(1);
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kRead, EIO).OnPathsContaining("rank_00000.bin"));
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(1), 0, faulty);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kIoError);
  EXPECT_TRUE(Contains(reader.status(), ShardPath(1))) << reader.status().message();
}

TEST_F(CheckpointTest, MetadataThatIsNotUtf8IsInvalidArgumentAndKeepsLatest) {
  Save(1);
  ASSERT_TRUE(WriteRankShard(dir_, 2, 0, Blobs()).ok());
  const nlohmann::json metadata = {{"note", std::string("\xff\xfe")}};
  const Status status = CommitCheckpoint(dir_, 2, 1, metadata);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status, "manifest.json")) << status.message();
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000001"}));
  ExpectLatestHoldsParams(1);
}

TEST_F(CheckpointTest, FormatThatIsANumberIsDataLossNamingTheField) {
  Save(2);
  ExpectBadField(OpenWithEditedManifest(2, [](nlohmann::json& m) { m["format"] = 7; }), "format");
}

TEST_F(CheckpointTest, FileNameThatIsAnObjectIsDataLossNamingTheField) {
  Save(2);
  ExpectBadField(OpenWithEditedManifest(2,
                                        [](nlohmann::json& m) {
                                          m["files"][0]["name"] = {{"a", 1}};
                                        }),
                 "files[0].name");
}

TEST_F(CheckpointTest, MetadataThatIsAnArrayIsDataLossNamingTheField) {
  Save(2);
  ExpectBadField(OpenWithEditedManifest(2,
                                        [](nlohmann::json& m) {
                                          m["metadata"] = {1, 2, 3};
                                        }),
                 "metadata");
}

TEST_F(CheckpointTest, FilesThatIsNotAnArrayIsDataLossNamingTheField) {
  Save(2);
  ExpectBadField(
      OpenWithEditedManifest(2, [](nlohmann::json& m) { m["files"] = "rank_00000.bin"; }), "files");
}

TEST_F(CheckpointTest, StepBeyondInt64IsDataLossNamingTheField) {
  Save(2);
  ExpectBadField(
      OpenWithEditedManifest(2, [](nlohmann::json& m) { m["step"] = uint64_t{1} << 63; }), "step");
}

TEST_F(CheckpointTest, ManifestWithoutMetadataReadsAsEmptyMetadata) {
  Save(2);
  StatusOr<CheckpointReader> reader =
      OpenWithEditedManifest(2, [](nlohmann::json& m) { m.erase("metadata"); });
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_TRUE(reader->metadata().is_object());
  EXPECT_TRUE(reader->metadata().empty());
}

// Every field of the manifest (but the free-form metadata's contents), replaced by a value of
// each other JSON type or removed, must give a clean DataLoss, never an exception or a crash.
TEST_F(CheckpointTest, EveryWrongTypedOrMissingManifestFieldIsDataLoss) {
  Save(2);
  const nlohmann::json original = nlohmann::json::parse(ReadAll(ManifestPath(2)));
  std::vector<nlohmann::json::json_pointer> fields;
  std::function<void(const nlohmann::json&, const nlohmann::json::json_pointer&)> walk =
      [&](const nlohmann::json& value, const nlohmann::json::json_pointer& at) {
        if (!at.empty()) fields.push_back(at);
        if (at.to_string() == "/metadata") return;
        if (value.is_object()) {
          for (const auto& [key, child] : value.items()) walk(child, at / key);
        } else if (value.is_array()) {
          for (size_t i = 0; i < value.size(); ++i) walk(value[i], at / i);
        }
      };
  walk(original, nlohmann::json::json_pointer());
  ASSERT_GE(fields.size(), 20u);

  const auto kind = [](const nlohmann::json& value) {
    return value.is_number() ? std::string("number") : std::string(value.type_name());
  };
  const std::vector<nlohmann::json> replacements = {
      nullptr, true, 3, "x", nlohmann::json::array({1}), nlohmann::json::object({{"k", 1}})};
  int cases = 0;
  for (const nlohmann::json::json_pointer& field : fields) {
    for (const nlohmann::json& replacement : replacements) {
      if (kind(original[field]) == kind(replacement)) continue;
      nlohmann::json manifest = original;
      manifest[field] = replacement;
      if (field.to_string() != "/manifest_xxh64") Reseal(manifest);
      WriteAll(ManifestPath(2), manifest.dump());
      StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(2), 0);
      ASSERT_FALSE(reader.ok()) << field.to_string() << " = " << replacement.dump();
      EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss)
          << field.to_string() << " = " << replacement.dump() << ": " << reader.status().ToString();
      ++cases;
    }
    // Removing an array element changes a count rather than a field; metadata is optional.
    const nlohmann::json::json_pointer parent = field.parent_pointer();
    if (!original[parent].is_object() || field.to_string() == "/metadata") continue;
    nlohmann::json manifest = original;
    manifest[parent].erase(field.back());
    if (field.to_string() != "/manifest_xxh64") Reseal(manifest);
    WriteAll(ManifestPath(2), manifest.dump());
    StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(2), 0);
    ASSERT_FALSE(reader.ok()) << "without " << field.to_string();
    EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss)
        << "without " << field.to_string() << ": " << reader.status().ToString();
  }
  EXPECT_GT(cases, 100);
}

TEST_F(CheckpointTest, AnEditedManifestFailsItsChecksumNamingTheFile) {
  Save(2);
  nlohmann::json manifest = nlohmann::json::parse(ReadAll(ManifestPath(2)));
  manifest["metadata"]["loss"] = -5;
  WriteAll(ManifestPath(2), manifest.dump(2));
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(2), 0);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(reader.status(), ManifestPath(2) + " does not match its checksum"))
      << reader.status().message();
}

TEST_F(CheckpointTest, AManifestReformattedButUnchangedStillMatchesItsChecksum) {
  Save(2);
  WriteAll(ManifestPath(2), nlohmann::json::parse(ReadAll(ManifestPath(2))).dump(7));
  EXPECT_TRUE(CheckpointReader::Open(StepDir(2), 0).ok());
}

// Checkpoints written before the manifest had a checksum stay readable.
TEST_F(CheckpointTest, AVersionOneManifestIsReadWithoutAChecksumWithANotice) {
  Save(2);
  nlohmann::json manifest = nlohmann::json::parse(ReadAll(ManifestPath(2)));
  manifest["version"] = 1;
  manifest.erase("manifest_xxh64");
  WriteAll(ManifestPath(2), manifest.dump(2));
  ::testing::internal::CaptureStderr();
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(2), 0);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->metadata()["seed"], 7);
  EXPECT_TRUE(log.find(ManifestPath(2) + " has no checksum") != std::string::npos) << log;
  // A version-2 manifest must have one.
  manifest["version"] = 2;
  WriteAll(ManifestPath(2), manifest.dump(2));
  ExpectBadField(CheckpointReader::Open(StepDir(2), 0), "manifest_xxh64");
}

TEST_F(CheckpointTest, WithoutLatestTheNewestCompleteStepIsFoundWithANotice) {
  Save(2);
  Save(4);
  Save(6);
  fs_std::remove(dir_ + "/latest");
  // Step 6's shard was cut short, so step 4 is the newest complete one.
  fs_std::resize_file(ShardPath(6), fs_std::file_size(ShardPath(6)) - 1);
  ::testing::internal::CaptureStderr();
  StatusOr<std::string> latest = FindLatestCheckpoint(dir_);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, StepDir(4));
  EXPECT_TRUE(Contains(Status(StatusCode::kInternal, log),
                       "has no 'latest' file; using "
                       "step_00000004"))
      << log;
  EXPECT_TRUE(Contains(Status(StatusCode::kInternal, log), "skipped step_00000006")) << log;
  // Pruning keeps what it found.
  ASSERT_TRUE(PruneCheckpoints(dir_, 1).ok());
  EXPECT_TRUE(fs_std::exists(StepDir(4)));
}

TEST_F(CheckpointTest, WithoutLatestAndNoCompleteStepIsDataLossNotAFreshStart) {
  Save(2);
  fs_std::remove(dir_ + "/latest");
  FlipByte(ManifestPath(2), 40);
  StatusOr<std::string> latest = FindLatestCheckpoint(dir_);
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(latest.status(), "none of its 1 step directories is complete"))
      << latest.status().message();
  EXPECT_TRUE(Contains(latest.status(), "step_00000002")) << latest.status().message();
}

// ---- blobs written and read in pieces (states too large for memory) ----

// "params" and "adam_m" produced in pieces of `piece` floats, interleaved as the NVMe swapper
// hands them over, after the whole blobs "loader_state" and "empty".
StreamedBlobs InPieces(const std::vector<float>& params, const std::vector<float>& m,
                       int64_t piece) {
  StreamedBlobs streamed;
  streamed.names = {"params", "adam_m"};
  const auto bytes = static_cast<int64_t>(params.size() * sizeof(float));
  streamed.bytes = {bytes, bytes};
  streamed.produce = [&params, &m, piece](const StreamedBlobs::Emit& emit) {
    for (int64_t at = 0; at < static_cast<int64_t>(params.size()); at += piece) {
      const int64_t n = std::min<int64_t>(piece, static_cast<int64_t>(params.size()) - at);
      HOIST_RETURN_IF_ERROR(emit(0, params.data() + at, n * 4));
      HOIST_RETURN_IF_ERROR(emit(1, m.data() + at, n * 4));
    }
    return Status::Ok();
  };
  return streamed;
}

TEST_F(CheckpointTest, AShardWrittenInPiecesIsTheSameFileByteForByte) {
  // The reference: every blob whole, in the streamed order.
  const std::vector<CheckpointBlob> whole = {
      {"loader_state", loader_, int64_t{sizeof(loader_)}},
      {"empty", nullptr, 0},
      {"params", params_.data(), int64_t(params_.size() * 4)},
      {"adam_m", adam_m_.data(), int64_t(adam_m_.size() * 4)}};
  const std::string a = dir_ + "/whole.bin", b = dir_ + "/pieces.bin";
  ASSERT_TRUE(WriteShardFile(FileSystem::Posix(), a, 7, 3, whole).ok());
  const std::vector<CheckpointBlob> head(whole.begin(), whole.begin() + 2);
  for (int64_t piece : {int64_t{1}, int64_t{64}, int64_t{333}, int64_t{1000}}) {
    const StreamedBlobs streamed = InPieces(params_, adam_m_, piece);
    ASSERT_TRUE(WriteShardFile(FileSystem::Posix(), b, 7, 3, head, &streamed).ok());
    EXPECT_EQ(ReadAll(a), ReadAll(b)) << "pieces of " << piece;
  }
}

TEST_F(CheckpointTest, ABlobReadInPiecesChecksItsChecksumAtTheEnd) {
  const StreamedBlobs streamed = InPieces(params_, adam_m_, 100);
  ASSERT_TRUE(WriteRankShard(dir_, 1, 0, {}, streamed).ok());
  ASSERT_TRUE(CommitCheckpoint(dir_, 1, 1, nlohmann::json::object()).ok());
  {
    StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(1), 0);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    StatusOr<BlobReader> blob = reader->OpenBlob("adam_m", int64_t(adam_m_.size() * 4));
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    std::vector<float> back(adam_m_.size());
    for (size_t at = 0; at < back.size(); at += 300) {
      const size_t n = std::min<size_t>(300, back.size() - at);
      ASSERT_TRUE(blob->Read(back.data() + at, int64_t(n * 4)).ok());
    }
    EXPECT_TRUE(blob->Finish().ok());
    EXPECT_EQ(back, adam_m_);
    EXPECT_EQ(blob->Read(back.data(), 4).code(), StatusCode::kFailedPrecondition);
    // A wrong size or name is refused before any byte is read.
    EXPECT_EQ(reader->OpenBlob("adam_m", 4).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(reader->OpenBlob("nope", 4).status().code(), StatusCode::kNotFound);
  }
  // A flipped byte inside adam_m: the pieces read, Finish says which blob is damaged.
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(1), 0);
  ASSERT_TRUE(reader.ok());
  ShardBlobEntry entry;
  for (const ShardBlobEntry& b : reader->blobs()) {
    if (b.name == "adam_m") entry = b;
  }
  std::string bytes = ReadAll(ShardPath(1));
  bytes[static_cast<size_t>(entry.offset + 123)] ^= 0x10;
  WriteAll(ShardPath(1), bytes);
  StatusOr<BlobReader> blob = reader->OpenBlob("adam_m", entry.bytes);
  ASSERT_TRUE(blob.ok());
  std::vector<float> back(adam_m_.size());
  ASSERT_TRUE(blob->Read(back.data(), entry.bytes).ok());
  const Status finished = blob->Finish();
  EXPECT_EQ(finished.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(finished, "adam_m")) << finished.message();
  // Reading only part of it is not a finished read either.
  StatusOr<BlobReader> partial = reader->OpenBlob("params", entry.bytes);
  ASSERT_TRUE(partial.ok());
  ASSERT_TRUE(partial->Read(back.data(), 8).ok());
  EXPECT_EQ(partial->Finish().code(), StatusCode::kFailedPrecondition);
}

// What a reader of another partition does: parts of a blob, then the whole checked once.
TEST_F(CheckpointTest, ARangeOfABlobReadsThoseBytesAndVerifyChecksTheWhole) {
  Save(1);
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(StepDir(1), 0);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const int64_t bytes = int64_t(adam_m_.size() * 4);
  std::vector<float> part(7);
  ASSERT_TRUE(reader->ReadRange("adam_m", bytes, 40 * 4, part.data(), 7 * 4).ok());
  EXPECT_EQ(part, std::vector<float>(adam_m_.begin() + 40, adam_m_.begin() + 47));
  EXPECT_TRUE(reader->Verify("adam_m", bytes).ok());
  EXPECT_EQ(reader->Verify("adam_m", 4).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader->ReadRange("nope", 4, 0, part.data(), 4).code(), StatusCode::kNotFound);
  ShardBlobEntry entry;
  for (const ShardBlobEntry& b : reader->blobs()) {
    if (b.name == "adam_m") entry = b;
  }
  std::string file = ReadAll(ShardPath(1));
  file[static_cast<size_t>(entry.offset + entry.bytes - 1)] ^= 0x10;
  WriteAll(ShardPath(1), file);
  const Status verified = reader->Verify("adam_m", bytes);
  EXPECT_EQ(verified.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(verified, "adam_m")) << verified.message();
}

TEST_F(CheckpointTest, DiskFullWhileWritingPiecesLeavesThePreviousCheckpoint) {
  Save(1);
  FaultInjectingFileSystem faulty;
  faulty.SetWriteBudget(3000);  // runs out among the pieces
  const StreamedBlobs streamed = InPieces(params_, adam_m_, 100);
  const Status status = WriteRankShard(dir_, 2, 0, {}, streamed, faulty);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_TRUE(Contains(status, "rank_00000.bin")) << status.message();
  EXPECT_EQ(Entries(dir_), (std::set<std::string>{"latest", "step_00000001"}));
  ExpectLatestHoldsParams(1);
}

}  // namespace
}  // namespace hoist::runtime
