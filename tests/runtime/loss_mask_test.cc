// Loss masks in the model's passes: a negative target masks its position off the loss (a prompt
// token under assistant-only or completion-only loss). The mean is over the positions that count,
// and a masked position adds nothing to the gradients. Checked against two independent
// references: the loss of the same sequences run without the masked ones, and the cross-entropy
// of the model's own logits computed in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/random.h"
#include "runtime/model/model.h"

namespace hoist::runtime {
namespace {

constexpr int kT = 8;

ModelConfig Gpt2() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 40;
  m.seq_len = kT;
  return m;
}

ModelConfig Llama() {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 16;
  m.intermediate_size = 24;
  m.vocab_size = 40;
  m.seq_len = kT;
  m.rope_theta = 10000.0;
  m.rms_norm_eps = 1e-5f;
  return m;
}

// A model with its own store, its weights drawn from `seed`.
std::unique_ptr<Model> MakeModel(const ModelConfig& config, int B, Device* device) {
  auto model = std::move(CreateModel(config, B, kT, device)).value();
  int64_t offset = 0;
  int unit = 0;
  for (const zero::UnitSpec& spec : ModelUnits(config)) {
    model->InitializeUnit(unit++, 17, model->params() + offset);
    offset += spec.size;
  }
  return model;
}

std::vector<int32_t> Tokens(int n, int V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.NextU64() % static_cast<uint64_t>(V));
  return tokens;
}

class LossMask : public ::testing::TestWithParam<ModelConfig (*)()> {};

// Masking every position of the second sequence gives the loss and the gradients of the first
// sequence run alone (the sequences attend only to themselves), to the rounding of sums taken in
// another order.
TEST_P(LossMask, AMaskedSequenceIsAsIfItWereNotInTheBatch) {
  const ModelConfig config = GetParam()();
  CpuDevice device;
  const std::vector<int32_t> inputs = Tokens(2 * kT, config.vocab_size, 1);
  std::vector<int32_t> targets = Tokens(2 * kT, config.vocab_size, 2);
  std::fill(targets.begin() + kT, targets.end(), -1);

  auto pair = MakeModel(config, 2, &device);
  auto alone = MakeModel(config, 1, &device);
  HOIST_CHECK_OK(pair->ZeroGradients());
  HOIST_CHECK_OK(alone->ZeroGradients());
  const float pair_loss = pair->Forward(inputs.data(), targets.data(), 2, kT, 1.0f).value();
  HOIST_CHECK_OK(pair->Backward());
  const float alone_loss = alone->Forward(inputs.data(), targets.data(), 1, kT, 1.0f).value();
  HOIST_CHECK_OK(alone->Backward());
  EXPECT_NEAR(pair_loss, alone_loss, 1e-6 * alone_loss);
  const int64_t n = pair->num_parameters();
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, double(std::fabs(pair->grads()[i] - alone->grads()[i])));
    largest = std::max(largest, double(std::fabs(alone->grads()[i])));
  }
  ASSERT_GT(largest, 0.0);
  EXPECT_LE(worst, 1e-5 * largest) << "largest gradient " << largest;
}

// A mask inside the sequences (prompt tokens first, then the answer): the mean over the counted
// positions of -log softmax of the model's own logits, computed in double.
TEST_P(LossMask, TheMeanIsOverTheCountedPositions) {
  const ModelConfig config = GetParam()();
  CpuDevice device;
  const int B = 2, V = config.vocab_size, Vp = config.padded_vocab_size();
  const std::vector<int32_t> inputs = Tokens(B * kT, V, 3);
  std::vector<int32_t> targets = Tokens(B * kT, V, 4);
  for (int p : {0, 1, 2, 8, 9, 13}) targets[static_cast<size_t>(p)] = p % 2 == 0 ? -1 : -100;

  auto model = MakeModel(config, B, &device);
  ASSERT_TRUE(model->Forward(inputs.data(), nullptr, B, kT).ok());
  double sum = 0;
  int counted = 0;
  for (int p = 0; p < B * kT; ++p) {
    const int32_t target = targets[static_cast<size_t>(p)];
    if (target < 0) continue;
    const float* row = model->logits() + int64_t{p} * Vp;
    double max = row[0], total = 0;
    for (int v = 1; v < V; ++v) max = std::max(max, double(row[v]));
    for (int v = 0; v < V; ++v) total += std::exp(double(row[v]) - max);
    sum += std::log(total) + max - row[target];
    ++counted;
  }
  ASSERT_EQ(counted, B * kT - 6);
  const float loss = model->Forward(inputs.data(), targets.data(), B, kT).value();
  EXPECT_NEAR(loss, sum / counted, 1e-5 * sum / counted);
}

// Nothing counted: a loss of 0 and no gradient at all.
TEST_P(LossMask, AllMaskedGivesNoLossAndNoGradient) {
  const ModelConfig config = GetParam()();
  CpuDevice device;
  const std::vector<int32_t> inputs = Tokens(2 * kT, config.vocab_size, 5);
  const std::vector<int32_t> targets(2 * kT, -1);
  auto model = MakeModel(config, 2, &device);
  HOIST_CHECK_OK(model->ZeroGradients());
  EXPECT_EQ(model->Forward(inputs.data(), targets.data(), 2, kT, 1.0f).value(), 0.0f);
  HOIST_CHECK_OK(model->Backward());
  const float* grads = model->grads();
  EXPECT_TRUE(std::all_of(grads, grads + model->num_parameters(), [](float g) { return g == 0; }));
}

INSTANTIATE_TEST_SUITE_P(Families, LossMask, ::testing::Values(&Gpt2, &Llama),
                         [](const ::testing::TestParamInfo<ModelConfig (*)()>& info) {
                           return std::string(ModelFamilyName(info.param().family));
                         });

}  // namespace
}  // namespace hoist::runtime
