#include "runtime/model/gpt2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/host_stream.h"
#include "core/live_memory.h"
#include "core/random.h"
#include "kernels/cpu_backend.h"

namespace hoist::runtime {
namespace {

ModelConfig TinyConfig() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 40;
  m.seq_len = 8;
  return m;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
};

Batch RandomBatch(int B, int T, int V, uint64_t seed) {
  Rng rng(seed);
  Batch batch;
  for (int i = 0; i < B * T; ++i) {
    batch.inputs.push_back(int32_t(rng.NextU64() % V));
    batch.targets.push_back(int32_t(rng.NextU64() % V));
  }
  return batch;
}

TEST(ParamLayout, MatchesGpt2SmallParameterCount) {
  ModelConfig m;  // GPT-2 124M with the vocabulary padded to 50304
  ParamLayout layout = ParamLayout::For(m);
  // Hugging Face's 124,439,808 parameters plus (50304 - 50257) * 768 padded rows of wte.
  EXPECT_EQ(layout.total, 124439808 + (50304 - 50257) * 768);
  EXPECT_EQ(m.padded_vocab_size(), 50304);
  EXPECT_EQ(layout.Offset(kWpe), layout.sizes[kWte]);
  // Units: the embeddings, one per block, the final layernorm, back to back.
  ASSERT_EQ(layout.num_units(), 14);
  EXPECT_EQ(layout.unit_size(0), (50304 + 1024) * 768);
  EXPECT_EQ(layout.unit_size(1), 12 * 768 * 768 + 13 * 768);
  EXPECT_EQ(layout.unit_size(13), 2 * 768);
  EXPECT_EQ(layout.Offset(kQkvW, 3), layout.unit_offsets[4] + 2 * 768);
  EXPECT_EQ(layout.Offset(kLnfB), layout.total - 768);
  // llm.c's order puts every layer of a tensor together; FlatIndex maps it to the units.
  EXPECT_EQ(layout.llmc_offsets[kLn1W], layout.sizes[kWte] + layout.sizes[kWpe]);
  EXPECT_EQ(layout.FlatIndex(kLn1W, 768 + 5), layout.Offset(kLn1W, 1) + 5);
  int64_t decayed = 0;
  for (const auto& unit : layout.Units()) {
    for (const auto& segment : unit.segments) {
      if (segment.decay) decayed += segment.end - segment.begin;
    }
  }
  int64_t decayed_tensors = 0;
  for (int t = 0; t < kNumParamTensors; ++t) {
    if (ParamLayout::Decayed(t)) decayed_tensors += layout.sizes[t];
  }
  EXPECT_EQ(decayed, decayed_tensors);
}

// The six 2-D weights, written out here rather than taken from ParamLayout::Decayed: decay on
// exactly those (the engine's closed-form AdamW tests pin what it does with the segments).
TEST(ParamLayout, DecaysExactlyTheTwoDimensionalWeights) {
  const std::set<int> two_dimensional = {kWte, kWpe, kQkvW, kAttProjW, kFcW, kFcProjW};
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    EXPECT_EQ(ParamLayout::Decayed(tensor), two_dimensional.count(tensor) == 1)
        << ParamLayout::Name(tensor);
  }
}

TEST(Gpt2Model, InitialLossIsNearLogVocab) {
  CpuDevice device;
  ModelConfig m = TinyConfig();
  auto model = Gpt2Model::Create(m, 2, 8, &device);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  HOIST_CHECK_OK((*model)->InitializeWeights(1));
  Batch batch = RandomBatch(2, 8, m.vocab_size, 2);
  float loss = (*model)->Forward(batch.inputs.data(), batch.targets.data(), 2, 8).value();
  EXPECT_NEAR(loss, std::log(40.0), 0.1);
}

