// Prepared shards: documents, their loss masks and boundaries go through the file unchanged;
// every kind of damage (another file, another version, a truncated or over-long file, a flipped
// byte in any section, a file cut while in use) is an error naming the file and what is wrong;
// and a write that fails anywhere leaves the old file and no temporary behind.
#include "runtime/data/prepared_shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/file_system.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Document {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;
};

// Three documents: a prompt and an answer each, the answer's tokens the targets.
std::vector<Document> Documents(uint32_t base = 0) {
  return {{{base + 1, base + 2, base + 3, base + 4}, {0, 0, 1, 1}},
          {{base + 7}, {1}},
          {{base + 9, base + 8, base + 7, base + 6, base + 5}, {0, 1, 1, 0, 1}}};
}

class PreparedShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_prepared_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string PathOf(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  Status Write(const std::string& path, const std::vector<Document>& documents, int token_bytes = 2,
               FileSystem& files = FileSystem::Posix()) {
    HOIST_ASSIGN_OR_RETURN(PreparedShardWriter writer,
                           PreparedShardWriter::Create(path, token_bytes, files));
    for (const Document& d : documents) HOIST_RETURN_IF_ERROR(writer.Append(d.tokens, d.mask));
    return writer.Finish();
  }

  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  // Flips one byte of the file at `offset`.
  static void Flip(const std::string& path, int64_t offset) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(offset);
    char c = 0;
    file.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    file.seekp(offset);
    file.write(&c, 1);
  }

  std::string dir_;
};

TEST_F(PreparedShardTest, DocumentsMasksAndBoundariesRoundTrip) {
  for (int token_bytes : {2, 4}) {
    const std::string path = PathOf("train_" + std::to_string(token_bytes) + ".prepared");
    const uint32_t base = token_bytes == 4 ? 100000 : 0;
    ASSERT_TRUE(Write(path, Documents(base), token_bytes).ok());
    StatusOr<PreparedShard> shard = PreparedShard::Open(path);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    EXPECT_EQ(shard->tokens(), 10);
    EXPECT_EQ(shard->documents(), 3);
    EXPECT_EQ(shard->header().trainable, 6);
    EXPECT_EQ(shard->header().max_token, base + 9);
    EXPECT_EQ(shard->header().token_bytes, token_bytes);
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(path)), 128 + 10 * token_bytes + 10 + 3 * 8);
    ASSERT_TRUE(shard->Verify(base + 10).ok());
    std::vector<uint32_t> tokens(10);
    ASSERT_TRUE(shard->ReadTokens(0, 10, tokens.data()).ok());
    EXPECT_THAT(tokens, ElementsAre(base + 1, base + 2, base + 3, base + 4, base + 7, base + 9,
                                    base + 8, base + 7, base + 6, base + 5));
    std::vector<uint8_t> mask(4);
    ASSERT_TRUE(shard->ReadMask(4, 4, mask.data()).ok());
    EXPECT_THAT(mask, ElementsAre(1, 0, 1, 1));
    std::vector<int64_t> starts(3);
    ASSERT_TRUE(shard->ReadDocuments(0, 3, starts.data()).ok());
    EXPECT_THAT(starts, ElementsAre(0, 4, 5));
  }
  EXPECT_THAT(Listing(), ::testing::UnorderedElementsAre("train_2.prepared", "train_4.prepared"));
}

TEST_F(PreparedShardTest, AnEmptyShardIsValid) {
  const std::string path = PathOf("empty.prepared");
  ASSERT_TRUE(Write(path, {}).ok());
  StatusOr<PreparedShard> shard = PreparedShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->tokens(), 0);
  EXPECT_TRUE(shard->Verify(10).ok());
}

