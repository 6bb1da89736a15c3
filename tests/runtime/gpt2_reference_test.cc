// Gpt2Model against an independent float64 GPT-2 written from the definition (Hugging Face's
// GPT2LMHeadModel): it shares no code with the model or the kernels, only the parameter layout,
// from which it reads the weights by offset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numbers>
#include <vector>

#include "core/device.h"
#include "core/random.h"
#include "runtime/config/config.h"
#include "runtime/model/gpt2.h"

namespace hoist::runtime {
namespace {

constexpr double kLayerNormEps = 1e-5;

// Forward tolerances, |model - ref| <= atol + rtol * |ref|. The model is float32 (unit roundoff
// 6e-8) with polynomial exp and tanh good to a few ulp; after two blocks of dot products up to
// 4C = 64 long, three layernorms and two softmaxes, its logits here (O(1) to a few units) are off
// by up to ~2e-6. atol 1e-5 and rtol 1e-4 sit a few times above that and well below what a
// wrong formula costs: a 0.1% change of the attention scale, erf GELU for tanh GELU or
// layernorm eps 1e-6 for 1e-5 each exceed them. atol covers logits that cancel to near zero,
// whose error is set by the size of their terms, not their own.
constexpr double kAtol = 1e-5;
constexpr double kRtol = 1e-4;

ModelConfig TinyConfig() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 50;  // padded to 128
  m.seq_len = 8;
  return m;
}

struct Batch {
  std::vector<int32_t> inputs, targets;  // (B,T)
};

Batch RandomBatch(int B, int T, int V, uint64_t seed) {
  Rng rng(seed);
  Batch batch;
  for (int i = 0; i < B * T; ++i) {
    batch.inputs.push_back(static_cast<int32_t>(rng.NextU64() % static_cast<uint64_t>(V)));
    batch.targets.push_back(static_cast<int32_t>(rng.NextU64() % static_cast<uint64_t>(V)));
  }
  return batch;
}

// Weights far from GPT-2's small initialisation, so that every tensor moves the output: O(1)
// activations after every linear layer, attention scores of a few units (softmax neither
// uniform nor one-hot), GELU inputs in its curved range, layernorm gains and biases away from
// 1 and 0. The padded rows of wte are random too, so their logits are not zero.
void RandomizeWeights(Gpt2Model* model, uint64_t seed) {
  Rng rng(seed);
  const ParamLayout& layout = model->layout();
  auto fill = [&](int tensor, double mean, double std) {
    for (int64_t i = 0; i < layout.sizes[tensor]; ++i) {
      model->params()[layout.FlatIndex(tensor, i)] = static_cast<float>(mean + std * rng.Normal());
    }
  };
  fill(kWte, 0.0, 0.5);
  fill(kWpe, 0.0, 0.5);
  for (int tensor : {kLn1W, kLn2W, kLnfW}) fill(tensor, 1.0, 0.3);
  for (int tensor : {kLn1B, kLn2B, kLnfB, kQkvB, kAttProjB, kFcB, kFcProjB}) fill(tensor, 0.0, 0.3);
  fill(kQkvW, 0.0, 0.4);
  fill(kAttProjW, 0.0, 0.35);
  fill(kFcW, 0.0, 0.35);
  fill(kFcProjW, 0.0, 0.2);
}

// The model's weights in llm.c's tensor-major order, the reference's layout.
std::vector<double> ParamsAsDouble(const Gpt2Model& model) {
  const ParamLayout& layout = model.layout();
  std::vector<double> p(static_cast<size_t>(model.num_parameters()));
  for (int t = 0; t < kNumParamTensors; ++t) {
    for (int64_t i = 0; i < layout.sizes[t]; ++i) {
      p[static_cast<size_t>(layout.llmc_offsets[t] + i)] = model.params()[layout.FlatIndex(t, i)];
    }
  }
  return p;
}

// out (rows, out_dim) = in (rows, in_dim) @ w^T + b, with w stored (out_dim, in_dim).
std::vector<double> Linear(const std::vector<double>& in, int rows, int in_dim, const double* w,
                           const double* b, int out_dim) {
  std::vector<double> out(static_cast<size_t>(rows) * out_dim);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out_dim; ++o) {
      double sum = b != nullptr ? b[o] : 0.0;
      for (int i = 0; i < in_dim; ++i) sum += in[r * in_dim + i] * w[o * in_dim + i];
      out[r * out_dim + o] = sum;
    }
  }
  return out;
}

