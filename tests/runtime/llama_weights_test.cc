// Llama weights from Hugging Face directories (runtime/interchange/hf_checkpoint.h): the importer
// maps every tensor of LlamaForCausalLM where the model's layout puts it (checked against the
// test's own mapping by name, tests/runtime/llama_test_util.h), writing them back gives the files'
// bytes, config.json included (transformers 5's rope_parameters), and a checkpoint that lacks the
// untied head is refused naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "llama_test_util.h"
#include "runtime/config/config.h"
#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/interchange/llmc_checkpoint.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/decoder.h"
#include "runtime/model/gpt2_weights.h"
#include "runtime/model/model.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_llama_weights_test" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::vector<float> ReadAll(const WeightSource& source) {
  std::vector<float> weights(static_cast<size_t>(ModelParameterCount(source.model())));
  int64_t at = 0;
  int unit = 0;
  for (const zero::UnitSpec& spec : ModelUnits(source.model())) {
    const Status filled = source.FillUnit(unit++, weights.data() + at);
    EXPECT_TRUE(filled.ok()) << filled.ToString();
    at += spec.size;
  }
  return weights;
}

TEST(LlamaWeights, ReadsTheConfigIncludingLlama3RopeScaling) {
  auto source = OpenWeightSource(kData + "/fp32");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const ModelConfig& m = (*source)->model();
  EXPECT_EQ(m.family, ModelFamily::kLlama);
  EXPECT_EQ(m.n_layer, 2);
  EXPECT_EQ(m.n_head, 4);
  EXPECT_EQ(m.kv_heads(), 2);
  EXPECT_EQ(m.n_embd, 32);
  EXPECT_EQ(m.intermediate_size, 40);
  EXPECT_EQ(m.vocab_size, 100);
  EXPECT_EQ(m.positions(), 512);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-5f);
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_TRUE(m.rope_scaling.llama3);
  EXPECT_EQ(m.rope_scaling.original_max_position_embeddings, 256);
  EXPECT_FALSE(m.tie_word_embeddings);
  auto tied = OpenWeightSource(kData + "/tied");
  ASSERT_TRUE(tied.ok()) << tied.status().ToString();
  EXPECT_TRUE((*tied)->model().tie_word_embeddings);
}

TEST(LlamaWeights, TheImporterPutsEveryTensorWhereTheModelReadsIt) {
  for (const char* form : {"fp32", "tied"}) {
    auto source = OpenWeightSource(kData + std::string("/") + form);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    EXPECT_EQ(ReadAll(**source), ReadCheckpoint(kData + "/" + form, (*source)->model())) << form;
  }
}

TEST(LlamaWeights, WritingImportedWeightsBackGivesTheSameBytes) {
  for (const char* form : {"fp32", "tied"}) {
    auto source = OpenWeightSource(kData + std::string("/") + form);
    ASSERT_TRUE(source.ok());
    const std::vector<float> weights = ReadAll(**source);
    HfExportOptions options;
    options.base_config = (*source)->hf_config();
    const std::string out = TempDir(form);
    ASSERT_TRUE(WriteHfCheckpoint(out, (*source)->model(), weights.data(), options).ok());
    for (const char* name : {"model.safetensors", "config.json"}) {
      EXPECT_EQ(ReadFile(out + "/" + name), ReadFile(kData + "/" + form + "/" + name))
          << form << "/" << name;
    }
  }
}

TEST(LlamaWeights, AFreshExportReadsBackAsTheSameModel) {
  auto source = OpenWeightSource(kData + "/fp32");
  ASSERT_TRUE(source.ok());
  const std::vector<float> weights = ReadAll(**source);
  const std::string out = TempDir("fresh");
  HfExportOptions options;
  options.dtype = DType::kBFloat16;
  options.max_shard_bytes = 30000;
  ASSERT_TRUE(WriteHfCheckpoint(out, (*source)->model(), weights.data(), options).ok());
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  auto back = OpenWeightSource(out);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const ModelConfig& a = (*source)->model();
  const ModelConfig& b = (*back)->model();
  EXPECT_EQ(b.family, a.family);
  EXPECT_EQ(b.kv_heads(), a.kv_heads());
  EXPECT_EQ(b.rope_theta, a.rope_theta);
  EXPECT_EQ(b.rms_norm_eps, a.rms_norm_eps);
  EXPECT_TRUE(b.rope_scaling.llama3);
  EXPECT_EQ(b.rope_scaling.factor, a.rope_scaling.factor);
  const std::vector<float> rounded = ReadAll(**back);
  ASSERT_EQ(rounded.size(), weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    ASSERT_NEAR(rounded[i], weights[i], std::abs(weights[i]) / 128) << i;
  }
}

TEST(LlamaWeights, AMissingUntiedHeadIsNamedAndLlmcRefusesALlama) {
  const std::string dir = TempDir("no_head");
  fs::copy(kData + "/fp32", dir,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<SafetensorsOutput> outputs;
  for (const SafetensorsTensor& t : file->tensors()) {
    if (t.name == "lm_head.weight") continue;
    outputs.push_back({t.name, t.dtype, t.shape, [&, t](const SafetensorsOutput::Emit& emit) {
                         std::string bytes(static_cast<size_t>(t.end - t.begin), '\0');
                         HOIST_RETURN_IF_ERROR(
                             file->ReadBytes(t, 0, t.end - t.begin, bytes.data()));
                         return emit(bytes.data(), static_cast<int64_t>(bytes.size()));
                       }});
  }
  SortSafetensorsOutputs(&outputs);
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors.new", std::move(outputs), {}).ok());
  fs::rename(dir + "/model.safetensors.new", dir + "/model.safetensors");
  auto source = OpenWeightSource(dir);
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.status().message().find("lm_head.weight"), std::string::npos)
      << source.status().message();
  EXPECT_NE(source.status().message().find(dir), std::string::npos);

  auto llama = OpenWeightSource(kData + "/fp32");
  ASSERT_TRUE(llama.ok());
  const std::vector<float> weights = ReadAll(**llama);
  const Status refused = WriteLlmcCheckpoint(TempDir("llmc") + "/model.bin", (*llama)->model(),
                                             weights.data(), DType::kFloat32);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("--format hf"), std::string::npos) << refused.message();
}

}  // namespace
}  // namespace hoist::runtime

namespace hoist::runtime {
namespace {

// examples/llama3-8b.json, which the README's estimate uses: Llama 3 8B's published parameter
// count, from the model section alone (Hugging Face's key names, grouped-query attention, an
// untied head; the vocabulary 128256 is already a multiple of 128).
TEST(LlamaWeights, TheLlama3EightBExampleHasItsPublishedParameterCount) {
  auto config = LoadConfig(std::string(HOIST_SOURCE_DIR) + "/examples/llama3-8b.json", {}, 8);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model.family, ModelFamily::kLlama);
  EXPECT_EQ(ModelParameterCount(config->model), int64_t{8030261248});
}

}  // namespace
}  // namespace hoist::runtime