TEST(Gpt2Model, InitializationFollowsGpt2Scales) {
  CpuDevice device;
  ModelConfig m = TinyConfig();
  m.n_embd = 64;
  m.n_layer = 4;
  auto model = std::move(Gpt2Model::Create(m, 1, 8, &device)).value();
  HOIST_CHECK_OK(model->InitializeWeights(3));
  auto stddev = [&](int tensor) {
    const ParamLayout& layout = model->layout();
    int64_t n = layout.sizes[tensor];
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double p = model->params()[layout.FlatIndex(tensor, i)];
      sum += p, sq += p * p;
    }
    double mean = sum / n;
    return std::sqrt(sq / n - mean * mean);
  };
  EXPECT_NEAR(stddev(kQkvW), 0.02, 0.002);
  EXPECT_NEAR(stddev(kFcProjW), 0.02 / std::sqrt(2.0 * m.n_layer), 0.001);
  EXPECT_EQ(model->param(kLn1W)[0], 1.0f);
  EXPECT_EQ(model->param(kQkvB)[5], 0.0f);
  // Padded vocabulary rows stay zero.
  const float* pad_row = model->param(kWte) + int64_t{m.vocab_size} * m.n_embd;
  for (int c = 0; c < m.n_embd; ++c) EXPECT_EQ(pad_row[c], 0.0f);
}

// Whole-model gradient check: analytic gradients against central differences of the loss, on a
// sample of entries of every parameter tensor. The forward is float32, so differences use a
// step large enough to stand above rounding, and the comparison is over the sampled vector.
TEST(Gpt2Model, GradientsMatchFiniteDifferences) {
  CpuDevice device;
  ModelConfig m = TinyConfig();
  const int B = 2, T = 8;
  auto model = std::move(Gpt2Model::Create(m, B, T, &device)).value();
  HOIST_CHECK_OK(model->InitializeWeights(5));
  // Larger weights than GPT-2's init make every path carry a visible gradient.
  Rng rng(11);
  for (int64_t i = 0; i < model->num_parameters(); ++i) {
    model->params()[i] += static_cast<float>(0.1 * rng.Normal());
  }
  Batch batch = RandomBatch(B, T, m.vocab_size, 6);
  HOIST_CHECK_OK(model->ZeroGradients());
  model->Forward(batch.inputs.data(), batch.targets.data(), B, T, 1.0f).value();
  HOIST_CHECK_OK(model->Backward());
  std::vector<float> analytic(model->grads(), model->grads() + model->num_parameters());

  auto loss_at = [&](int64_t index, float value) {
    float saved = model->params()[index];
    model->params()[index] = value;
    float loss = model->Forward(batch.inputs.data(), batch.targets.data(), B, T).value();
    model->params()[index] = saved;
    return double(loss);
  };
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    int64_t size = model->layout().sizes[tensor];
    if (tensor == kWte) size = int64_t{m.vocab_size} * m.n_embd;  // padded rows have no gradient
    std::vector<double> fd, an;
    for (int k = 0; k < 12; ++k) {
      int64_t index = model->layout().FlatIndex(tensor, int64_t(rng.NextU64() % uint64_t(size)));
      const float h = 1e-2f;
      float p = model->params()[index];
      fd.push_back((loss_at(index, p + h) - loss_at(index, p - h)) / (2.0 * h));
      an.push_back(analytic[index]);
    }
    double dot = 0, nf = 0, na = 0, diff = 0;
    for (size_t i = 0; i < fd.size(); ++i) {
      dot += fd[i] * an[i], nf += fd[i] * fd[i], na += an[i] * an[i];
      diff += (fd[i] - an[i]) * (fd[i] - an[i]);
    }
    ASSERT_GT(na, 0.0) << ParamLayout::Name(tensor) << " has an all-zero sampled gradient";
    EXPECT_LE(std::sqrt(diff), 1e-3 + 2e-2 * std::sqrt(nf))
        << "tensor " << ParamLayout::Name(tensor) << ": |fd - analytic| = " << std::sqrt(diff)
        << ", |fd| = " << std::sqrt(nf);
  }
  // The padded rows of wte never get a gradient.
  const float* pad = model->grad(kWte) + int64_t{m.vocab_size} * m.n_embd;
  for (int64_t i = 0; i < int64_t{m.padded_vocab_size() - m.vocab_size} * m.n_embd; ++i) {
    ASSERT_EQ(pad[i], 0.0f);
  }
}