// Normalises each row by its mean and biased variance.
std::vector<double> LayerNorm(const std::vector<double>& x, int rows, int C, const double* w,
                              const double* b) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    const double* row = &x[r * C];
    double mean = 0.0;
    for (int c = 0; c < C; ++c) mean += row[c];
    mean /= C;
    double var = 0.0;
    for (int c = 0; c < C; ++c) var += (row[c] - mean) * (row[c] - mean);
    var /= C;
    const double inv_std = 1.0 / std::sqrt(var + kLayerNormEps);
    for (int c = 0; c < C; ++c) out[r * C + c] = (row[c] - mean) * inv_std * w[c] + b[c];
  }
  return out;
}

// Hugging Face's gelu_new.
double GeluTanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// Causal multi-head self-attention of one sequence: qkv (T, 3C) -> (T, C).
std::vector<double> CausalSelfAttention(const std::vector<double>& qkv, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> y(static_cast<size_t>(T) * C, 0.0);
  std::vector<double> weights(T);
  for (int h = 0; h < NH; ++h) {
    for (int t = 0; t < T; ++t) {
      const double* q = &qkv[t * 3 * C + h * hs];
      double max_score = -INFINITY;
      for (int s = 0; s <= t; ++s) {
        const double* k = &qkv[s * 3 * C + C + h * hs];
        double score = 0.0;
        for (int i = 0; i < hs; ++i) score += q[i] * k[i];
        weights[s] = score * scale;
        max_score = std::max(max_score, weights[s]);
      }
      double sum = 0.0;
      for (int s = 0; s <= t; ++s) sum += weights[s] = std::exp(weights[s] - max_score);
      for (int s = 0; s <= t; ++s) {
        const double* v = &qkv[s * 3 * C + 2 * C + h * hs];
        for (int i = 0; i < hs; ++i) y[t * C + h * hs + i] += weights[s] / sum * v[i];
      }
    }
  }
  return y;
}