TEST_F(PreparedShardTest, ATokenPastTheVocabularyNamesItsIndexAndValue) {
  const std::string path = PathOf("a.prepared");
  ASSERT_TRUE(Write(path, Documents()).ok());
  StatusOr<PreparedShard> shard = PreparedShard::Open(path);
  ASSERT_TRUE(shard.ok());
  const Status status = shard->Verify(9);  // token 5 is 9
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("token 5 is 9"));
  EXPECT_THAT(status.message(), HasSubstr("vocab_size 9"));
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST_F(PreparedShardTest, AnotherFileIsRefusedByName) {
  const std::string path = PathOf("tokens.bin");
  std::ofstream(path, std::ios::binary) << std::string(300, 'x');
  const Status status = PreparedShard::Open(path).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("is not a prepared shard"));
  EXPECT_THAT(status.message(), HasSubstr("xxxxxxxx"));
  EXPECT_THAT(status.message(), HasSubstr(path));
  std::ofstream(PathOf("short"), std::ios::binary) << "HOISTPRP";
  EXPECT_THAT(PreparedShard::Open(PathOf("short")).status().message(),
              HasSubstr("shorter than its 128-byte header"));
  EXPECT_EQ(PreparedShard::Open(PathOf("missing")).status().code(), StatusCode::kNotFound);
}

TEST_F(PreparedShardTest, AnotherVersionIsNamed) {
  const std::string path = PathOf("a.prepared");
  ASSERT_TRUE(Write(path, Documents()).ok());
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(8);
    const char two[4] = {2, 0, 0, 0};
    file.write(two, 4);
  }
  const Status status = PreparedShard::Open(path).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("format version 2"));
  EXPECT_THAT(status.message(), HasSubstr("reads version 1"));
}

TEST_F(PreparedShardTest, ADamagedHeaderIsCaughtByItsChecksum) {
  const std::string path = PathOf("a.prepared");
  ASSERT_TRUE(Write(path, Documents()).ok());
  Flip(path, 32);  // the trainable count
  const Status status = PreparedShard::Open(path).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("header is damaged"));
}

TEST_F(PreparedShardTest, TruncatedAndOverLongFilesNameBothSizes) {
  const std::string path = PathOf("a.prepared");
  ASSERT_TRUE(Write(path, Documents()).ok());
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 1);
  Status status = PreparedShard::Open(path).status();
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(std::to_string(size - 1) + " bytes"));
  EXPECT_THAT(status.message(), HasSubstr("says " + std::to_string(size)));
  fs::resize_file(path, size + 3);
  status = PreparedShard::Open(path).status();
  EXPECT_THAT(status.message(), HasSubstr(std::to_string(size + 3) + " bytes"));
}

TEST_F(PreparedShardTest, EverySectionsDamageIsNamed) {
  const std::string path = PathOf("a.prepared");
  // 2-byte tokens at 128, the mask at 148, the offsets at 158.
  const struct {
    int64_t offset;
    const char* section;
  } cases[] = {{128 + 2 * 6, "tokens"}, {148 + 3, "loss mask"}, {158 + 9, "document offsets"}};
  for (const auto& c : cases) {
    ASSERT_TRUE(Write(path, Documents()).ok());
    Flip(path, c.offset);
    StatusOr<PreparedShard> shard = PreparedShard::Open(path);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();  // the header is intact
    const Status status = shard->Verify();
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << c.section;
    EXPECT_THAT(status.message(), HasSubstr(c.section));
    EXPECT_THAT(status.message(), HasSubstr(path));
  }
}

TEST_F(PreparedShardTest, AFileCutWhileInUseIsDataLossNamingIt) {
  const std::string path = PathOf("a.prepared");
  ASSERT_TRUE(Write(path, Documents()).ok());
  StatusOr<PreparedShard> shard = PreparedShard::Open(path);
  ASSERT_TRUE(shard.ok());
  fs::resize_file(path, 140);
  std::vector<uint32_t> tokens(10);
  const Status status = shard->ReadTokens(0, 10, tokens.data());
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("is 140 bytes"));
  EXPECT_THAT(status.message(), HasSubstr("truncated while in use"));
  std::vector<uint8_t> mask(2);
  EXPECT_EQ(shard->ReadMask(0, 2, mask.data()).code(), StatusCode::kDataLoss);
}

TEST_F(PreparedShardTest, BadDocumentsAreRefusedAndLeaveNothing) {
  const std::string path = PathOf("a.prepared");
  const std::vector<uint32_t> tokens = {1, 2, 3};
  const struct {
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> mask;
    int token_bytes;
    const char* says;
  } cases[] = {{{}, {}, 2, "document 1 has no tokens"},
               {tokens, {1, 0}, 2, "3 tokens but 2 mask bytes"},
               {tokens, {1, 2, 0}, 2, "mask byte of 2"},
               {{70000}, {1}, 2, "token 70000"}};
  for (const auto& c : cases) {
    StatusOr<PreparedShardWriter> writer = PreparedShardWriter::Create(path, c.token_bytes);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->Append(tokens, std::vector<uint8_t>{1, 1, 1}).ok());
    const Status status = writer->Append(c.tokens, c.mask);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(status.message(), HasSubstr(c.says));
    EXPECT_THAT(status.message(), HasSubstr(path));
    EXPECT_TRUE(Listing().empty()) << Listing()[0];
  }
}