TEST(Gpt2Model, AccumulatedHalvesEqualOneFullBatch) {
  CpuDevice device;
  ModelConfig m = TinyConfig();
  auto model = std::move(Gpt2Model::Create(m, 4, 8, &device)).value();
  HOIST_CHECK_OK(model->InitializeWeights(9));
  Batch batch = RandomBatch(4, 8, m.vocab_size, 10);
  HOIST_CHECK_OK(model->ZeroGradients());
  model->Forward(batch.inputs.data(), batch.targets.data(), 4, 8, 1.0f).value();
  HOIST_CHECK_OK(model->Backward());
  std::vector<float> full(model->grads(), model->grads() + model->num_parameters());
  HOIST_CHECK_OK(model->ZeroGradients());
  for (int half = 0; half < 2; ++half) {
    model->Forward(batch.inputs.data() + half * 16, batch.targets.data() + half * 16, 2, 8, 0.5f)
        .value();
    HOIST_CHECK_OK(model->Backward());
  }
  for (int64_t i = 0; i < model->num_parameters(); ++i) {
    ASSERT_NEAR(model->grads()[i], full[i], 1e-6 + 1e-4 * std::abs(full[i])) << "index " << i;
  }
}

// The model computes through its backend's ops on the compute stream. On a backend whose streams
// run their work on worker threads, a result read before the stream has finished it (the loss, a
// gradient, a 16-bit activation kept or restored) would differ from the inline run: every
// combination of activation storage, attention and checkpointing gives the inline bits.
TEST(Gpt2Model, ThreadedStreamsGiveTheInlineBits) {
  struct Case {
    DType storage;
    AttentionKind attention;
    CheckpointPolicy policy;
    bool cpu_checkpointing;
  };
  const Case cases[] = {
      {DType::kFloat32, AttentionKind::kDirect, CheckpointPolicy::kNone, false},
      {DType::kBFloat16, AttentionKind::kDirect, CheckpointPolicy::kSelective, false},
      {DType::kFloat16, AttentionKind::kTiled, CheckpointPolicy::kFull, true},
      {DType::kFloat32, AttentionKind::kTiled, CheckpointPolicy::kEveryK, true},
  };
  // And no backend op is handed pageable host memory where device memory belongs.
  live_memory::ScopedEnable checked;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(DTypeName(c.storage)) + ", " + CheckpointPolicyName(c.policy));
    ModelConfig m = TinyConfig();
    m.attention = c.attention;
    ActivationCheckpointingConfig checkpointing;
    checkpointing.policy = c.policy;
    checkpointing.cpu_checkpointing = c.cpu_checkpointing;
    const Batch batch = RandomBatch(2, 8, m.vocab_size, 21);
    std::vector<float> losses[2], grads[2];
    for (int threaded = 0; threaded < 2; ++threaded) {
      MemoryTracker tracker;
      CpuDevice device(Place::kDevice, &tracker);
      kernels::CpuBackend backend(
          &device, threaded == 1 ? HostStream::Mode::kThreaded : HostStream::Mode::kInline);
      auto created = Gpt2Model::Create(m, 2, 8, &backend, nullptr, c.storage, checkpointing);
      ASSERT_TRUE(created.ok()) << created.status().ToString();
      std::unique_ptr<Gpt2Model> model = std::move(created).value();
      HOIST_CHECK_OK(model->InitializeWeights(5));
      for (int pass = 0; pass < 2; ++pass) {  // the second pass adds to the first's gradients
        losses[threaded].push_back(
            model->Forward(batch.inputs.data(), batch.targets.data(), 2, 8, 1.0f).value());
        HOIST_CHECK_OK(model->Backward());
      }
      grads[threaded].assign(model->grads(), model->grads() + model->num_parameters());
    }
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_TRUE(grads[0] == grads[1]);
  }
}

