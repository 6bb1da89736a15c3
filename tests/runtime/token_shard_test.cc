#include "runtime/data/token_shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

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
using ::testing::HasSubstr;

class TokenShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_shard_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string PathOf(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // A file with the given header fields and payload, bypassing WriteTokenShard's checks.
  std::string WriteRaw(const std::string& name, int32_t magic, int32_t version, int32_t count,
                       const std::vector<uint16_t>& tokens) const {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    const std::string path = PathOf(name);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens.data()),
              static_cast<std::streamsize>(tokens.size() * 2));
    return path;
  }

  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  std::string dir_;
};

TEST_F(TokenShardTest, RoundTripPreservesEveryToken) {
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 5000; ++i) tokens.push_back(static_cast<uint16_t>((i * 7919) % 65536));
  tokens.push_back(65535);
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());

  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->path(), path);
  ASSERT_EQ(shard->size(), static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(shard->token_bytes(), 2);
  EXPECT_EQ(shard->ReadAll().value(), std::vector<uint32_t>(tokens.begin(), tokens.end()));
}

TEST_F(TokenShardTest, WrittenFileHasLlmcHeaderAndExactSize) {
  const std::vector<uint16_t> tokens = {1, 2, 3};
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  EXPECT_EQ(fs::file_size(path), 1024u + 2 * tokens.size());

  std::ifstream in(path, std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0) << "header[" << i << "]";
}

TEST_F(TokenShardTest, EmptyShardRoundTrips) {
  const std::string path = PathOf("empty.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::span<const uint16_t>()).ok());
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->size(), 0);
}

TEST_F(TokenShardTest, ReadsShardWrittenByAnotherWriter) {
  const std::string path = WriteRaw("raw.bin", 20240520, 1, 4, {10, 20, 30, 40});
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_THAT(shard->ReadAll().value(), ::testing::ElementsAre(10, 20, 30, 40));
}

TEST_F(TokenShardTest, MissingFileIsNotFoundNamingIt) {
  const std::string path = PathOf("missing.bin");
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
}

TEST_F(TokenShardTest, WrongMagicIsDataLossNamingFileAndMagic) {
  const std::string path = WriteRaw("bad.bin", 12345, 1, 2, {1, 2});
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
  EXPECT_THAT(shard.status().message(), HasSubstr("12345"));
  EXPECT_THAT(shard.status().message(), HasSubstr("20240520"));
}

TEST_F(TokenShardTest, ReadsLlama3ShardOfUint32Tokens) {
  // llm.c's Llama 3 shard: two uint32 tokens, here written as four uint16 halves.
  const std::string path = WriteRaw("llama.bin", 20240801, 7, 2, {1, 2, 3, 4});
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->token_bytes(), 4);
  EXPECT_THAT(shard->ReadAll().value(), ::testing::ElementsAre(1u + (2u << 16), 3u + (4u << 16)));
}

TEST_F(TokenShardTest, Llama3MagicWithWrongVersionIsDataLossNamingIt) {
  const std::string path = WriteRaw("llama.bin", 20240801, 1, 2, {1, 2, 3, 4});
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
  EXPECT_THAT(shard.status().message(), HasSubstr("version 1, expected 7"));
}

TEST_F(TokenShardTest, Uint32ShardIsFourBytesPerTokenAndRoundTrips) {
  const std::vector<uint32_t> tokens = {0, 65535, 65536, 70000, 128255, 4000000000u};
  const std::string path = PathOf("wide.bin");
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  EXPECT_EQ(fs::file_size(path), 1024u + 4 * tokens.size());
  std::ifstream in(path, std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 6);
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->token_bytes(), 4);
  EXPECT_EQ(shard->ReadAll().value(), tokens);
  const Status below = shard->CheckTokensBelow(128256);
  EXPECT_EQ(below.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(below.message(), HasSubstr("index 5 is 4000000000"));
}

TEST_F(TokenShardTest, TruncatedUint32ShardCountsFourBytesPerToken) {
  const std::string path = PathOf("wide.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint32_t>{1, 2, 3}).ok());
  fs::resize_file(path, 1024 + 10);
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr("should be 1036 bytes"));
  EXPECT_THAT(shard.status().message(), HasSubstr("3 tokens x 4 bytes"));
}

