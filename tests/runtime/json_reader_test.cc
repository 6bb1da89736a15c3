// The bounded JSON reader (core/json_reader.h), and every reader of foreign JSON routed
// through it: documents nested 100,000+ deep used to crash the process (stack overflow in the
// parsed tree) instead of being refused with the file's name and the limit.
#include "core/json_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/interchange/bpe_tokenizer.h"
#include "runtime/interchange/hf_config.h"
#include "runtime/interchange/peft_adapter.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/lora.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// What the attack used: far past any stack, far past the limit.
constexpr size_t kDeep = 150000;

std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

class JsonReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(::testing::TempDir()) /
            ("hoist_json_reader_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  std::string dir_;
};

TEST_F(JsonReaderTest, NestingBeyondTheLimitIsRefusedWithWhereAndTheLimit) {
  JsonFault fault = JsonFault::kNone;
  StatusOr<nlohmann::json> parsed =
      ParseJson("{\"a\": " + Nested(kDeep) + "}", "doc.json", JsonLimits{}, &fault);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(fault, JsonFault::kTooDeep);
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  // The object is level 1, so the 64th bracket opens level 65.
  EXPECT_THAT(parsed.status().message(),
              AllOf(HasSubstr("doc.json: at line 1, column " + std::to_string(6 + kJsonMaxDepth)),
                    HasSubstr("nest more than 64 levels deep")));
}

TEST_F(JsonReaderTest, TheDepthLimitItselfIsFineAndStringsDoNotCount) {
  EXPECT_TRUE(ParseJson(Nested(kJsonMaxDepth), "x").ok());
  EXPECT_FALSE(ParseJson(Nested(kJsonMaxDepth + 1), "x").ok());
  const StatusOr<nlohmann::json> quoted =
      ParseJson("{\"a\": \"" + std::string(kDeep, '[') + "\\\"{\"}", "x");
  ASSERT_TRUE(quoted.ok()) << quoted.status().ToString();
  EXPECT_EQ((*quoted)["a"].get<std::string>().size(), kDeep + 2);
}

TEST_F(JsonReaderTest, LargerThanTheLimitIsRefusedBeforeReading) {
  std::string big(4098, ' ');
  big.front() = '[';
  big.back() = ']';
  const std::string path = Write("big.json", big);
  StatusOr<nlohmann::json> read = ReadJsonFile(FileSystem::Posix(), path, {kJsonMaxDepth, 1024});
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), AllOf(HasSubstr(path), HasSubstr("more than 1024 bytes")));
  JsonFault fault = JsonFault::kNone;
  EXPECT_FALSE(ParseJson(std::string(2048, ' '), "x", {kJsonMaxDepth, 1024}, &fault).ok());
  EXPECT_EQ(fault, JsonFault::kTooLarge);
}

TEST_F(JsonReaderTest, SyntaxErrorsAndDuplicateKeysNameWhere) {
  JsonFault fault = JsonFault::kNone;
  StatusOr<nlohmann::json> bad = ParseJson("{\n  \"a\": tru\n}", "doc.json", {}, &fault);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(fault, JsonFault::kNotJson);
  EXPECT_THAT(bad.status().message(), HasSubstr("doc.json: not valid JSON at line 2"));
  bad = ParseJson(R"({"a": [0, {"b": 1, "b": 2}]})", "doc.json", {}, &fault);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(fault, JsonFault::kDuplicateKey);
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("a[1].b"), HasSubstr("twice")));
}

TEST_F(JsonReaderTest, DeepHuggingFaceConfigIsRefusedNamingTheFile) {
  const std::string path =
      Write("hf/config.json", "{\"model_type\": \"gpt2\", \"x\": " + Nested(kDeep) + "}");
  StatusOr<HfModelConfig> read = ReadHfConfig(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), AllOf(HasSubstr(path), HasSubstr("nest more than 64")));
}

TEST_F(JsonReaderTest, DeepCheckpointManifestIsRefusedNamingTheFile) {
  const float weights[2] = {1.0f, 2.0f};
  const std::vector<CheckpointBlob> blobs = {{"w", weights, int64_t{sizeof(weights)}}};
  ASSERT_TRUE(WriteRankShard(dir_, 3, 0, blobs).ok());
  ASSERT_TRUE(CommitCheckpoint(dir_, 3, 1, nlohmann::json::object()).ok());
  const std::string step_dir = dir_ + "/" + CheckpointStepDirName(3);
  Write(CheckpointStepDirName(3) + "/manifest.json", Nested(100000));
  StatusOr<CheckpointReader> reader = CheckpointReader::Open(step_dir, 0);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(reader.status().message(),
              AllOf(HasSubstr(step_dir + "/manifest.json"), HasSubstr("levels deep")));
}

TEST_F(JsonReaderTest, DeepTokenizerJsonIsRefused) {
  const std::string path = Write("tokenizer.json", "{\"model\": " + Nested(kDeep) + "}");
  auto tokenizer = BpeTokenizer::Load(path, FileSystem::Posix());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), AllOf(HasSubstr(path), HasSubstr("levels deep")));
}

TEST_F(JsonReaderTest, DeepAdapterConfigIsRefused) {
  Write("adapter/adapter_config.json", "{\"peft_type\": \"LORA\", \"r\": " + Nested(kDeep) + "}");
  StatusOr<LoraConfig> lora = ReadPeftAdapterConfig(dir_ + "/adapter");
  ASSERT_FALSE(lora.ok());
  EXPECT_THAT(lora.status().message(),
              AllOf(HasSubstr("adapter_config.json"), HasSubstr("levels deep")));
}

TEST_F(JsonReaderTest, DeepSafetensorsHeaderIsRefused) {
  std::string json = "{\"__metadata__\": " + Nested(kDeep) + "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(bytes.data(), &n, 8);
  const std::string path = Write("deep.safetensors", bytes + json);
  StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(file.status().message(), AllOf(HasSubstr(path), HasSubstr("levels deep")));
}

}  // namespace
}  // namespace hoist::runtime