// A refused call returns the error naming what was wrong and touches nothing: the model computes
// the next pass as if it had not been asked.
TEST(Gpt2Model, ARefusedPassReturnsTheErrorAndChangesNothing) {
  CpuDevice device;
  ModelConfig m = TinyConfig();
  auto model = std::move(Gpt2Model::Create(m, 2, 8, &device)).value();
  HOIST_CHECK_OK(model->InitializeWeights(3));
  const Batch batch = RandomBatch(2, 8, m.vocab_size, 4);
  const StatusOr<float> refused = model->Forward(nullptr, batch.targets.data(), 2, 8, 1.0f);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("inputs is null"), std::string::npos)
      << refused.status().ToString();
  auto fresh = std::move(Gpt2Model::Create(m, 2, 8, &device)).value();
  HOIST_CHECK_OK(fresh->InitializeWeights(3));
  EXPECT_EQ(model->Forward(batch.inputs.data(), batch.targets.data(), 2, 8).value(),
            fresh->Forward(batch.inputs.data(), batch.targets.data(), 2, 8).value());
}

TEST(Gpt2Model, CreateRejectsABatchLongerThanTheContext) {
  CpuDevice device;
  auto model = Gpt2Model::Create(TinyConfig(), 1, 9, &device);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("seq_len"), std::string::npos);
}

TEST(Gpt2Model, MemoryIsTrackedByCategory) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  ModelConfig m = TinyConfig();
  {
    auto model = std::move(Gpt2Model::Create(m, 2, 8, &device)).value();
    MemorySnapshot s = tracker.Snapshot();
    const int64_t param_bytes = model->num_parameters() * 4;
    EXPECT_EQ(s.Current(Place::kDevice, Category::kParam), param_bytes);
    EXPECT_EQ(s.Current(Place::kDevice, Category::kGrad), param_bytes);
    EXPECT_GT(s.Current(Place::kDevice, Category::kActivation), 0);
  }
  EXPECT_EQ(tracker.Snapshot().CurrentTotal(Place::kDevice), 0);
}

// One training micro-batch: the loss and the gradients it leaves.
std::pair<float, std::vector<float>> LossAndGradients(Gpt2Model& model, const Batch& batch, int B,
                                                      int T) {
  HOIST_CHECK_OK(model.ZeroGradients());
  const float loss = model.Forward(batch.inputs.data(), batch.targets.data(), B, T, 1.0f).value();
  HOIST_CHECK_OK(model.Backward());
  return {loss, std::vector<float>(model.grads(), model.grads() + model.num_parameters())};
}

// ‖a − b‖ / ‖b‖; b must not be all zero.
double NormRelative(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  EXPECT_GT(ref, 0.0);
  return std::sqrt(diff / ref);
}