// The float64 GPT-2 forward over (B,T) tokens with weights `p` in llm.c's tensor-major order. Fills
// `logits` (B,T,V) over the real vocabulary when non-null; returns the mean cross-entropy over
// the B*T positions when `targets` is non-null, else 0.
double ReferenceForward(const ModelConfig& m, const std::vector<double>& p, const int32_t* inputs,
                        const int32_t* targets, int B, int T, std::vector<double>* logits) {
  const int L = m.n_layer, NH = m.n_head, C = m.n_embd, V = m.vocab_size;
  const ParamLayout layout = ParamLayout::For(m);
  auto at = [&](int tensor) { return p.data() + layout.llmc_offsets[tensor]; };
  if (logits != nullptr) logits->assign(static_cast<size_t>(B) * T * V, 0.0);
  double loss_sum = 0.0;
  for (int b = 0; b < B; ++b) {
    const int32_t* x = inputs + b * T;
    std::vector<double> h(static_cast<size_t>(T) * C);
    for (int t = 0; t < T; ++t) {
      for (int c = 0; c < C; ++c) h[t * C + c] = at(kWte)[x[t] * C + c] + at(kWpe)[t * C + c];
    }
    for (int l = 0; l < L; ++l) {
      std::vector<double> ln1 = LayerNorm(h, T, C, at(kLn1W) + l * C, at(kLn1B) + l * C);
      std::vector<double> qkv =
          Linear(ln1, T, C, at(kQkvW) + l * 3 * C * C, at(kQkvB) + l * 3 * C, 3 * C);
      std::vector<double> y = CausalSelfAttention(qkv, T, C, NH);
      std::vector<double> proj =
          Linear(y, T, C, at(kAttProjW) + l * C * C, at(kAttProjB) + l * C, C);
      std::vector<double> a(h.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = h[i] + proj[i];
      std::vector<double> ln2 = LayerNorm(a, T, C, at(kLn2W) + l * C, at(kLn2B) + l * C);
      std::vector<double> fc =
          Linear(ln2, T, C, at(kFcW) + l * 4 * C * C, at(kFcB) + l * 4 * C, 4 * C);
      for (double& f : fc) f = GeluTanh(f);
      std::vector<double> mlp =
          Linear(fc, T, 4 * C, at(kFcProjW) + l * C * 4 * C, at(kFcProjB) + l * C, C);
      for (size_t i = 0; i < h.size(); ++i) h[i] = a[i] + mlp[i];
    }
    std::vector<double> hf = LayerNorm(h, T, C, at(kLnfW), at(kLnfB));
    // The LM head is wte itself, over the real vocabulary only.
    std::vector<double> z = Linear(hf, T, C, at(kWte), nullptr, V);
    if (logits != nullptr) std::copy(z.begin(), z.end(), logits->begin() + b * T * V);
    if (targets == nullptr) continue;
    for (int t = 0; t < T; ++t) {
      const double* row = &z[t * V];
      const double max_logit = *std::max_element(row, row + V);
      double sum = 0.0;
      for (int v = 0; v < V; ++v) sum += std::exp(row[v] - max_logit);
      loss_sum += std::log(sum) + max_logit - row[targets[b * T + t]];
    }
  }
  return targets != nullptr ? loss_sum / (static_cast<double>(B) * T) : 0.0;
}

bool Close(double actual, double ref, double atol, double rtol) {
  return std::abs(actual - ref) <= atol + rtol * std::abs(ref);
}

// Model logits (B,T,Vp) over the first V columns against reference logits (B,T,V).
void ExpectLogitsMatch(const float* model_logits, const std::vector<double>& ref, int BT, int V,
                       int Vp) {
  int mismatches = 0;
  for (int n = 0; n < BT; ++n) {
    for (int v = 0; v < V; ++v) {
      const double actual = model_logits[n * Vp + v], expected = ref[n * V + v];
      if (!Close(actual, expected, kAtol, kRtol) && ++mismatches <= 5) {
        ADD_FAILURE() << "logit (" << n << ", " << v << "): model " << actual << ", reference "
                      << expected;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

class Gpt2ReferenceTest : public ::testing::Test {
 protected:
  static constexpr int kB = 3, kT = 7;

  void SetUp() override {
    config_ = TinyConfig();
    model_ = std::move(Gpt2Model::Create(config_, kB, kT, &device_)).value();
    RandomizeWeights(model_.get(), 17);
    batch_ = RandomBatch(kB, kT, config_.vocab_size, 23);
  }

  CpuDevice device_;
  ModelConfig config_;
  std::unique_ptr<Gpt2Model> model_;
  Batch batch_;
};

TEST_F(Gpt2ReferenceTest, ForwardLogitsAndLossMatchFloat64Reference) {
  const float loss = model_->Forward(batch_.inputs.data(), batch_.targets.data(), kB, kT).value();
  std::vector<double> ref_logits;
  const double ref_loss = ReferenceForward(config_, ParamsAsDouble(*model_), batch_.inputs.data(),
                                           batch_.targets.data(), kB, kT, &ref_logits);
  // Guards the weight scale: logits spread over several units make a real test of every path.
  double max_abs_logit = 0.0;
  for (double z : ref_logits) max_abs_logit = std::max(max_abs_logit, std::abs(z));
  ASSERT_GT(max_abs_logit, 3.0);
  ExpectLogitsMatch(model_->logits(), ref_logits, kB * kT, config_.vocab_size, model_->Vp());
  EXPECT_PRED4(Close, loss, ref_loss, kAtol, kRtol) << "model " << loss << ", ref " << ref_loss;
}

TEST_F(Gpt2ReferenceTest, ForwardWithoutTargetsGivesTheSameLogits) {
  const float none = model_->Forward(batch_.inputs.data(), nullptr, kB, kT).value();
  EXPECT_EQ(none, 0.0f);
  std::vector<double> ref_logits;
  ReferenceForward(config_, ParamsAsDouble(*model_), batch_.inputs.data(), nullptr, kB, kT,
                   &ref_logits);
  ExpectLogitsMatch(model_->logits(), ref_logits, kB * kT, config_.vocab_size, model_->Vp());
}

TEST_F(Gpt2ReferenceTest, PaddedVocabularyColumnsDoNotAffectLossOrGradients) {
  const int C = config_.n_embd, V = config_.vocab_size, Vp = model_->Vp();
  float* pad_rows = model_->param(kWte) + int64_t{V} * C;
  const int64_t pad_count = int64_t{Vp - V} * C;

  std::fill(pad_rows, pad_rows + pad_count, 0.0f);
  HOIST_CHECK_OK(model_->ZeroGradients());
  const float loss_zero_pad =
      model_->Forward(batch_.inputs.data(), batch_.targets.data(), kB, kT, 1.0f).value();
  HOIST_CHECK_OK(model_->Backward());
  std::vector<float> grads_zero_pad(model_->grads(), model_->grads() + model_->num_parameters());

  // Padded rows large enough that their logits would swamp the softmax if counted.
  Rng rng(29);
  for (int64_t i = 0; i < pad_count; ++i) pad_rows[i] = static_cast<float>(20.0 * rng.Normal());
  model_->Forward(batch_.inputs.data(), nullptr, kB, kT).value();
  float max_pad_logit = 0.0f;
  for (int n = 0; n < kB * kT; ++n) {
    for (int v = V; v < Vp; ++v)
      max_pad_logit = std::max(max_pad_logit, model_->logits()[n * Vp + v]);
  }
  ASSERT_GT(max_pad_logit, 50.0f);

  HOIST_CHECK_OK(model_->ZeroGradients());
  const float loss_big_pad =
      model_->Forward(batch_.inputs.data(), batch_.targets.data(), kB, kT, 1.0f).value();
  HOIST_CHECK_OK(model_->Backward());
  EXPECT_EQ(loss_big_pad, loss_zero_pad);
  const double ref_loss = ReferenceForward(config_, ParamsAsDouble(*model_), batch_.inputs.data(),
                                           batch_.targets.data(), kB, kT, nullptr);
  EXPECT_PRED4(Close, loss_big_pad, ref_loss, kAtol, kRtol);
  for (int64_t i = 0; i < model_->num_parameters(); ++i) {
    ASSERT_EQ(model_->grads()[i], grads_zero_pad[i]) << "parameter " << i;
  }
  for (int64_t i = 0; i < pad_count; ++i) ASSERT_EQ(model_->grad(kWte)[V * C + i], 0.0f);
}

TEST_F(Gpt2ReferenceTest, ChangingAFutureTokenLeavesEarlierLogitsUnchanged) {
  const int Vp = model_->Vp();
  const int row = 1, changed_t = 4;
  model_->Forward(batch_.inputs.data(), nullptr, kB, kT).value();
  const std::vector<float> before(model_->logits(), model_->logits() + kB * kT * Vp);

  std::vector<int32_t> inputs = batch_.inputs;
  int32_t& token = inputs[row * kT + changed_t];
  token = (token + 1) % config_.vocab_size;
  model_->Forward(inputs.data(), nullptr, kB, kT).value();
  const float* after = model_->logits();

  for (int b = 0; b < kB; ++b) {
    for (int t = 0; t < kT; ++t) {
      bool same = true;
      for (int v = 0; v < Vp; ++v) {
        const int64_t i = (int64_t{b} * kT + t) * Vp + v;
        same = same && after[i] == before[i];
      }
      if (b == row && t >= changed_t) {
        EXPECT_FALSE(same) << "position " << t << " does not see the changed token";
      } else {
        EXPECT_TRUE(same) << "sequence " << b << " position " << t << " changed";
      }
    }
  }
}

TEST_F(Gpt2ReferenceTest, ShorterSequenceMatchesReferenceAtThatLength) {
  // A full-size forward first, so stale activations from it would show.
  model_->Forward(batch_.inputs.data(), batch_.targets.data(), kB, kT).value();
  const int B = 2, T = 4;
  Batch batch = RandomBatch(B, T, config_.vocab_size, 31);
  const float loss = model_->Forward(batch.inputs.data(), batch.targets.data(), B, T).value();
  std::vector<double> ref_logits;
  const double ref_loss = ReferenceForward(config_, ParamsAsDouble(*model_), batch.inputs.data(),
                                           batch.targets.data(), B, T, &ref_logits);
  ExpectLogitsMatch(model_->logits(), ref_logits, B * T, config_.vocab_size, model_->Vp());
  EXPECT_PRED4(Close, loss, ref_loss, kAtol, kRtol) << "model " << loss << ", ref " << ref_loss;
}

// Backward against central differences of the float64 reference loss at the model's (float32)
// weights. In float64 with step 1e-5 the differences are exact to ~1e-9 (truncation h^2 f''',
// rounding 1e-16 / h), so the tolerance is the float32 backward's own error: gradients here are
// O(1e-2) means over 21 positions, and the tolerance sits about 10x above their observed error.
TEST_F(Gpt2ReferenceTest, BackwardMatchesFiniteDifferencesOfReference) {
  const int C = config_.n_embd, V = config_.vocab_size;
  HOIST_CHECK_OK(model_->ZeroGradients());
  model_->Forward(batch_.inputs.data(), batch_.targets.data(), kB, kT, 1.0f).value();
  HOIST_CHECK_OK(model_->Backward());
  std::vector<double> p = ParamsAsDouble(*model_);
  auto ref_loss = [&] {
    return ReferenceForward(config_, p, batch_.inputs.data(), batch_.targets.data(), kB, kT,
                            nullptr);
  };
  const double h = 1e-5, atol = 2e-6, rtol = 1e-3;
  Rng rng(37);
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    const int64_t offset = model_->layout().llmc_offsets[tensor];
    int64_t size = model_->layout().sizes[tensor];
    std::vector<int64_t> indices;
    // wte: sample the real vocabulary, plus one padded entry (gradient exactly 0). wpe: sample
    // the positions in use, plus one from the unused last row (gradient exactly 0).
    if (tensor == kWte) {
      size = int64_t{V} * C;
      indices.push_back(offset + size + 3);
    } else if (tensor == kWpe) {
      size = int64_t{kT} * C;
      indices.push_back(offset + size + 5);
    }
    for (int k = 0; k < 8; ++k) {
      indices.push_back(offset + static_cast<int64_t>(rng.NextU64() % static_cast<uint64_t>(size)));
    }
    double max_abs_fd = 0.0;
    for (int64_t index : indices) {
      const double saved = p[index];
      p[index] = saved + h;
      const double plus = ref_loss();
      p[index] = saved - h;
      const double minus = ref_loss();
      p[index] = saved;
      const double fd = (plus - minus) / (2.0 * h);
      const double analytic = model_->grads()[model_->layout().FlatIndex(tensor, index - offset)];
      max_abs_fd = std::max(max_abs_fd, std::abs(fd));
      EXPECT_PRED4(Close, analytic, fd, atol, rtol)
          << ParamLayout::Name(tensor) << "[" << index - offset << "]: backward " << analytic
          << ", finite difference " << fd;
    }
    EXPECT_GT(max_abs_fd, 1e-3) << ParamLayout::Name(tensor) << " barely affects the loss";
  }
}

}  // namespace
}  // namespace hoist::runtime