TEST_F(TokenShardTest, WriterInPiecesEqualsWriteTokenShard) {
  for (int token_bytes : {2, 4}) {
    const std::string name = "pieces" + std::to_string(token_bytes) + ".bin";
    const std::string path = PathOf(name);
    StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path, token_bytes);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    ASSERT_TRUE(writer->Append(std::vector<uint32_t>{5, 6}).ok());
    ASSERT_TRUE(writer->Append(std::vector<uint32_t>{}).ok());
    ASSERT_TRUE(writer->Append(std::vector<uint32_t>{7}).ok());
    EXPECT_FALSE(fs::exists(path)) << "the shard appears only when finished";
    ASSERT_TRUE(writer->Finish().ok());
    StatusOr<TokenShard> shard = ReadTokenShard(path);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    EXPECT_EQ(shard->token_bytes(), token_bytes);
    EXPECT_THAT(shard->ReadAll().value(), ::testing::ElementsAre(5, 6, 7));
    EXPECT_TRUE(fs::remove(path));
    EXPECT_TRUE(Listing().empty()) << "no temporary file is left";
  }
}

TEST_F(TokenShardTest, UnfinishedWriterLeavesNothing) {
  {
    StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(PathOf("gone.bin"), 4);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->Append(std::vector<uint32_t>{1, 2}).ok());
  }
  EXPECT_TRUE(Listing().empty());
}

TEST_F(TokenShardTest, WrongVersionIsDataLossNamingFileAndVersion) {
  const std::string path = WriteRaw("v2.bin", 20240520, 2, 2, {1, 2});
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
  EXPECT_THAT(shard.status().message(), HasSubstr("version 2"));
}

TEST_F(TokenShardTest, TruncatedFileIsDataLossNamingExpectedAndActualSize) {
  const std::string path = PathOf("short.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>(100, 7)).ok());
  fs::resize_file(path, 1024 + 2 * 100 - 3);
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
  EXPECT_THAT(shard.status().message(), HasSubstr("1224"));
  EXPECT_THAT(shard.status().message(), HasSubstr("1221"));
  EXPECT_THAT(shard.status().message(), HasSubstr("truncated"));
}

TEST_F(TokenShardTest, OverLongFileIsDataLossNamingExpectedAndActualSize) {
  const std::string path = WriteRaw("long.bin", 20240520, 1, 2, {1, 2, 3});
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
  EXPECT_THAT(shard.status().message(), HasSubstr("1028"));
  EXPECT_THAT(shard.status().message(), HasSubstr("1030"));
  EXPECT_THAT(shard.status().message(), HasSubstr("over-long"));
}

TEST_F(TokenShardTest, FileShorterThanHeaderIsDataLossNamingIt) {
  const std::string path = PathOf("tiny.bin");
  std::ofstream(path) << "not a shard";
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
  EXPECT_THAT(shard.status().message(), HasSubstr("header"));
}

TEST_F(TokenShardTest, NegativeCountIsDataLoss) {
  const std::string path = WriteRaw("neg.bin", 20240520, 1, -4, {});
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
}

TEST_F(TokenShardTest, TokenAtOrAboveVocabNamesFileIndexValueAndVocab) {
  std::vector<uint16_t> tokens(10000, 5);
  tokens[9000] = 256;
  const std::string path = PathOf("vocab.bin");
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok());
  Status status = shard->CheckTokensBelow(256);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("index 9000"));
  EXPECT_THAT(status.message(), HasSubstr("is 256"));
  EXPECT_THAT(status.message(), HasSubstr("vocab_size 256"));
  EXPECT_TRUE(shard->CheckTokensBelow(257).ok());
}

TEST_F(TokenShardTest, WriteLeavesOnlyTheShardInItsDirectory) {
  ASSERT_TRUE(WriteTokenShard(PathOf("only.bin"), std::vector<uint16_t>(64, 1)).ok());
  EXPECT_THAT(Listing(), ::testing::ElementsAre("only.bin"));
}

