// DecoderModel's layout, initialisation, activation checkpointing and failures: the units hold
// every Hugging Face tensor once; every checkpointing policy gives the loss and gradients of the
// run that keeps everything, bit for bit (fp32 and bf16, direct and tiled attention, kept inputs on
// the device or in pinned host memory, a second smaller micro-batch); the activation bytes the
// tracker measures equal ActivationFootprint; a store that fails stops the pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/random.h"
#include "runtime/model/decoder.h"

namespace hoist::runtime {
namespace {

using ::testing::ElementsAreArray;

ModelConfig SmallConfig(AttentionKind attention = AttentionKind::kDirect, bool tied = false) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.n_layer = 4;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 16;
  m.intermediate_size = 24;
  m.vocab_size = 40;
  m.seq_len = 12;
  m.rope_theta = 10000.0;
  m.rms_norm_eps = 1e-5f;
  m.tie_word_embeddings = tied;
  m.attention = attention;
  return m;
}

TEST(DecoderLayout, TheUnitsHoldEveryHuggingFaceTensorOnce) {
  for (bool tied : {false, true}) {
    const ModelConfig m = SmallConfig(AttentionKind::kDirect, tied);
    const DecoderLayout layout = DecoderLayout::For(m);
    ASSERT_EQ(layout.num_units(), m.n_layer + 2);
    const int64_t C = 16, V = 40, Vp = 128, hd = 4, I = 24;
    const int64_t block = 2 * C + (4 + 2 * 2) * hd * C + C * 4 * hd + 2 * I * C + C * I;
    EXPECT_EQ(layout.total, Vp * C + 4 * block + C + (tied ? 0 : Vp * C));
    // Every real element of every unit is covered by exactly one HF tensor, padding rows aside.
    std::vector<int> covered(static_cast<size_t>(layout.total));
    std::vector<std::string> names;
    for (const DecoderHfTensor& t : DecoderHfTensors(m)) {
      names.push_back(t.name);
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      const int64_t start = layout.unit_offsets[t.unit] + t.offset;
      for (int64_t i = start; i < start + n; ++i) ++covered[static_cast<size_t>(i)];
    }
    auto padding = [&](int64_t i) {
      const int64_t head = layout.Offset(kDecoderLmHead);
      return (i >= V * C && i < Vp * C) || (!tied && i >= head + V * C && i < head + Vp * C);
    };
    for (int64_t i = 0; i < layout.total; ++i) {
      ASSERT_EQ(covered[static_cast<size_t>(i)], padding(i) ? 0 : 1) << i;
    }
    EXPECT_EQ(names.front(), "model.embed_tokens.weight");
    EXPECT_EQ(names[1], "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(names.back(), tied ? "model.norm.weight" : "lm_head.weight");
    EXPECT_EQ(names.size(), size_t{1 + 9 * 4 + 1} + (tied ? 0 : 1));
    // Weight decay on the 2-D tensors only: a block's segments are norm, matrices, norm, matrices.
    const std::vector<zero::UnitSpec> units = layout.Units();
    ASSERT_EQ(units[1].segments.size(), 4u);
    EXPECT_FALSE(units[1].segments[0].decay);
    EXPECT_TRUE(units[1].segments[1].decay);
    EXPECT_EQ(units.back().segments.size(), tied ? 1u : 2u);
  }
}

TEST(DecoderLayout, InitializationIsHuggingFacesAndDependsOnTheUnitAlone) {
  const ModelConfig m = SmallConfig();
  const DecoderLayout layout = DecoderLayout::For(m);
  std::vector<float> unit(static_cast<size_t>(layout.unit_size(1)));
  InitializeDecoderUnit(m, 1, 7, unit.data());
  for (int64_t i = 0; i < m.n_embd; ++i) EXPECT_EQ(unit[static_cast<size_t>(i)], 1.0f);
  double sum = 0, sq = 0;
  const int64_t begin = layout.local_offsets[kDecoderQkv], n = layout.unit_sizes[kDecoderQkv];
  for (int64_t i = begin; i < begin + n; ++i) {
    sum += unit[static_cast<size_t>(i)];
    sq += double{unit[static_cast<size_t>(i)]} * unit[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(n)), 0.02, 0.003);
  EXPECT_NEAR(sum / static_cast<double>(n), 0.0, 0.003);
  std::vector<float> other(unit.size()), again(unit.size());
  InitializeDecoderUnit(m, 2, 7, other.data());
  InitializeDecoderUnit(m, 1, 7, again.data());
  EXPECT_EQ(unit, again);
  EXPECT_NE(unit, other);
  std::vector<float> embedding(static_cast<size_t>(layout.unit_size(0)));
  InitializeDecoderUnit(m, 0, 7, embedding.data());
  for (size_t i = size_t{40} * 16; i < embedding.size(); ++i) ASSERT_EQ(embedding[i], 0.0f);
}

TEST(LlamaModelCreate, RefusesDimensionsThatDoNotFit) {
  CpuDevice device;
  ModelConfig m = SmallConfig();
  m.n_kv_head = 3;
  auto created = DecoderModel::Create(m, 1, 4, &device);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("num_key_value_heads"), std::string::npos)
      << created.status().ToString();
  m = SmallConfig();
  m.family = ModelFamily::kGpt2;
  EXPECT_FALSE(DecoderModel::Create(m, 1, 4, &device).ok());
  m = SmallConfig();
  m.intermediate_size = 0;
  EXPECT_FALSE(DecoderModel::Create(m, 1, 4, &device).ok());
}

ActivationCheckpointingConfig Policy(CheckpointPolicy policy, int every_k = 2, bool cpu = false) {
  ActivationCheckpointingConfig ac;
  ac.policy = policy;
  ac.every_k = every_k;
  ac.cpu_checkpointing = cpu;
  return ac;
}

struct Result {
  float loss = 0;
  std::vector<float> grads;
  int64_t device_activation = 0;
  int64_t pinned_activation = 0;
  int64_t recomputed = 0;
};

// Two training micro-batches in a row, the second smaller than the model's size, gradients
// accumulated over both.
Result Train(const ModelConfig& m, DType type, const ActivationCheckpointingConfig& ac) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  auto model = std::move(DecoderModel::Create(m, 2, 12, &device, nullptr, type, ac)).value();
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
  result.recomputed = model->recomputed_blocks();
  return result;
}

