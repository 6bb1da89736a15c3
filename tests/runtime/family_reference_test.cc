// The rotary families after Llama (Qwen2, Qwen3, Mistral, Gemma 2) against transformers
// (scripts/reference/<family>_hf.py, fixtures in tests/data/<family>_hf/): the model described by
// the fixture's config.json (read through the family's from_hf), with the checkpoint's weights
// mapped into its units by DecoderHfTensors, gives transformers' logits, loss and every gradient
// within 1e-5 relative, untied and tied where the fixture has both; tiled attention gives direct
// attention's within fp32 rounding (the windows and soft caps included); every checkpointing
// policy gives the same bits; bf16 stays near fp32; 20 AdamW steps reproduce PyTorch's losses;
// and the config.json written back for the model is the one read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/device.h"
#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/interchange/hf_config.h"
#include "runtime/model/decoder.h"
#include "tests/runtime/llama_test_util.h"

namespace hoist::runtime {
namespace {

struct Fixture {
  const char* family;   // tests/data/<family>_hf
  const char* weights;  // "fp32" or "tied"
  const char* reference;
};

std::string DataDir(const Fixture& f) {
  return std::string(HOIST_SOURCE_DIR) + "/tests/data/" + f.family + "_hf";
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ModelConfig ConfigOf(const Fixture& f) {
  StatusOr<HfModelConfig> read = ReadHfConfig(DataDir(f) + "/" + f.weights + "/config.json");
  HOIST_CHECK(read.ok()) << read.status().ToString();
  ModelConfig m = read->model;
  m.seq_len = kT;
  return m;
}

std::unique_ptr<DecoderModel> Load(const Fixture& f, const ModelConfig& m, CpuDevice* device,
                                   DType type = DType::kFloat32,
                                   const ActivationCheckpointingConfig& checkpointing = {}) {
  auto created = DecoderModel::Create(m, kB, kT, device, nullptr, type, checkpointing);
  HOIST_CHECK(created.ok()) << created.status().ToString();
  std::unique_ptr<DecoderModel> model = std::move(created).value();
  const std::vector<float> weights = ReadCheckpoint(DataDir(f) + "/" + f.weights, m);
  std::memcpy(model->params(), weights.data(), weights.size() * sizeof(float));
  return model;
}

class FamilyReference : public ::testing::TestWithParam<Fixture> {};

TEST_P(FamilyReference, LogitsLossAndGradientsMatchTransformers) {
  const Fixture f = GetParam();
  const ModelConfig m = ConfigOf(f);
  const Tensors ref(DataDir(f) + "/" + f.reference);
  const Tensors inputs_file(DataDir(f) + "/reference.safetensors");
  const std::vector<int32_t> inputs = inputs_file.Ints("input_ids");
  const std::vector<int32_t> targets = inputs_file.Ints("target_ids");
  CpuDevice device(Place::kDevice);
  std::unique_ptr<DecoderModel> model = Load(f, m, &device);

  model->Forward(inputs.data(), nullptr, kB, kT).value();
  const int V = m.vocab_size, Vp = m.padded_vocab_size();
  std::vector<float> logits(static_cast<size_t>(kB * kT * V));
  for (int i = 0; i < kB * kT; ++i) {
    std::memcpy(&logits[static_cast<size_t>(i * V)], model->logits() + int64_t{i} * Vp,
                V * sizeof(float));
  }
  std::printf("%s %s: worst logits error %.3g\n", f.family, f.weights,
              ExpectClose(logits, ref.Floats("logits"), 1e-5, "logits"));

  HOIST_CHECK_OK(model->ZeroGradients());
  const float loss = model->Forward(inputs.data(), targets.data(), kB, kT, 1.0f).value();
  const float want = ref.Floats("loss")[0];
  EXPECT_NEAR(loss, want, 1e-5 * want);
  HOIST_CHECK_OK(model->Backward());
  double worst = 0;
  std::string worst_name;
  for (const DecoderHfTensor& spec : DecoderHfTensors(m)) {
    const float* g = model->grads() + model->layout().unit_offsets[spec.unit] + spec.offset;
    const double err = ExpectClose(std::vector<float>(g, g + Elements(spec.shape)),
                                   ref.Floats("grad." + spec.name), 1e-5, spec.name);
    if (err > worst) worst = err, worst_name = spec.name;
  }
  std::printf("%s %s: loss %.9g vs %.9g, worst gradient error %.3g (%s)\n", f.family, f.weights,
              loss, want, worst, worst_name.c_str());
}

// The config.json written for the model read from it is the file itself, byte for byte.
TEST_P(FamilyReference, ConfigJsonRoundTrips) {
  const Fixture f = GetParam();
  const std::string path = DataDir(f) + "/" + f.weights + "/config.json";
  StatusOr<HfModelConfig> read = ReadHfConfig(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(HfConfigText(read->model, DType::kFloat32, read->json), ReadText(path));
}

struct Pass {
  float loss = 0;
  std::vector<float> grads;
};

Pass TrainingPass(const Fixture& f, AttentionKind attention, DType type,
                  const ActivationCheckpointingConfig& checkpointing = {}) {
  ModelConfig m = ConfigOf(f);
  m.attention = attention;
  const Tensors ref(DataDir(f) + "/reference.safetensors");
  const std::vector<int32_t> inputs = ref.Ints("input_ids"), targets = ref.Ints("target_ids");
  CpuDevice device(Place::kDevice);
  std::unique_ptr<DecoderModel> model = Load(f, m, &device, type, checkpointing);
  Pass pass;
  HOIST_CHECK_OK(model->ZeroGradients());
  pass.loss = model->Forward(inputs.data(), targets.data(), kB, kT, 1.0f).value();
  HOIST_CHECK_OK(model->Backward());
  pass.grads.assign(model->grads(), model->grads() + model->num_parameters());
  return pass;
}

// The two sum in different orders. Gemma 2's fixture caps its scores hard (a cap of 0.5 on scores
// up to 1.9 times it), so the scores' gradients are dout times 1 - tanh^2, down to 0.1: rounding
// differences there weigh up to ten times more against the gradient's size.
TEST_P(FamilyReference, TiledGivesDirectsResultsToFp32Rounding) {
  const Pass direct = TrainingPass(GetParam(), AttentionKind::kDirect, DType::kFloat32);
  const Pass tiled = TrainingPass(GetParam(), AttentionKind::kTiled, DType::kFloat32);
  EXPECT_NEAR(tiled.loss, direct.loss, 1e-6 * direct.loss);
  const double rtol = ConfigOf(GetParam()).attn_logit_softcapping > 0 ? 1e-4 : 1e-5;
  ExpectClose(tiled.grads, direct.grads, rtol, "tiled grads");
}

// Recomputation runs the same ops on the same inputs: every policy, the same bits.
TEST_P(FamilyReference, EveryCheckpointingPolicyGivesTheSameBits) {
  const Pass none = TrainingPass(GetParam(), AttentionKind::kDirect, DType::kFloat32);
  for (CheckpointPolicy policy :
       {CheckpointPolicy::kFull, CheckpointPolicy::kSelective, CheckpointPolicy::kEveryK}) {
    ActivationCheckpointingConfig c;
    c.policy = policy;
    const Pass pass = TrainingPass(GetParam(), AttentionKind::kDirect, DType::kFloat32, c);
    EXPECT_EQ(pass.loss, none.loss) << static_cast<int>(policy);
    EXPECT_EQ(pass.grads, none.grads) << static_cast<int>(policy);
  }
}

TEST_P(FamilyReference, Bf16StaysNearFp32) {
  const Pass fp32 = TrainingPass(GetParam(), AttentionKind::kTiled, DType::kFloat32);
  const Pass bf16 = TrainingPass(GetParam(), AttentionKind::kTiled, DType::kBFloat16);
  EXPECT_NEAR(bf16.loss, fp32.loss, 2e-3 * fp32.loss);
  EXPECT_NE(bf16.loss, fp32.loss) << "bf16 rounding must change something";
  double diff = 0, norm = 0;
  for (size_t i = 0; i < fp32.grads.size(); ++i) {
    diff += (double{bf16.grads[i]} - fp32.grads[i]) * (double{bf16.grads[i]} - fp32.grads[i]);
    norm += double{fp32.grads[i]} * fp32.grads[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 5e-2);
}

// 20 steps of AdamW (weight decay on the 2-D tensors) from the checkpoint, one micro-batch of
// train.bin per step in llm.c's order: PyTorch's losses.
TEST_P(FamilyReference, TwentyAdamWStepsMatchPyTorch) {
  const Fixture f = GetParam();
  const Tensors ref(DataDir(f) + "/" + f.reference);
  if (ref.Find("train_losses") == nullptr) GTEST_SKIP() << "this fixture has no training run";
  const ModelConfig m = ConfigOf(f);
  const std::vector<float> want = ref.Floats("train_losses");
  const std::vector<int32_t> tokens = ReadShard(DataDir(f) + "/train.bin");
  CpuDevice device(Place::kDevice);
  std::unique_ptr<DecoderModel> model = Load(f, m, &device);
  const double worst = ExpectAdamWLosses(*model, tokens, want);
  std::printf("%s: worst training loss error %.3g\n", f.family, worst);
}

// What the families' config.json says, read as hoist's model: Qwen2's window switched off,
// Qwen3's head_dim, Mistral's window on every layer, Gemma 2's local and global layers, scale and
// caps.
TEST(FamilyConfig, ReadsWhatEachFamilySets) {
  const ModelConfig qwen2 = ConfigOf({"qwen2", "fp32", ""});
  EXPECT_EQ(qwen2.family, ModelFamily::kQwen2);
  EXPECT_EQ(qwen2.head_dim(), 8);
  for (int l = 0; l < qwen2.n_layer; ++l) EXPECT_EQ(qwen2.window(l), 0);
  const ModelConfig qwen3 = ConfigOf({"qwen3", "tied", ""});
  EXPECT_EQ(qwen3.family, ModelFamily::kQwen3);
  EXPECT_EQ(qwen3.head_dim(), 16);
  EXPECT_TRUE(qwen3.tie_word_embeddings);
  const ModelConfig mistral = ConfigOf({"mistral", "fp32", ""});
  EXPECT_EQ(mistral.window(0), 5);
  EXPECT_EQ(mistral.window(1), 5);
  const ModelConfig gemma2 = ConfigOf({"gemma2", "fp32", ""});
  EXPECT_EQ(gemma2.window(0), 6);
  EXPECT_EQ(gemma2.window(1), 0);
  EXPECT_EQ(gemma2.window(2), 6);
  EXPECT_EQ(gemma2.query_pre_attn_scalar, 24);
  EXPECT_EQ(gemma2.attn_logit_softcapping, 0.5f);
  EXPECT_EQ(gemma2.final_logit_softcapping, 1.5f);
  EXPECT_TRUE(gemma2.tie_word_embeddings);
}

// A config.json hoist does not compute is refused naming the file and the key: another class
// of the family (a sequence classifier), another model_type, and each family's variants.
TEST(FamilyConfig, VariantsHoistDoesNotComputeAreRefusedNamingTheKey) {
  auto read = [](const char* family, const char* weights) {
    std::ifstream in(std::string(HOIST_SOURCE_DIR) + "/tests/data/" + family + "_hf/" + weights +
                     "/config.json");
    return nlohmann::json::parse(in);
  };
  const struct {
    const char* family;
    const char* key;
    nlohmann::json value;
  } cases[] = {
      {"qwen2", "architectures", {"Qwen2ForSequenceClassification"}},
      {"qwen2", "architectures", "Qwen2ForCausalLM"},
      {"qwen2", "model_type", "qwen2_moe"},
      {"qwen2", "hidden_act", "gelu"},
      {"qwen2", "layer_types", {"full_attention", "chunked_attention"}},
      {"qwen2", "layer_types", {"full_attention"}},
      {"qwen2", "max_window_layers", -1},
      {"qwen3", "attention_bias", true},
      {"qwen3", "head_dim", 15},
      {"qwen3", "head_dim", 0},
      {"mistral", "sliding_window", -2},
      {"mistral", "sliding_window", "4096"},
      {"mistral", "architectures", {"MistralForTokenClassification"}},
      {"gemma2", "hidden_activation", "silu"},
      {"gemma2", "tie_word_embeddings", false},
      {"gemma2", "attn_logit_softcapping", -1.0},
      {"gemma2", "final_logit_softcapping", "30"},
      {"gemma2", "query_pre_attn_scalar", -4},
      {"gemma2", "attention_bias", true},
  };
  for (const auto& c : cases) {
    nlohmann::json config = read(c.family, "fp32");
    config[c.key] = c.value;
    StatusOr<ModelConfig> model = ModelConfigFromHf(config, "x/config.json");
    ASSERT_FALSE(model.ok()) << c.family << " " << c.key << " " << c.value.dump();
    EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument) << model.status().ToString();
    EXPECT_NE(model.status().message().find("x/config.json"), std::string::npos)
        << model.status().message();
    EXPECT_NE(model.status().message().find(c.key), std::string::npos) << model.status().message();
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyReference,
                         ::testing::Values(Fixture{"qwen2", "fp32", "reference.safetensors"},
                                           Fixture{"qwen2", "tied", "tied_reference.safetensors"},
                                           Fixture{"qwen3", "fp32", "reference.safetensors"},
                                           Fixture{"qwen3", "tied", "tied_reference.safetensors"},
                                           Fixture{"mistral", "fp32", "reference.safetensors"},
                                           Fixture{"gemma2", "fp32", "reference.safetensors"}),
                         [](const auto& info) {
                           return std::string(info.param.family) + "_" + info.param.weights;
                         });

}  // namespace
}  // namespace hoist::runtime
