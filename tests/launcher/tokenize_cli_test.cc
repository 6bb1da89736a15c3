// `hoist data tokenize --tokenizer` and `hoist sample --tokenizer`: a Hugging Face tokenizer.json
// from tests/data/tokenizer/ (scripts/reference/tokenizer.py) end to end.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/launcher/run_hoist.h"

namespace {

namespace fs = std::filesystem;

using hoist::launcher::testing::RunHoist;

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("hoist_tokenize_cli_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string Fixture(const std::string& name) {
  return std::string(HOIST_SOURCE_DIR) + "/tests/data/tokenizer/" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

struct Shard {
  int32_t magic = 0;
  int32_t version = 0;
  std::vector<uint32_t> tokens;
};

Shard ReadShard(const fs::path& path) {
  const std::string bytes = ReadBytes(path.string());
  Shard shard;
  if (bytes.size() < 1024) return shard;
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  shard.magic = header[0];
  shard.version = header[1];
  const size_t width = shard.magic == 20240801 ? 4 : 2;
  for (int32_t i = 0; i < header[2] && 1024 + (i + 1) * width <= bytes.size(); ++i) {
    uint32_t token = 0;
    std::memcpy(&token, bytes.data() + 1024 + i * width, width);
    shard.tokens.push_back(token);
  }
  return shard;
}

TEST(TokenizeCli, WithATokenizerWritesTheLibrarysIdsAndAProgressLine) {
  const fs::path dir = TempDir("ids");
  fs::copy_file(Fixture("text.txt"), dir / "text.txt");
  const auto r =
      RunHoist("data tokenize text.txt -o text.bin --tokenizer " + Fixture("gpt2.json"), dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(100%)"), std::string::npos) << r.output;
  const Shard shard = ReadShard(dir / "text.bin");
  EXPECT_EQ(shard.magic, 20240520);
  EXPECT_EQ(shard.version, 1);
  const nlohmann::json expected = nlohmann::json::parse(ReadBytes(Fixture("expected.json")));
  EXPECT_EQ(shard.tokens, expected["gpt2.json"]["ids"].get<std::vector<uint32_t>>());
  EXPECT_NE(r.output.find(std::to_string(shard.tokens.size()) + " tokens"), std::string::npos)
      << r.output;
}

TEST(TokenizeCli, IdsPast16BitsWriteAUint32Shard) {
  const fs::path dir = TempDir("wide");
  std::ofstream(dir / "wide.txt") << "a<|wide|>b <|wide|> Привет<|begin_of_text|>";
  const auto r = RunHoist(
      "data tokenize wide.txt -o wide.bin --tokenizer " + Fixture("llama3_wide.json"), dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Shard shard = ReadShard(dir / "wide.bin");
  EXPECT_EQ(shard.magic, 20240801);
  EXPECT_EQ(shard.version, 7);
  const nlohmann::json expected = nlohmann::json::parse(ReadBytes(Fixture("expected.json")));
  EXPECT_EQ(shard.tokens, expected["llama3_wide.json"]["wide_ids"].get<std::vector<uint32_t>>());
}

TEST(TokenizeCli, AnUnsupportedTokenizerIsNamedWithItsField) {
  const fs::path dir = TempDir("bad");
  std::ofstream(dir / "text.txt") << "hello";
  nlohmann::json config = nlohmann::json::parse(ReadBytes(Fixture("gpt2.json")));
  config["model"]["type"] = "WordPiece";
  std::ofstream(dir / "tok.json") << config.dump();
  const auto r = RunHoist("data tokenize text.txt -o text.bin --tokenizer tok.json", dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tok.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.type"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "text.bin"));
}

// Trains a tiny model on BPE tokens, then samples from it with the same tokenizer.
TEST(TokenizeCli, SampleEncodesAndDecodesWithTheTokenizer) {
  const fs::path dir = TempDir("sample");
  {
    std::ofstream text(dir / "book.txt");
    for (int i = 0; i < 20; ++i) text << ReadBytes(Fixture("text.txt"));
  }
  const std::string tokenizer = Fixture("gpt2.json");
  auto r = RunHoist("data tokenize book.txt -o book.bin --tokenizer " + tokenizer, dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunHoist(
      "train --set data.train=book.bin --set data.val=book.bin --set model.vocab_size=800 "
      "--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32 "
      "--set train.steps=4 --set scheduler.params.total_num_steps=4 "
      "--set scheduler.params.warmup_num_steps=1 --set train.eval_interval=4 "
      "--set checkpoint.dir=ck --set checkpoint.interval_steps=4",
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunHoist(
      "sample --checkpoint ck --prompt 'Привет, мир' -n 8 --seed 3 --tokenizer " + tokenizer, dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("Привет, мир", 0), 0u) << r.output;
  // Without the tokenizer, a vocabulary larger than bytes cannot be decoded: said, not guessed.
  r = RunHoist("sample --checkpoint ck -n 4", dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
}

}  // namespace