TEST(LlamaCheckpointing, EveryPolicyGivesTheGradientsOfKeepingEverything) {
  for (AttentionKind attention : {AttentionKind::kDirect, AttentionKind::kTiled}) {
    for (bool tied : {false, true}) {
      const ModelConfig m = SmallConfig(attention, tied);
      for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
        const Result none = Train(m, type, Policy(CheckpointPolicy::kNone));
        EXPECT_EQ(none.recomputed, 0);
        const ActivationCheckpointingConfig policies[] = {
            Policy(CheckpointPolicy::kFull), Policy(CheckpointPolicy::kEveryK, 2),
            Policy(CheckpointPolicy::kEveryK, 3), Policy(CheckpointPolicy::kSelective),
            Policy(CheckpointPolicy::kFull, 2, true)};
        for (const ActivationCheckpointingConfig& ac : policies) {
          const std::string what =
              std::string(CheckpointPolicyName(ac.policy)) + " k" + std::to_string(ac.every_k) +
              (ac.cpu_checkpointing ? " cpu" : "") + " " + DTypeName(type) + (tied ? " tied" : "") +
              (attention == AttentionKind::kTiled ? " tiled" : "");
          const Result r = Train(m, type, ac);
          EXPECT_EQ(r.loss, none.loss) << what;
          EXPECT_THAT(r.grads, ElementsAreArray(none.grads)) << what;
          EXPECT_GT(r.recomputed, 0) << what;
          EXPECT_LT(r.device_activation, none.device_activation) << what;
          const Model::ActivationBytes footprint =
              DecoderModel::ActivationFootprint(m, 2, 12, type, ac);
          EXPECT_EQ(footprint.device, r.device_activation) << what;
          EXPECT_EQ(footprint.host_pinned > 0, ac.cpu_checkpointing) << what;
          EXPECT_GE(footprint.host_pinned, r.pinned_activation) << what;
        }
        EXPECT_EQ(DecoderModel::ActivationFootprint(m, 2, 12, type).device, none.device_activation);
      }
    }
  }
}

