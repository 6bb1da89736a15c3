#include "runtime/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/token_shard.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ByteTokenizer, EncodeMapsEachByteToItsUnsignedValue) {
  const std::string text = std::string("A\0z", 3) + "\xff\x80";
  EXPECT_THAT(EncodeBytes(text), ElementsAre(65, 0, 122, 255, 128));
}

TEST(ByteTokenizer, DecodeInvertsEncodeForEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::vector<uint16_t> tokens = EncodeBytes(all);
  std::vector<int32_t> ids(tokens.begin(), tokens.end());
  EXPECT_EQ(DecodeTokens(ids), all);
}

TEST(ByteTokenizer, DecodeRendersIdsOutsideTheBytesAsMarkers) {
  EXPECT_EQ(DecodeToken(256), "<|256|>");
  EXPECT_EQ(DecodeToken(-1), "<|-1|>");
  const std::vector<int32_t> ids = {'h', 'i', 50256, '!'};
  EXPECT_EQ(DecodeTokens(ids), "hi<|50256|>!");
}

class TokenizeFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "hoist_tok_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string PathOf(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
};

TEST_F(TokenizeFileTest, WritesOneTokenPerByte) {
  const std::string text = "The kettle sang.\nCaf\xc3\xa9 \x01\n";
  const std::string input = PathOf("in.txt");
  std::ofstream(input, std::ios::binary) << text;
  const std::string output = PathOf("out.bin");
  Status status = TokenizeFile(input, output);
  ASSERT_TRUE(status.ok()) << status.ToString();

  StatusOr<TokenShard> shard = ReadTokenShard(output);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  const std::vector<uint16_t> expected = EncodeBytes(text);
  EXPECT_EQ(shard->ReadAll().value(), std::vector<uint32_t>(expected.begin(), expected.end()));
}

TEST_F(TokenizeFileTest, LargerThanOneReadChunkRoundTrips) {
  std::string text;
  for (int i = 0; i < (3 << 20) + 5; ++i) text += "abc xyz"[i % 7];
  text += "\xfe";
  const std::string input = PathOf("big.txt");
  std::ofstream(input, std::ios::binary) << text;
  const std::string output = PathOf("big.bin");
  ASSERT_TRUE(TokenizeFile(input, output).ok());
  StatusOr<TokenShard> shard = ReadTokenShard(output);
  ASSERT_TRUE(shard.ok());
  ASSERT_EQ(shard->size(), static_cast<int64_t>(text.size()));
  const std::vector<uint32_t> tokens = shard->ReadAll().value();
  std::vector<int32_t> ids(tokens.begin(), tokens.end());
  EXPECT_EQ(DecodeTokens(ids), text);
}

TEST_F(TokenizeFileTest, MissingInputIsNotFoundNamingIt) {
  const std::string input = PathOf("absent.txt");
  Status status = TokenizeFile(input, PathOf("out.bin"));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(input));
  EXPECT_FALSE(fs::exists(PathOf("out.bin")));
}

TEST_F(TokenizeFileTest, EmptyInputIsInvalidArgumentNamingItAndWritesNothing) {
  const std::string input = PathOf("empty.txt");
  std::ofstream{input};
  Status status = TokenizeFile(input, PathOf("out.bin"));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(input));
  EXPECT_THAT(status.message(), HasSubstr("empty"));
  EXPECT_FALSE(fs::exists(PathOf("out.bin")));
}

TEST_F(TokenizeFileTest, DirectoryInputIsInvalidArgumentNamingIt) {
  Status status = TokenizeFile(dir_, PathOf("out.bin"));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(dir_));
}

TEST_F(TokenizeFileTest, UnwritableOutputNamesTheOutputPath) {
  const std::string input = PathOf("in.txt");
  std::ofstream(input) << "text";
  const std::string output = PathOf("missing_dir/out.bin");
  Status status = TokenizeFile(input, output);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(output));
}

}  // namespace
}  // namespace hoist::runtime