// Mixed precision on the CPU: every op's output rounded to bf16 and the activations kept for
// backward stored in bf16. The same weights give the fp32 model's loss and gradients within bf16's
// rounding, the saved activations take about half the bytes, and the numbers are reproducible.
TEST(Gpt2Model, Bf16ActivationsStayWithinBf16RoundingOfFp32) {
  ModelConfig m = TinyConfig();
  m.n_layer = 6;
  m.n_embd = 32;
  m.n_head = 4;
  const int B = 2, T = 8;
  MemoryTracker fp32_tracker, bf16_tracker;
  CpuDevice fp32_device(Place::kDevice, &fp32_tracker), bf16_device(Place::kDevice, &bf16_tracker);
  auto fp32 = std::move(Gpt2Model::Create(m, B, T, &fp32_device)).value();
  auto bf16 =
      std::move(Gpt2Model::Create(m, B, T, &bf16_device, nullptr, DType::kBFloat16)).value();
  HOIST_CHECK_OK(fp32->InitializeWeights(7));
  HOIST_CHECK_OK(bf16->InitializeWeights(7));
  Rng rng(13);
  for (int64_t i = 0; i < fp32->num_parameters(); ++i) {
    const float bump = static_cast<float>(0.05 * rng.Normal());
    fp32->params()[i] += bump;
    bf16->params()[i] += bump;
  }
  Batch batch = RandomBatch(B, T, m.vocab_size, 3);
  auto run = [&](Gpt2Model& model) { return LossAndGradients(model, batch, B, T); };
  const auto [loss32, grads32] = run(*fp32);
  const auto [loss16, grads16] = run(*bf16);
  const auto [again16, grads_again] = run(*bf16);
  EXPECT_EQ(loss16, again16);
  EXPECT_EQ(grads16, grads_again);
  EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
  EXPECT_NE(loss16, loss32) << "bf16 rounding must change something";
  // Eight significant bits per stored value, through six layers: a few percent at most.
  const double error = NormRelative(grads16, grads32);
  EXPECT_LT(error, 5e-2);
  EXPECT_GT(error, 1e-4);
  // The kept activations: 2 bytes instead of 4 for the L layers, plus one fp32 working layer.
  const int64_t act32 = fp32_tracker.Snapshot().Current(Place::kDevice, Category::kActivation);
  const int64_t act16 = bf16_tracker.Snapshot().Current(Place::kDevice, Category::kActivation);
  EXPECT_LT(act16, 0.75 * act32) << act16 << " vs " << act32;
}

// Tiled attention keeps a log-sum-exp per query row instead of the T x T probabilities: the same
// loss and gradients as direct attention (to fp32 rounding), in less activation memory.
TEST(Gpt2Model, TiledAttentionMatchesDirectInLessMemory) {
  ModelConfig m = TinyConfig();
  m.n_layer = 3;
  m.n_embd = 32;
  m.n_head = 4;
  m.seq_len = 80;  // not a multiple of the 64-row tiles
  const int B = 2, T = 80;
  ModelConfig tiled_config = m;
  tiled_config.attention = AttentionKind::kTiled;
  MemoryTracker direct_tracker, tiled_tracker;
  CpuDevice direct_device(Place::kDevice, &direct_tracker),
      tiled_device(Place::kDevice, &tiled_tracker);
  auto direct = std::move(Gpt2Model::Create(m, B, T, &direct_device)).value();
  auto tiled = std::move(Gpt2Model::Create(tiled_config, B, T, &tiled_device)).value();
  HOIST_CHECK_OK(direct->InitializeWeights(21));
  HOIST_CHECK_OK(tiled->InitializeWeights(21));
  Batch batch = RandomBatch(B, T, m.vocab_size, 8);
  auto run = [&](Gpt2Model& model) { return LossAndGradients(model, batch, B, T); };
  const auto [loss_direct, grads_direct] = run(*direct);
  const auto [loss_tiled, grads_tiled] = run(*tiled);
  EXPECT_NEAR(loss_tiled, loss_direct, 1e-5 * loss_direct);
  EXPECT_LT(NormRelative(grads_tiled, grads_direct), 1e-5);
  // Direct keeps L*B*NH*T*T floats of probabilities, tiled L*B*NH*T log-sum-exps.
  const int64_t act_direct =
      direct_tracker.Snapshot().Current(Place::kDevice, Category::kActivation);
  const int64_t act_tiled = tiled_tracker.Snapshot().Current(Place::kDevice, Category::kActivation);
  const int64_t probabilities = int64_t{m.n_layer} * B * m.n_head * T * T * 4;
  const int64_t lse = int64_t{m.n_layer} * B * m.n_head * T * 4;
  EXPECT_NEAR(double(act_direct - act_tiled), double(probabilities - lse), 64.0 * 4);
}

}  // namespace
}  // namespace hoist::runtime