TEST(LlamaCheckpointing, PhasesAreReportedInOrderAndCheckpointedBlocksRecompute) {
  const ModelConfig m = SmallConfig(AttentionKind::kTiled);
  CpuDevice device;
  for (CheckpointPolicy policy : {CheckpointPolicy::kNone, CheckpointPolicy::kFull}) {
    auto model =
        std::move(DecoderModel::Create(m, 1, 4, &device, nullptr, DType::kFloat32, Policy(policy)))
            .value();
    HOIST_CHECK_OK(model->InitializeWeights(1));
    using P = Phase;
    std::vector<std::pair<P, int>> phases;
    model->set_phase_hook([&](P phase, int block) { phases.emplace_back(phase, block); });
    const int32_t tokens[] = {1, 2, 3, 4};
    model->Forward(tokens, tokens, 1, 4, 1.0f).value();
    HOIST_CHECK_OK(model->Backward());
    const std::vector<std::pair<P, int>> want = {
        {P::kForward, -1}, {P::kForward, 0},  {P::kForward, 1},  {P::kForward, 2},
        {P::kForward, 3},  {P::kLoss, -1},    {P::kLoss, -1},    {P::kBackward, 3},
        {P::kBackward, 2}, {P::kBackward, 1}, {P::kBackward, 0}, {P::kBackward, -1}};
    EXPECT_EQ(phases, want);
    EXPECT_EQ(model->recomputed_blocks(), policy == CheckpointPolicy::kNone ? 0 : m.n_layer);
    EXPECT_GE(model->recompute_seconds(), 0.0);
  }
}

// A store whose weights are a flat vector and which fails at the n-th acquire, as a ZeRO store
// whose collective failed: null, and the error kept.
class FailingStore final : public zero::ParamStore {
 public:
  FailingStore(const DecoderLayout& layout, int fail_at) : layout_(layout), fail_at_(fail_at) {
    params_.resize(static_cast<size_t>(layout.total), 0.01f);
    grads_.resize(static_cast<size_t>(layout.total), 0.0f);
  }
  StatusOr<const void*> AcquireParams(int unit) override {
    if (acquires_++ == fail_at_) {
      status_ = UnavailableError("all-gather of unit " + std::to_string(unit) + " failed");
      return status_;
    }
    return static_cast<const void*>(params_.data() + layout_.unit_offsets[unit]);
  }
  void ReleaseParams(int) override {}
  void Prefetch(int) override {}
  StatusOr<float*> AcquireGrads(int unit) override {
    return grads_.data() + layout_.unit_offsets[unit];
  }
  void ReleaseGrads(int) override {}
  Status status() const override { return status_; }
  int acquires() const { return acquires_; }

 private:
  const DecoderLayout& layout_;
  int fail_at_;
  int acquires_ = 0;
  std::vector<float> params_, grads_;
  Status status_;
};

TEST(LlamaModelStore, AStoreThatFailsStopsThePass) {
  const ModelConfig m = SmallConfig();
  const DecoderLayout layout = DecoderLayout::For(m);
  const std::vector<int32_t> tokens(8, 3);
  // Forward acquires units 0, 1..L, L+1; a failure at any of them stops it with the store's error.
  for (int fail_at = 0; fail_at < m.n_layer + 2; ++fail_at) {
    FailingStore store(layout, fail_at);
    CpuDevice device;
    auto model = std::move(DecoderModel::Create(m, 1, 8, &device, &store)).value();
    const StatusOr<float> loss = model->Forward(tokens.data(), tokens.data(), 1, 8, 1.0f);
    ASSERT_FALSE(loss.ok()) << fail_at;
    EXPECT_EQ(loss.status().code(), StatusCode::kUnavailable) << fail_at;
    EXPECT_NE(loss.status().message().find("all-gather of unit " + std::to_string(fail_at)),
              std::string::npos)
        << loss.status().ToString();
    EXPECT_EQ(store.acquires(), fail_at + 1);
    // The model asks nothing more of the store: every later pass returns the same error.
    EXPECT_EQ(model->Backward().message(), loss.status().message());
    EXPECT_EQ(model->Forward(tokens.data(), tokens.data(), 1, 8, 1.0f).status().message(),
              loss.status().message());
    EXPECT_EQ(store.acquires(), fail_at + 1);
  }
  // Failing in backward stops it there, with the store's error.
  FailingStore store(layout, m.n_layer + 3);
  CpuDevice device;
  auto model = std::move(DecoderModel::Create(m, 1, 8, &device, &store)).value();
  EXPECT_FALSE(std::isnan(model->Forward(tokens.data(), tokens.data(), 1, 8, 1.0f).value()));
  const Status backward = model->Backward();
  EXPECT_EQ(backward.code(), StatusCode::kUnavailable) << backward.ToString();
  EXPECT_EQ(store.acquires(), m.n_layer + 4);
}

}  // namespace
}  // namespace hoist::runtime
