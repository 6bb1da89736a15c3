// ZeroEngine's optimizer step against torch.optim.AdamW computed here in float64: weight decay
// only on the segments marked for it, the bias corrections with the step count after the
// increment, the loss scale divided out of the gradient before the moments, clipping by torch's
// clip_grad_norm_ factor, the gradient norm of the unscaled gradient, and a resumed run that
// continues the trajectory bit for bit. Every case runs on one rank at stage 0 and on two thread
// ranks at stage 2, where each rank updates only its shard, against the same reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/random.h"
#include "kernels/cpu_backend.h"
#include "zero/zero_engine.h"

namespace hoist::zero {
namespace {

// The engine's float32 update against float64: params, m and v are O(1) and each step adds a few
// roundings of unit roundoff 6e-8, so 1e-6 absolute plus 1e-5 relative is a wide margin. The
// effects pinned are far larger: one step of decay moves a param by lr * wd * |p| ~ 5e-3 |p|.
constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-5;

// The gradient norm against float64: each rank sums its squares in a double and the ranks add
// the doubles, so 1e-12 relative is far above that rounding and far below that of a float
// accumulator (~1e-5 over 1e5 terms) or of a sum rounded to fp32 on the wire (~3e-8 on the norm).
constexpr double kNormRtol = 1e-12;

AdamWParams TestAdamW() {
  AdamWParams adam;
  adam.beta1 = 0.9f;
  adam.beta2 = 0.95f;
  adam.eps = 1e-2f;  // large enough that where eps enters the update is visible
  adam.weight_decay = 0.1f;
  return adam;
}

// One parameter tensor of GPT-2 and the unit that holds it.
struct Tensor {
  const char* name;
  int unit;
  int64_t size;
  bool decay;
};

// GPT-2's tensors at a tiny size (n_layer 1, n_embd 4, vocabulary 10 padded to 128, seq_len 3),
// in their units and in their order within each unit (runtime/model/gpt2.h's ParamLayout::Units()).
// Written out here, with the six 2-D weights decayed by hand rather than by ParamLayout::Decayed:
// test_zero links the zero layer, below runtime. Per unit the sizes are 524, 244 and 8; on two
// ranks the shard boundaries cut wte and fcw.
const std::vector<Tensor>& Gpt2Tensors() {
  constexpr int64_t C = 4, Vp = 128, T = 3;
  static const std::vector<Tensor> kTensors = {
      {"wte", 0, Vp * C, true},        {"wpe", 0, T * C, true},
      {"ln1w", 1, C, false},           {"ln1b", 1, C, false},
      {"qkvw", 1, 3 * C * C, true},    {"qkvb", 1, 3 * C, false},
      {"attprojw", 1, C * C, true},    {"attprojb", 1, C, false},
      {"ln2w", 1, C, false},           {"ln2b", 1, C, false},
      {"fcw", 1, 4 * C * C, true},     {"fcb", 1, 4 * C, false},
      {"fcprojw", 1, C * 4 * C, true}, {"fcprojb", 1, C, false},
      {"lnfw", 2, C, false},           {"lnfb", 2, C, false}};
  return kTensors;
}

// Units with one segment per tensor: the engine's flat order (units back to back, as
// GatherFullParams returns it) is then the tensors' order above.
std::vector<UnitSpec> Gpt2Units() {
  std::vector<UnitSpec> units;
  for (const Tensor& t : Gpt2Tensors()) {
    if (units.size() <= static_cast<size_t>(t.unit)) {
      units.push_back({"unit " + std::to_string(t.unit), 0, {}});
    }
    UnitSpec& unit = units.back();
    unit.segments.push_back({unit.size, unit.size + t.size, t.decay});
    unit.size += t.size;
  }
  return units;
}

int64_t TotalSize(const std::vector<UnitSpec>& units) {
  int64_t total = 0;
  for (const UnitSpec& unit : units) total += unit.size;
  return total;
}

std::vector<float> RandomVector(int64_t n, double std, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& value : x) value = static_cast<float>(std * rng.Normal());
  return x;
}

double L2Norm(const std::vector<float>& x) {
  double sum = 0.0;
  for (float value : x) sum += static_cast<double>(value) * value;
  return std::sqrt(sum);
}

// torch.optim.AdamW in float64 over the flat parameters.
struct ClosedFormAdamW {
  double beta1, beta2, eps, weight_decay;
  std::vector<double> param, m, v;