TEST_F(TokenShardTest, WriteReplacesAnExistingShard) {
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>(50, 1)).ok());
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>{9, 8}).ok());
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok());
  EXPECT_THAT(shard->ReadAll().value(), ::testing::ElementsAre(9, 8));
  EXPECT_THAT(Listing(), ::testing::ElementsAre("a.bin"));
}

// A file-size limit makes write() fail part-way, as a full disk would: the old shard must stay
// intact and no temporary file may be left.
TEST_F(TokenShardTest, FailedWriteKeepsOldShardAndLeavesNoTempFile) {
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>{4, 5, 6}).ok());

  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  void (*old_handler)(int) = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Status status = WriteTokenShard(path, std::vector<uint16_t>(100000, 3));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ::signal(SIGXFSZ, old_handler);

  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(Listing(), ::testing::ElementsAre("a.bin"));
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->size(), 3);
}

// A full disk part-way through (the header is written, the tokens are not) must report
// ResourceExhausted and leave the previous shard readable and no temporary file behind.
TEST_F(TokenShardTest, NoSpaceWhileWritingIsResourceExhaustedAndKeepsOldShard) {
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>{4, 5, 6}).ok());

  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kAppend, ENOSPC).Nth(2));
  Status status = WriteTokenShard(path, std::vector<uint16_t>(100000, 3), faulty);

  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_EQ(faulty.faults_fired(), 1);
  EXPECT_THAT(Listing(), ::testing::ElementsAre("a.bin"));
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_THAT(shard->ReadAll().value(), ::testing::ElementsAre(4, 5, 6));
}

TEST_F(TokenShardTest, FailedRenameKeepsOldShardAndLeavesNoTempFile) {
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>{4, 5, 6}).ok());

  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kRename, EIO));
  Status status = WriteTokenShard(path, std::vector<uint16_t>{7, 8}, faulty);

  EXPECT_EQ(status.code(), StatusCode::kIoError) << status.ToString();
  EXPECT_THAT(Listing(), ::testing::ElementsAre("a.bin"));
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->size(), 3);
}

TEST_F(TokenShardTest, ReadGoesThroughTheGivenFileSystem) {
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>{1, 2}).ok());
  FaultInjectingFileSystem faulty;
  faulty.Inject(FileFault(FileOp::kOpenForRead, EIO));
  StatusOr<TokenShard> shard = ReadTokenShard(path, faulty);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kIoError);
  EXPECT_THAT(shard.status().message(), HasSubstr(path));
}

TEST_F(TokenShardTest, WriteIntoMissingDirectoryIsNotFoundNamingPath) {
  const std::string path = PathOf("no/such/dir/a.bin");
  Status status = WriteTokenShard(path, std::vector<uint16_t>{1});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST_F(TokenShardTest, MovedShardKeepsItsTokens) {
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>{7, 8, 9}).ok());
  StatusOr<TokenShard> read = ReadTokenShard(path);
  ASSERT_TRUE(read.ok());
  TokenShard first = std::move(read).value();
  TokenShard second;
  second = std::move(first);
  EXPECT_EQ(first.size(), 0);
  EXPECT_EQ(second.path(), path);
  EXPECT_THAT(second.ReadAll().value(), ::testing::ElementsAre(7, 8, 9));
}

// A mapped shard ended the process with SIGBUS here; read with pread it is an error to report.
TEST_F(TokenShardTest, TruncatedAfterOpenIsDataLossNamingTheFileAndBothSizes) {
  const std::string path = PathOf("a.bin");
  ASSERT_TRUE(WriteTokenShard(path, std::vector<uint16_t>(1000, 5)).ok());
  StatusOr<TokenShard> shard = ReadTokenShard(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  fs::resize_file(path, 1024 + 2 * 500);
  std::vector<uint32_t> out(10, 1);
  EXPECT_TRUE(shard->Read(490, 10, out.data()).ok());
  EXPECT_EQ(out, std::vector<uint32_t>(10, 5));
  const Status status = shard->Read(495, 10, out.data());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("token shard '" + path +
                                          "' should be 3024 bytes (1000 "
                                          "tokens) but is 2024 bytes"));
}

}  // namespace
}  // namespace hoist::runtime