TEST_F(PreparedShardTest, AFailedWriteKeepsTheOldShardAndNoTemporaries) {
  const std::string path = PathOf("a.prepared");
  ASSERT_TRUE(Write(path, Documents()).ok());
  // A full disk at each write of the new shard in turn (each leaves the old shard), until the
  // writes are past: then the new shard is written.
  bool written = false;
  for (int nth = 1; nth <= 12 && !written; ++nth) {
    FaultInjectingFileSystem faulty;
    faulty.Inject(FileFault(FileOp::kAppend, ENOSPC).Nth(nth));
    const Status status = Write(path, Documents(20), 2, faulty);
    EXPECT_THAT(Listing(), ElementsAre("a.prepared")) << "fault at write " << nth;
    if (faulty.faults_fired() == 0) {
      EXPECT_TRUE(status.ok()) << status.ToString();
      written = true;
      continue;
    }
    EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr(path));
    StatusOr<PreparedShard> old = PreparedShard::Open(path);
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    EXPECT_TRUE(old->Verify().ok());
    EXPECT_EQ(old->header().max_token, 9u) << "fault at write " << nth;  // the old shard's
  }
  EXPECT_TRUE(written);
  // A failed rename keeps what was there.
  ASSERT_TRUE(Write(path, Documents()).ok());
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kRename, EIO));
  EXPECT_FALSE(Write(path, Documents(20), 2, faulty).ok());
  EXPECT_THAT(Listing(), ElementsAre("a.prepared"));
  StatusOr<PreparedShard> shard = PreparedShard::Open(path);
  ASSERT_TRUE(shard.ok());
  std::vector<uint32_t> first(1);
  ASSERT_TRUE(shard->ReadTokens(0, 1, first.data()).ok());
  EXPECT_EQ(first[0], 1u);  // the old shard's
  // An unfinished writer leaves nothing either.
  {
    StatusOr<PreparedShardWriter> writer = PreparedShardWriter::Create(PathOf("b.prepared"), 2);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->Append(std::vector<uint32_t>{1}, std::vector<uint8_t>{1}).ok());
  }
  EXPECT_THAT(Listing(), ElementsAre("a.prepared"));
}

TEST_F(PreparedShardTest, ALargeShardGoesThroughInChunks) {
  // More than the writer's and the reader's 1 MiB chunks in every section.
  const std::string path = PathOf("large.prepared");
  StatusOr<PreparedShardWriter> writer = PreparedShardWriter::Create(path, 4);
  ASSERT_TRUE(writer.ok());
  std::vector<uint32_t> tokens(1000);
  std::vector<uint8_t> mask(1000);
  for (int d = 0; d < 1500; ++d) {
    for (int i = 0; i < 1000; ++i) {
      tokens[static_cast<size_t>(i)] = static_cast<uint32_t>((d * 7919 + i * 31) % 150000);
      mask[static_cast<size_t>(i)] = static_cast<uint8_t>((d + i) % 3 == 0);
    }
    ASSERT_TRUE(writer->Append(tokens, mask).ok());
  }
  ASSERT_TRUE(writer->Finish().ok());
  StatusOr<PreparedShard> shard = PreparedShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->tokens(), 1500000);
  EXPECT_EQ(shard->documents(), 1500);
  ASSERT_TRUE(shard->Verify(150000).ok());
  std::vector<int64_t> last(1);
  ASSERT_TRUE(shard->ReadDocuments(1499, 1, last.data()).ok());
  EXPECT_EQ(last[0], 1499000);
  std::vector<uint32_t> read(1000);
  ASSERT_TRUE(shard->ReadTokens(1499000, 1000, read.data()).ok());
  EXPECT_EQ(read, tokens);
}

}  // namespace
}  // namespace hoist::runtime
