#include "runtime/data/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/data/token_shard.h"
#include "runtime/interchange/bpe_tokenizer.h"

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

std::string TokenizerFixture(const std::string& name) {
  return std::string(HOIST_SOURCE_DIR) + "/tests/data/tokenizer/" + name;
}

TEST_F(TokenizeFileTest, WithATokenizerWritesItsIdsAsUint16) {
  std::ifstream fixture(TokenizerFixture("text.txt"), std::ios::binary);
  std::stringstream text;
  text << fixture.rdbuf();
  // Larger than one read chunk, so that the text crosses chunk boundaries.
  std::string input_text;
  while (input_text.size() < (size_t{3} << 20)) input_text += text.str();
  const std::string input = PathOf("in.txt");
  std::ofstream(input, std::ios::binary) << input_text;
  const std::string output = PathOf("out.bin");
  std::ostringstream progress;
  TokenizeOptions options;
  options.tokenizer_path = TokenizerFixture("llama3.json");
  options.progress = &progress;
  Status status = TokenizeFile(input, output, options);
  ASSERT_TRUE(status.ok()) << status.ToString();

  std::unique_ptr<BpeTokenizer> tokenizer = BpeTokenizer::Load(options.tokenizer_path).value();
  StatusOr<TokenShard> shard = ReadTokenShard(output);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->token_bytes(), 2);
  const std::vector<int32_t> expected = tokenizer->Encode(input_text);
  EXPECT_EQ(shard->ReadAll().value(), std::vector<uint32_t>(expected.begin(), expected.end()));
  EXPECT_THAT(progress.str(),
              HasSubstr(" MiB (100%), " + std::to_string(expected.size()) + " tokens\n"));
}

TEST_F(TokenizeFileTest, WithATokenizerPast16BitsWritesUint32) {
  const std::string input = PathOf("in.txt");
  std::ofstream(input, std::ios::binary) << "a<|wide|>b <|wide|> Привет<|begin_of_text|>";
  const std::string output = PathOf("out.bin");
  TokenizeOptions options;
  options.tokenizer_path = TokenizerFixture("llama3_wide.json");
  ASSERT_TRUE(TokenizeFile(input, output, options).ok());
  StatusOr<TokenShard> shard = ReadTokenShard(output);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->token_bytes(), 4);
  EXPECT_THAT(shard->ReadAll().value(), ::testing::Contains(70000u));
}

TEST_F(TokenizeFileTest, BadTokenizerNamesItsFileAndWritesNothing) {
  const std::string input = PathOf("in.txt");
  std::ofstream(input, std::ios::binary) << "text";
  const std::string tokenizer = PathOf("tokenizer.json");
  std::ofstream(tokenizer, std::ios::binary) << "{\"model\": {";
  TokenizeOptions options;
  options.tokenizer_path = tokenizer;
  Status status = TokenizeFile(input, PathOf("out.bin"), options);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(tokenizer));
  EXPECT_FALSE(fs::exists(PathOf("out.bin")));
}

}  // namespace
}  // namespace hoist::runtime