  ClosedFormAdamW(const AdamWParams& adam, const std::vector<float>& initial)
      : beta1(adam.beta1),
        beta2(adam.beta2),
        eps(adam.eps),
        weight_decay(adam.weight_decay),
        param(initial.begin(), initial.end()),
        m(initial.size(), 0.0),
        v(initial.size(), 0.0) {}

  // The gradient is grads * grad_scale (the unscaling and clipping factor); `t` is the step
  // number after the increment, as the bias correction uses it. Decay on the decayed tensors.
  void Step(const std::vector<float>& grads, double lr, double grad_scale, int64_t t) {
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
    int64_t i = 0;
    for (const Tensor& tensor : Gpt2Tensors()) {
      const double wd = tensor.decay ? weight_decay : 0.0;
      for (const int64_t end = i + tensor.size; i < end; ++i) {
        const double g = static_cast<double>(grads[i]) * grad_scale;
        m[i] = beta1 * m[i] + (1.0 - beta1) * g;
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
        param[i] *= 1.0 - lr * wd;
        param[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
      }
    }
  }
};

// How the engine's ranks are laid out.
struct Sharding {
  int stage;
  int world;
};

// What one optimizer step is given.
struct StepSpec {
  const std::vector<float>* grads;  // the step's gradient as the model writes it (times the scale)
  float lr = 0.05f;
  float loss_scale = 1.0f;
  float max_norm = 0.0f;  // disabled
};

// The engine's state after a step: each rank's gathered weights and step result, and the master
// weights and moments of every rank's shard put together in flat order.
struct Outcome {
  std::vector<std::vector<float>> params;  // per rank
  std::vector<StepResult> results;         // per rank
  std::vector<int64_t> step_counts;        // per rank
  std::vector<float> master, m, v;
};

// How a run starts: Initialize with `initial`, or (restore) RestoreState with these flat states
// and step count, as a restart from a checkpoint does.
struct Start {
  std::vector<float> initial;
  bool restore = false;
  std::vector<float> m, v;
  int64_t step_count = 0;
};

// The flat values of this rank's shard (state plan layout; padding left zero).
std::vector<float> ShardOf(const PartitionPlan& plan, const std::vector<float>& flat) {
  std::vector<float> shard(static_cast<size_t>(plan.total_shard()), 0.0f);
  int64_t unit_begin = 0;
  for (int u = 0; u < plan.num_units(); ++u) {
    const UnitPartition& part = plan.unit(u);
    std::copy_n(flat.begin() + unit_begin + part.owned_begin, part.owned_real,
                shard.begin() + part.shard_offset);
    unit_begin += part.size;
  }
  return shard;
}

// Writes this rank's shard into the flat array and counts each element written.
void ScatterShard(const PartitionPlan& plan, const std::vector<float>& shard,
                  std::vector<float>& flat, std::vector<int>& written) {
  int64_t unit_begin = 0;
  for (int u = 0; u < plan.num_units(); ++u) {
    const UnitPartition& part = plan.unit(u);
    for (int64_t j = 0; j < part.owned_real; ++j) {
      flat[unit_begin + part.owned_begin + j] = shard[part.shard_offset + j];
      ++written[unit_begin + part.owned_begin + j];
    }
    unit_begin += part.size;
  }
}

// Runs `steps` on an engine per rank over `units` and returns the outcome after each step. Each
// step's gradient is spread over the ranks so that the engine's average over ranks is exactly
// the step's gradient: element i is written by rank i % world, times world (a power of two here),
// and zero by the others, so every rank's reduction carries part of it.
std::vector<Outcome> RunSteps(const std::vector<UnitSpec>& units, const Sharding& sharding,
                              const Start& start, const std::vector<StepSpec>& steps) {
  const int world = sharding.world;
  auto group = comm::ThreadGroup::Create(world, 30.0);
  EXPECT_TRUE(group.ok()) << group.status().ToString();
  if (!group.ok()) return {};
  std::vector<Outcome> outcomes(steps.size());
  for (Outcome& outcome : outcomes) {
    outcome.params.resize(static_cast<size_t>(world));
    outcome.results.resize(static_cast<size_t>(world));
    outcome.step_counts.resize(static_cast<size_t>(world));
  }
  // Per step and rank: the rank's state shards, put together after the threads end.
  std::vector<std::vector<std::vector<float>>> masters(steps.size()), ms(steps.size()),
      vs(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    masters[s].resize(static_cast<size_t>(world));
    ms[s].resize(static_cast<size_t>(world));
    vs[s].resize(static_cast<size_t>(world));
  }
  std::vector<PartitionPlan> plans(static_cast<size_t>(world));

  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      CpuDevice device;
      kernels::CpuBackend backend(&device);
      ZeroOptions options;
      options.stage = sharding.stage;
      options.adam = TestAdamW();
      auto created = ZeroEngine::Create(units, options, &(*group)->comm(rank), &backend);
      ASSERT_TRUE(created.ok()) << created.status().ToString();
      ZeroEngine& engine = **created;
      const PartitionPlan& plan = engine.state_plan();
      plans[static_cast<size_t>(rank)] = plan;
      const auto n = static_cast<size_t>(engine.state_elements());
      if (start.restore) {
        ASSERT_TRUE(engine
                        .RestoreState(ShardOf(plan, start.initial).data(),
                                      ShardOf(plan, start.m).data(), ShardOf(plan, start.v).data(),
                                      start.step_count)
                        .ok());
      } else {
        int64_t unit_begin = 0;
        std::vector<int64_t> unit_begins;
        for (const UnitSpec& unit : units) {
          unit_begins.push_back(unit_begin);
          unit_begin += unit.size;
        }
        ASSERT_TRUE(engine
                        .Initialize([&](int u, float* out) {
                          std::copy_n(start.initial.begin() + unit_begins[u], units[u].size, out);
                        })
                        .ok());
        // The moments start at zero.
        std::vector<float> master(n), m(n), v(n);
        ASSERT_TRUE(engine.ReadState(master.data(), m.data(), v.data()).ok());
        EXPECT_EQ(L2Norm(m), 0.0);
        EXPECT_EQ(L2Norm(v), 0.0);
      }
      for (size_t s = 0; s < steps.size(); ++s) {
        const StepSpec& step = steps[s];
        ASSERT_TRUE(engine.ZeroGrads().ok());
        int64_t unit_begin = 0;
        for (int u = 0; u < static_cast<int>(units.size()); ++u) {
          float* g = engine.AcquireGrads(u).value();
          for (int64_t i = 0; i < units[u].size; ++i) {
            const int64_t flat = unit_begin + i;
            g[i] = flat % world == rank ? static_cast<float>(world) * (*step.grads)[flat] : 0.0f;
          }
          engine.ReleaseGrads(u);
          unit_begin += units[u].size;
        }
        auto result = engine.Step(step.lr, step.loss_scale, step.max_norm);
        ASSERT_TRUE(result.ok()) << result.status().ToString();
        Outcome& outcome = outcomes[s];
        outcome.results[static_cast<size_t>(rank)] = *result;
        outcome.step_counts[static_cast<size_t>(rank)] = engine.step_count();
        auto params = engine.GatherFullParams();
        ASSERT_TRUE(params.ok()) << params.status().ToString();
        outcome.params[static_cast<size_t>(rank)] = *params;
        std::vector<float>& master = masters[s][static_cast<size_t>(rank)];
        std::vector<float>& m = ms[s][static_cast<size_t>(rank)];
        std::vector<float>& v = vs[s][static_cast<size_t>(rank)];
        master.resize(n);
        m.resize(n);
        v.resize(n);
        ASSERT_TRUE(engine.ReadState(master.data(), m.data(), v.data()).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  const int64_t total = TotalSize(units);
  // In stage 0 every rank holds the whole state: rank 0's is taken.
  const int owners = sharding.stage == 0 ? 1 : world;
  for (size_t s = 0; s < steps.size(); ++s) {
    Outcome& outcome = outcomes[s];
    outcome.master.assign(static_cast<size_t>(total), std::numeric_limits<float>::quiet_NaN());
    outcome.m = outcome.master;
    outcome.v = outcome.master;
    std::vector<int> written(static_cast<size_t>(total), 0), unused(written);
    for (int rank = 0; rank < owners; ++rank) {
      const auto r = static_cast<size_t>(rank);
      if (masters[s][r].empty()) return {};  // that rank failed, and said so
      ScatterShard(plans[r], masters[s][r], outcome.master, written);
      ScatterShard(plans[r], ms[s][r], outcome.m, unused);
      ScatterShard(plans[r], vs[s][r], outcome.v, unused);
    }
    // The shards cover the model once.
    EXPECT_EQ(std::count(written.begin(), written.end(), 1), total) << "step " << s + 1;
  }
  return outcomes;
}

// Tolerances of the three compared quantities; kAtol for states of order one.
struct Tolerance {
  double param = kAtol, m = kAtol, v = kAtol;
};

// Compares each tensor separately so a failure names the tensor, on every rank.
void ExpectMatchesClosedForm(const Outcome& outcome, const ClosedFormAdamW& ref,
                             const std::string& when, const Tolerance& tolerance = {}) {
  for (size_t rank = 0; rank < outcome.params.size(); ++rank) {
    ASSERT_EQ(outcome.params[rank].size(), ref.param.size()) << when << " rank " << rank;
  }
  int64_t i = 0;
  for (const Tensor& tensor : Gpt2Tensors()) {
    int mismatches = 0;
    for (int64_t k = 0; k < tensor.size; ++k, ++i) {
      struct Check {
        std::string name;
        double actual, expected, atol;
      };
      std::vector<Check> checks = {{"master", outcome.master[i], ref.param[i], tolerance.param},
                                   {"m", outcome.m[i], ref.m[i], tolerance.m},
                                   {"v", outcome.v[i], ref.v[i], tolerance.v}};
      for (size_t rank = 0; rank < outcome.params.size(); ++rank) {
        checks.push_back({"rank " + std::to_string(rank) + " param", outcome.params[rank][i],
                          ref.param[i], tolerance.param});
      }
      for (const Check& check : checks) {
        // Written so that a NaN (an element no rank owned) fails too.
        if (!(std::abs(check.actual - check.expected) <=
              check.atol + kRtol * std::abs(check.expected)) &&
            ++mismatches <= 3) {
          ADD_FAILURE() << when << ": " << tensor.name << " " << check.name << "[" << k
                        << "] = " << check.actual << ", expected " << check.expected;
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << when << ": " << tensor.name;
  }
}

class ZeroAdamW : public ::testing::TestWithParam<Sharding> {
 protected:
  void SetUp() override {
    initial_ = RandomVector(total_, 1.0, 1);
    for (int step = 0; step < 3; ++step) {
      grads_.push_back(RandomVector(total_, 1.0, 10 + static_cast<uint64_t>(step)));
    }
  }

  std::vector<Outcome> Train(const std::vector<StepSpec>& steps) {
    Start start;
    start.initial = initial_;
    return RunSteps(units_, GetParam(), start, steps);
  }

  const std::vector<UnitSpec> units_ = Gpt2Units();
  const int64_t total_ = TotalSize(units_);
  std::vector<float> initial_;
  std::vector<std::vector<float>> grads_;  // one per step
};

TEST_P(ZeroAdamW, ThreeStepsMatchClosedFormWithDecayOnlyOnWeights) {
  const float lrs[] = {0.05f, 0.03f, 0.02f};
  std::vector<StepSpec> steps;
  for (int step = 0; step < 3; ++step) steps.push_back({&grads_[step], lrs[step]});
  const std::vector<Outcome> outcomes = Train(steps);
  ASSERT_EQ(outcomes.size(), 3u);
  ClosedFormAdamW ref(TestAdamW(), initial_);
  for (int step = 0; step < 3; ++step) {
    ref.Step(grads_[step], lrs[step], 1.0, step + 1);
    for (int64_t count : outcomes[step].step_counts) EXPECT_EQ(count, step + 1);
    ExpectMatchesClosedForm(outcomes[step], ref, "step " + std::to_string(step + 1));
  }
}

TEST_P(ZeroAdamW, LossScaleIsDividedOutBeforeTheMoments) {
  // The gradients as written, with loss scales below and above one: the moments see g / scale.
  const float scales[] = {4.0f, 0.25f, 2.0f};
  std::vector<StepSpec> steps;
  for (int step = 0; step < 3; ++step) steps.push_back({&grads_[step], 0.05f, scales[step]});
  const std::vector<Outcome> outcomes = Train(steps);
  ASSERT_EQ(outcomes.size(), 3u);
  ClosedFormAdamW ref(TestAdamW(), initial_);
  for (int step = 0; step < 3; ++step) {
    ref.Step(grads_[step], 0.05, 1.0 / scales[step], step + 1);
    ExpectMatchesClosedForm(outcomes[step], ref, "step " + std::to_string(step + 1));
  }
}

TEST_P(ZeroAdamW, BiasCorrectionUsesTheStepCountAfterIncrement) {
  // A restored step count of 9 with zero moments.
  Start start;
  start.initial = initial_;
  start.restore = true;
  start.m.assign(static_cast<size_t>(total_), 0.0f);
  start.v = start.m;
  start.step_count = 9;
  const std::vector<Outcome> outcomes = RunSteps(units_, GetParam(), start, {{&grads_[0]}});
  ASSERT_EQ(outcomes.size(), 1u);
  for (int64_t count : outcomes[0].step_counts) EXPECT_EQ(count, 10);
  // Zero moments but t = 10: the first update is about 0.44 lr sign(g), not lr sign(g).
  ClosedFormAdamW ref(TestAdamW(), initial_);
  ref.Step(grads_[0], 0.05, 1.0, 10);
  ExpectMatchesClosedForm(outcomes[0], ref, "step 10");
}

TEST_P(ZeroAdamW, ResumeWithRestoredStepCountContinuesTheTrajectory) {
  const std::vector<Outcome> uninterrupted = Train({{&grads_[0]}, {&grads_[1]}, {&grads_[2]}});
  const std::vector<Outcome> first = Train({{&grads_[0]}});
  ASSERT_EQ(uninterrupted.size(), 3u);
  ASSERT_EQ(first.size(), 1u);
  // A restart: fresh engines given the saved weights, moments and step count.
  Start start;
  start.initial = first[0].master;
  start.restore = true;
  start.m = first[0].m;
  start.v = first[0].v;
  start.step_count = first[0].step_counts[0];
  const std::vector<Outcome> resumed =
      RunSteps(units_, GetParam(), start, {{&grads_[1]}, {&grads_[2]}});
  ASSERT_EQ(resumed.size(), 2u);

  const Outcome& a = resumed[1];
  const Outcome& b = uninterrupted[2];
  for (size_t rank = 0; rank < a.params.size(); ++rank) {
    EXPECT_EQ(a.step_counts[rank], 3);
    EXPECT_EQ(a.params[rank], b.params[rank]) << "rank " << rank;
  }
  for (int64_t i = 0; i < total_; ++i) {
    ASSERT_EQ(a.master[i], b.master[i]) << "master " << i;
    ASSERT_EQ(a.m[i], b.m[i]) << "m " << i;
    ASSERT_EQ(a.v[i], b.v[i]) << "v " << i;
  }
}

TEST_P(ZeroAdamW, ClippingScalesByMaxOverNormPlusEpsilonAndZeroDisablesIt) {
  // Each step's gradient is written times its loss scale (a power of two: exact), so the
  // unscaled gradient is grads_[step] itself, of norm about sqrt(776) ~ 28.
  struct Case {
    float loss_scale, max_norm;
  };
  const Case cases[] = {
      {8.0f, 1.0f},     // clipped: 1 / (28 + 1e-6)
      {64.0f, 100.0f},  // below the max, which the written gradient (~1800) is not: factor 1
      {1.0f, 0.0f},     // disabled
  };
  std::vector<std::vector<float>> written(3);
  std::vector<StepSpec> steps;
  for (int step = 0; step < 3; ++step) {
    for (float g : grads_[step]) written[step].push_back(g * cases[step].loss_scale);
  }
  for (int step = 0; step < 3; ++step) {
    steps.push_back({&written[step], 0.05f, cases[step].loss_scale, cases[step].max_norm});
  }
  const std::vector<Outcome> outcomes = Train(steps);
  ASSERT_EQ(outcomes.size(), 3u);
  ClosedFormAdamW ref(TestAdamW(), initial_);
  for (int step = 0; step < 3; ++step) {
    const double norm = L2Norm(grads_[step]);
    const double max_norm = cases[step].max_norm;
    const double clip = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
    ref.Step(grads_[step], 0.05, clip, step + 1);
    for (const StepResult& result : outcomes[step].results) {
      EXPECT_NEAR(result.grad_norm, norm, kNormRtol * norm) << "step " << step + 1;
    }
    ExpectMatchesClosedForm(outcomes[step], ref, "step " + std::to_string(step + 1));
  }
}

TEST_P(ZeroAdamW, ClippingFactorCarriesTorchsEpsilon) {
  // A gradient of norm 2e-6 against max_norm 1e-6: the factor is 1e-6 / (2e-6 + 1e-6) = 1/3,
  // not 1/2. The moments are then of order 1e-8 and 1e-16, so their absolute tolerances scale
  // with them (the clipped gradient's norm bounds every element); the parameters barely move.
  const double target_norm = 2e-6;
  const double scale = target_norm / L2Norm(grads_[0]);
  std::vector<float> tiny;
  for (float g : grads_[0]) tiny.push_back(static_cast<float>(g * scale));
  const std::vector<Outcome> outcomes = Train({{&tiny, 0.05f, 1.0f, 1e-6f}});
  ASSERT_EQ(outcomes.size(), 1u);
  const double norm = L2Norm(tiny);
  const double clip = 1e-6 / (norm + 1e-6);
  ASSERT_NEAR(clip, 1.0 / 3.0, 1e-6);
  ClosedFormAdamW ref(TestAdamW(), initial_);
  ref.Step(tiny, 0.05, clip, 1);
  Tolerance tolerance;
  const double clipped_norm = clip * norm;
  tolerance.m = kAtol * clipped_norm;
  tolerance.v = kAtol * clipped_norm * clipped_norm;
  ExpectMatchesClosedForm(outcomes[0], ref, "step 1", tolerance);
}

TEST_P(ZeroAdamW, GradientNormEqualsFloat64L2Norm) {
  // Magnitudes over six decades, and units whose sizes are no multiple of any vector width (nor,
  // on two ranks, of the world size: padding), so a float accumulator, a dropped tail or a
  // counted pad would show far above the tolerance. Written times a loss scale of 1024 (exact):
  // the norm is of the unscaled gradient, before clipping.
  const std::vector<UnitSpec> units = {
      {"a", 50001, {{0, 50001, false}}},
      {"b", 33331, {{0, 33331, false}}},
      {"c", 16671, {{0, 16671, false}}},
      {"one", 1, {{0, 1, false}}},
  };
  const int64_t n = TotalSize(units);
  Rng rng(41);
  std::vector<float> grads(static_cast<size_t>(n)), written(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] = static_cast<float>(rng.Normal() * std::pow(10.0, 6.0 * rng.Uniform() - 3.0));
    written[i] = grads[i] * 1024.0f;
  }
  const double expected = L2Norm(grads);
  const std::vector<float> zeros(grads.size(), 0.0f);
  std::vector<float> only_one(grads.size(), 0.0f);
  only_one.back() = -3.0f;
  Start start;
  start.initial.assign(grads.size(), 0.5f);
  const std::vector<Outcome> outcomes =
      RunSteps(units, GetParam(), start, {{&written, 0.05f, 1024.0f, 1.0f}, {&zeros}, {&only_one}});
  ASSERT_EQ(outcomes.size(), 3u);
  for (const StepResult& result : outcomes[0].results) {
    EXPECT_NEAR(result.grad_norm, expected, kNormRtol * expected);
    EXPECT_FALSE(result.overflow);
  }
  for (const StepResult& result : outcomes[1].results) EXPECT_EQ(result.grad_norm, 0.0);
  for (const StepResult& result : outcomes[2].results) EXPECT_EQ(result.grad_norm, 3.0);
}

INSTANTIATE_TEST_SUITE_P(ShardedAndNot, ZeroAdamW,
                         ::testing::Values(Sharding{0, 1}, Sharding{2, 2}),
                         [](const ::testing::TestParamInfo<Sharding>& info) {
                           return "Stage" + std::to_string(info.param.stage) + "World" +
                                  std::to_string(info.param.world);
                         });

TEST(ZeroAdamWClipScale, IsOneBelowTheMaxNorm) {
  EXPECT_EQ(ClipScale(0.0, 1.0f), 1.0f);
  EXPECT_EQ(ClipScale(0.5, 1.0f), 1.0f);
  EXPECT_EQ(ClipScale(0.999, 1.0f), 1.0f);
  // At the max, torch's max / (norm + 1e-6) is 1 to within that 1e-6.
  EXPECT_NEAR(ClipScale(1.0, 1.0f), 1.0f, 2e-6);
}

TEST(ZeroAdamWClipScale, ScalesToMaxOverNormPlusEpsilonAbove) {
  EXPECT_FLOAT_EQ(ClipScale(4.0, 1.0f), 1.0 / (4.0 + 1e-6));
  EXPECT_FLOAT_EQ(ClipScale(250.0, 2.5f), 2.5 / (250.0 + 1e-6));
  // The 1e-6 matters for small norms: 1e-6 / (2e-6 + 1e-6) = 1/3, not 1/2.
  EXPECT_FLOAT_EQ(ClipScale(2e-6, 1e-6f), 1e-6f / 3e-6);
}

TEST(ZeroAdamWClipScale, ZeroMaxNormDisablesClipping) {
  EXPECT_EQ(ClipScale(1e9, 0.0f), 1.0f);
  EXPECT_EQ(ClipScale(0.5, 0.0f), 1.0f);
}

}  // namespace
}  // namespace hoist::zero
