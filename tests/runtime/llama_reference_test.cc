// DecoderModel against transformers' LlamaForCausalLM (scripts/reference/llama_hf.py, fixtures in
// tests/data/llama_hf/): the weights of the Hugging Face checkpoint mapped into the model's units
// by DecoderHfTensors give transformers' logits, loss and every gradient within 1e-5 relative,
// untied and tied; tiled attention gives direct attention's within fp32 rounding; bf16 stays near
// fp32; and 20 AdamW steps from the checkpoint reproduce PyTorch's losses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/decoder.h"
#include "tests/runtime/llama_test_util.h"

namespace hoist::runtime {
namespace {

// The logits of the model's last inference forward without the padded columns.
std::vector<float> Logits(const DecoderModel& model, int B, int T) {
  const int V = model.config().vocab_size, Vp = model.config().padded_vocab_size();
  std::vector<float> logits(static_cast<size_t>(B * T * V));
  for (int i = 0; i < B * T; ++i) {
    std::memcpy(&logits[static_cast<size_t>(i * V)], model.logits() + int64_t{i} * Vp,
                V * sizeof(float));
  }
  return logits;
}

// The gradient of one Hugging Face tensor, read out of the model's flat gradients.
std::vector<float> Grad(DecoderModel& model, const DecoderHfTensor& spec) {
  const float* g = model.grads() + model.layout().unit_offsets[spec.unit] + spec.offset;
  return std::vector<float>(g, g + Elements(spec.shape));
}

class LlamaReference : public ::testing::TestWithParam<bool> {};

TEST_P(LlamaReference, LogitsLossAndGradientsMatchTransformers) {
  const bool tied = GetParam();
  const ModelConfig m = FixtureConfig(tied);
  const Tensors inputs_file(kData + "/reference.safetensors");
  const Tensors ref(kData + (tied ? "/tied_reference.safetensors" : "/reference.safetensors"));
  const std::vector<int32_t> inputs = inputs_file.Ints("input_ids");
  const std::vector<int32_t> targets = inputs_file.Ints("target_ids");
  CpuDevice device(Place::kDevice);
  auto created = DecoderModel::Create(m, kB, kT, &device);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  DecoderModel& model = **created;
  const std::vector<float> weights = ReadCheckpoint(kData + (tied ? "/tied" : "/fp32"), m);
  std::memcpy(model.params(), weights.data(), weights.size() * sizeof(float));

  model.Forward(inputs.data(), nullptr, kB, kT).value();
  double worst = ExpectClose(Logits(model, kB, kT), ref.Floats("logits"), 1e-5, "logits");
  std::printf("worst logits error %.3g\n", worst);

  HOIST_CHECK_OK(model.ZeroGradients());
  const float loss = model.Forward(inputs.data(), targets.data(), kB, kT, 1.0f).value();
  const float want = ref.Floats("loss")[0];
  EXPECT_NEAR(loss, want, 1e-5 * want);
  std::printf("loss %.9g vs %.9g (relative %.3g)\n", loss, want, std::abs(loss - want) / want);
  HOIST_CHECK_OK(model.Backward());
  worst = 0;
  std::string worst_name;
  for (const DecoderHfTensor& spec : DecoderHfTensors(m)) {
    const double err =
        ExpectClose(Grad(model, spec), ref.Floats("grad." + spec.name), 1e-5, spec.name);
    if (err > worst) worst = err, worst_name = spec.name;
  }
  std::printf("worst gradient error %.3g (%s)\n", worst, worst_name.c_str());
  // The padded rows of the embedding (and of an untied head) get no gradient.
  const int64_t C = m.n_embd, V = m.vocab_size, Vp = m.padded_vocab_size();
  for (int64_t i = V * C; i < Vp * C; ++i) ASSERT_EQ(model.grads()[i], 0.0f) << i;
}

INSTANTIATE_TEST_SUITE_P(UntiedAndTied, LlamaReference, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tied" : "Untied"; });

struct Pass {
  float loss = 0;
  std::vector<float> logits;
  std::vector<float> grads;
};

// A training pass of the fixture model with the given attention and activation type.
Pass TrainingPass(AttentionKind attention, DType type) {
  ModelConfig m = FixtureConfig(false);
  m.attention = attention;
  const Tensors ref(kData + "/reference.safetensors");
  const std::vector<int32_t> inputs = ref.Ints("input_ids"), targets = ref.Ints("target_ids");
  CpuDevice device(Place::kDevice);
  auto model = std::move(DecoderModel::Create(m, kB, kT, &device, nullptr, type)).value();
  const std::vector<float> weights = ReadCheckpoint(kData + "/fp32", m);
  std::memcpy(model->params(), weights.data(), weights.size() * sizeof(float));
  Pass pass;
  if (type == DType::kFloat32) {
    model->Forward(inputs.data(), nullptr, kB, kT).value();
    pass.logits = Logits(*model, kB, kT);
  }
  HOIST_CHECK_OK(model->ZeroGradients());
  pass.loss = model->Forward(inputs.data(), targets.data(), kB, kT, 1.0f).value();
  HOIST_CHECK_OK(model->Backward());
  pass.grads.assign(model->grads(), model->grads() + model->num_parameters());
  return pass;
}

TEST(LlamaAttention, TiledGivesDirectsResultsToFp32Rounding) {
  const Pass direct = TrainingPass(AttentionKind::kDirect, DType::kFloat32);
  const Pass tiled = TrainingPass(AttentionKind::kTiled, DType::kFloat32);
  EXPECT_NEAR(tiled.loss, direct.loss, 1e-6 * direct.loss);
  const double logits = ExpectClose(tiled.logits, direct.logits, 1e-5, "tiled logits");
  const double grads = ExpectClose(tiled.grads, direct.grads, 1e-5, "tiled grads");
  std::printf("tiled vs direct: logits %.3g, grads %.3g\n", logits, grads);
}

// ||got - want|| / ||want||.
double NormRelative(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / norm);
}

// bf16 weights and activations: 8 significant bits, each stored value up to 2^-9 relative off,
// and a block rounds about ten times on the way (norm, projections, rotation, attention, SwiGLU,
// residuals) through two blocks and the head: the gradients as a whole a few percent at most. An
// element of a gradient whose terms cancel can be off by more relative to its tensor's scale, so
// elementwise the bound is looser. The loss, an average over 32 positions, moves far less.
TEST(LlamaPrecision, Bf16StaysNearFp32) {
  for (AttentionKind attention : {AttentionKind::kDirect, AttentionKind::kTiled}) {
    const Pass fp32 = TrainingPass(attention, DType::kFloat32);
    const Pass bf16 = TrainingPass(attention, DType::kBFloat16);
    EXPECT_NEAR(bf16.loss, fp32.loss, 1e-3 * fp32.loss);
    EXPECT_NE(bf16.loss, fp32.loss) << "bf16 rounding must change something";
    const double norm = NormRelative(bf16.grads, fp32.grads);
    EXPECT_LT(norm, 5e-2);
    EXPECT_GT(norm, 1e-4);
    const double worst = ExpectClose(bf16.grads, fp32.grads, 0.15, "bf16 grads");
    std::printf("bf16 vs fp32: loss %.3g relative, grads %.3g (norm), %.3g (worst element)\n",
                std::abs(bf16.loss - fp32.loss) / fp32.loss, norm, worst);
  }
}

// fp16 keeps 11 significant bits, 8 times bf16's precision, in a range these values never leave:
// the same comparison with bounds 8 times tighter.
TEST(LlamaPrecision, Fp16StaysNearFp32) {
  const Pass fp32 = TrainingPass(AttentionKind::kDirect, DType::kFloat32);
  const Pass fp16 = TrainingPass(AttentionKind::kDirect, DType::kFloat16);
  EXPECT_NEAR(fp16.loss, fp32.loss, 1.25e-4 * fp32.loss);
  const double norm = NormRelative(fp16.grads, fp32.grads);
  EXPECT_LT(norm, 5e-2 / 8);
  EXPECT_GT(norm, 1e-6);
  const double worst = ExpectClose(fp16.grads, fp32.grads, 0.15 / 8, "fp16 grads");
  std::printf("fp16 vs fp32: loss %.3g relative, grads %.3g (norm), %.3g (worst element)\n",
              std::abs(fp16.loss - fp32.loss) / fp32.loss, norm, worst);
}

// 20 steps of AdamW (the backend's multi-tensor step, weight decay on the 2-D tensors) from the
// checkpoint, one micro-batch of train.bin per step in llm.c's order: PyTorch's losses.
TEST(LlamaTraining, TwentyAdamWStepsMatchPyTorch) {
  const ModelConfig m = FixtureConfig(false);
  const Tensors ref(kData + "/reference.safetensors");
  const std::vector<float> want = ref.Floats("train_losses");
  const std::vector<int32_t> tokens = ReadShard(kData + "/train.bin");
  CpuDevice device(Place::kDevice);
  auto model = std::move(DecoderModel::Create(m, kB, kT, &device)).value();
  const std::vector<float> weights = ReadCheckpoint(kData + "/fp32", m);
  std::memcpy(model->params(), weights.data(), weights.size() * sizeof(float));
  const double worst = ExpectAdamWLosses(*model, tokens, want);
  std::printf("worst training loss error %.3g\n", worst);
}

}  // namespace
}  // namespace hoist::runtime
