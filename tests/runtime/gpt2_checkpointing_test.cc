// Activation checkpointing in the model: every policy gives the loss and gradients of the run
// that keeps everything, bit for bit (recomputation runs the same kernels on the same inputs),
// for fp32 and 16-bit activations, direct and tiled attention, with the kept inputs on the device
// or in pinned host memory, and for a batch smaller than the one the model was sized for. The
// activation bytes the tracker measures equal Gpt2Model::ActivationFootprint, and none >
// every_k > full.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/random.h"
#include "runtime/model/gpt2.h"

namespace hoist::runtime {
namespace {

using ::testing::ElementsAreArray;

ModelConfig SmallConfig(AttentionKind attention) {
  ModelConfig m;
  m.n_layer = 4;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 40;
  m.seq_len = 12;
  m.attention = attention;
  return m;
}

ActivationCheckpointingConfig Policy(CheckpointPolicy policy, int every_k = 2, bool cpu = false) {
  ActivationCheckpointingConfig ac;
  ac.policy = policy;
  ac.every_k = every_k;
  ac.cpu_checkpointing = cpu;
  return ac;
}

std::string Describe(const ActivationCheckpointingConfig& ac) {
  std::string name = CheckpointPolicyName(ac.policy);
  if (ac.policy == CheckpointPolicy::kEveryK) name.append("/").append(std::to_string(ac.every_k));
  if (ac.cpu_checkpointing) name += "+cpu";
  return name;
}

struct Result {
  float loss = 0;
  std::vector<float> grads;
  int64_t device_activation = 0;
  int64_t pinned_activation = 0;
};

// Two training micro-batches in a row on one model, the second smaller than the model's size
// (strides of the kept stacks follow the batch), gradients accumulated over both.
Result Train(const ModelConfig& m, DType type, const ActivationCheckpointingConfig& ac) {
  const int max_B = 2, max_T = 12;
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  auto model = std::move(Gpt2Model::Create(m, max_B, max_T, &device, nullptr, type, ac)).value();
  HOIST_CHECK_OK(model->InitializeWeights(5));
  Rng rng(17);
  for (int64_t i = 0; i < model->num_parameters(); ++i) {
    model->params()[i] += static_cast<float>(0.05 * rng.Normal());
  }
  Result result;
  const MemorySnapshot snapshot = tracker.Snapshot();
  result.device_activation = snapshot.Current(Place::kDevice, Category::kActivation);
  result.pinned_activation = snapshot.Current(Place::kHostPinned, Category::kActivation);
  HOIST_CHECK_OK(model->ZeroGradients());
  for (auto [B, T] : {std::pair{2, 12}, std::pair{1, 7}}) {
    std::vector<int32_t> inputs, targets;
    for (int i = 0; i < B * T; ++i) {
      inputs.push_back(int32_t(rng.NextU64() % uint64_t(m.vocab_size)));
      targets.push_back(int32_t(rng.NextU64() % uint64_t(m.vocab_size)));
    }
    result.loss += model->Forward(inputs.data(), targets.data(), B, T, 0.5f).value();
    HOIST_CHECK_OK(model->Backward());
  }
  result.grads.assign(model->grads(), model->grads() + model->num_parameters());
  return result;
}

TEST(Gpt2Checkpointing, EveryPolicyGivesTheGradientsOfNoCheckpointingBitForBit) {
  const std::vector<ActivationCheckpointingConfig> policies = {
      Policy(CheckpointPolicy::kFull),      Policy(CheckpointPolicy::kFull, 2, true),
      Policy(CheckpointPolicy::kEveryK, 2), Policy(CheckpointPolicy::kEveryK, 3, true),
      Policy(CheckpointPolicy::kSelective), Policy(CheckpointPolicy::kSelective, 2, true),
      Policy(CheckpointPolicy::kEveryK, 1), Policy(CheckpointPolicy::kEveryK, 9)};
  for (AttentionKind attention : {AttentionKind::kDirect, AttentionKind::kTiled}) {
    for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      const ModelConfig m = SmallConfig(attention);
      const Result reference = Train(m, type, Policy(CheckpointPolicy::kNone));
      for (const ActivationCheckpointingConfig& ac : policies) {
        SCOPED_TRACE(Describe(ac) + (attention == AttentionKind::kTiled ? " tiled " : " direct ") +
                     DTypeName(type));
        const Result checkpointed = Train(m, type, ac);
        EXPECT_EQ(checkpointed.loss, reference.loss);
        ASSERT_EQ(checkpointed.grads.size(), reference.grads.size());
        EXPECT_EQ(std::memcmp(checkpointed.grads.data(), reference.grads.data(),
                              reference.grads.size() * sizeof(float)),
                  0);
        // Checkpointing one block in fp32 frees its layer of kept tensors and takes a working
        // layer to recompute them in: no saving, no loss.
        EXPECT_LE(checkpointed.device_activation, reference.device_activation);
        EXPECT_EQ(checkpointed.pinned_activation > 0, ac.cpu_checkpointing);
      }
    }
  }
}

TEST(Gpt2Checkpointing, MeasuredActivationBytesAreTheFootprintInThePredictedOrder) {
  for (AttentionKind attention : {AttentionKind::kDirect, AttentionKind::kTiled}) {
    for (DType type : {DType::kFloat32, DType::kBFloat16}) {
      ModelConfig m = SmallConfig(attention);
      m.n_layer = 8;
      m.n_embd = 32;
      m.seq_len = 64;
      const std::vector<ActivationCheckpointingConfig> order = {
          Policy(CheckpointPolicy::kNone), Policy(CheckpointPolicy::kSelective),
          Policy(CheckpointPolicy::kEveryK, 2), Policy(CheckpointPolicy::kFull),
          Policy(CheckpointPolicy::kFull, 2, true)};
      std::vector<int64_t> measured, predicted;
      for (const ActivationCheckpointingConfig& ac : order) {
        SCOPED_TRACE(Describe(ac));
        MemoryTracker tracker;
        CpuDevice device(Place::kDevice, &tracker);
        auto model = std::move(Gpt2Model::Create(m, 3, 64, &device, nullptr, type, ac)).value();
        const MemorySnapshot snapshot = tracker.Snapshot();
        const Gpt2Model::ActivationBytes footprint =
            Gpt2Model::ActivationFootprint(m, 3, 64, type, ac);
        EXPECT_EQ(snapshot.Current(Place::kDevice, Category::kActivation), footprint.device);
        EXPECT_EQ(snapshot.Current(Place::kHostPinned, Category::kActivation),
                  footprint.host_pinned);
        measured.push_back(snapshot.Current(Place::kDevice, Category::kActivation));
        predicted.push_back(footprint.device);
      }
      // Measured and predicted alike (so in the same order); none keeps the most, full the
      // least on the device, every_k in between. Whether selective or every_k keeps more
      // depends on the shape (selective keeps 9 of 16 C-wide tensors in every block).
      EXPECT_THAT(measured, ElementsAreArray(predicted));
      for (size_t i = 1; i < measured.size(); ++i) {
        EXPECT_LT(measured[i], measured[0]) << Describe(order[i]);
      }
      EXPECT_LT(measured[3], measured[2]);
      EXPECT_LT(measured[4], measured[3]);
    }
  }
}

TEST(Gpt2Checkpointing, FullKeepsOneResidualPerBlock) {
  // fp32, direct attention: full keeps L residual streams (B,T,C) where none keeps every saved
  // tensor; one working layer of each recomputed tensor comes on top.
  ModelConfig m = SmallConfig(AttentionKind::kDirect);
  m.n_layer = 6;
  m.n_embd = 32;
  const int B = 2, T = 12;
  const int64_t BT = B * T, C = m.n_embd, NH = m.n_head, L = m.n_layer;
  const int64_t per_layer = BT * (C + 3 * C + C + C + C + 4 * C + 4 * C + C) + B * NH * T * T;
  const auto none =
      Gpt2Model::ActivationFootprint(m, B, T, DType::kFloat32, Policy(CheckpointPolicy::kNone));
  const auto full =
      Gpt2Model::ActivationFootprint(m, B, T, DType::kFloat32, Policy(CheckpointPolicy::kFull));
  // none - full = (L - 1) layers of everything but residual3, less padding to 16 floats.
  const int64_t expected = (L - 1) * (per_layer - BT * C) * 4;
  EXPECT_NEAR(double(none.device - full.device), double(expected), 16 * 4 * 20);
}

TEST(Gpt2Checkpointing, PhasesAreReportedInOrderAndCheckpointedBlocksRecompute) {
  const ModelConfig m = SmallConfig(AttentionKind::kTiled);
  CpuDevice device;
  for (CheckpointPolicy policy : {CheckpointPolicy::kNone, CheckpointPolicy::kFull}) {
    auto model =
        std::move(Gpt2Model::Create(m, 1, 4, &device, nullptr, DType::kFloat32, Policy(policy)))
            .value();
    HOIST_CHECK_OK(model->InitializeWeights(1));
    std::vector<std::string> phases;
    model->set_phase_hook([&](Phase phase, int block) {
      std::string name = PhaseName(phase);
      if (block >= 0) name.append(" ").append(std::to_string(block));
      phases.push_back(std::move(name));
    });
    const int32_t tokens[] = {1, 2, 3, 4};
    model->Forward(tokens, tokens, 1, 4, 1.0f).value();
    HOIST_CHECK_OK(model->Backward());
    EXPECT_THAT(phases,
                ElementsAreArray<std::string>(
                    {"forward", "forward 0", "forward 1", "forward 2", "forward 3", "loss", "loss",
                     "backward 3", "backward 2", "backward 1", "backward 0", "backward"}));
    // Full recomputes every block; none none.
    EXPECT_EQ(model->recomputed_blocks(), policy == CheckpointPolicy::kNone ? 0 : m.n_layer);
    EXPECT_GE(model->recompute_seconds(), 0.0);
  }
}

}  // namespace
}  // namespace hoist::runtime
