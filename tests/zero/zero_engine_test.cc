// The ZeRO engine against its single-rank self: a toy model whose gradient is known in closed
// form is trained on N ranks (threads) at every stage, and the weights must match the one-rank,
// stage-0 run. Memory is checked against the closed-form ZeRO terms with padding.
#include "zero/zero_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <thread>

#include "comm/thread_communicator.h"
#include "core/memory_tracker.h"
#include "kernels/cpu_backend.h"
#include "tests/zero/zero_test_util.h"

namespace hoist::zero {
namespace {

using namespace zero_test;  // NOLINT(google-build-using-namespace): the shared harness

class ZeroStages : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ZeroStages, MatchesOneRankInFp32) {
  const auto [stage, world] = GetParam();
  RunOptions reference;
  reference.zero.adam.weight_decay = 0.1f;
  const std::vector<RankResult> single = Train(reference);
  ASSERT_TRUE(single[0].status.ok()) << single[0].status.ToString();
  for (bool overlap : {false, true}) {
    for (bool reduce_scatter : {true, false}) {
      RunOptions run;
      run.world = world;
      run.zero.stage = stage;
      run.zero.overlap_comm = overlap;
      run.zero.reduce_scatter = reduce_scatter;
      run.zero.reduce_bucket_size = 60;  // a few units in flight at most
      run.zero.allgather_bucket_size = 60;
      run.zero.stage3_param_persistence_threshold = 10;  // "norm" stays whole in stage 3
      run.zero.adam.weight_decay = 0.1f;
      const std::vector<RankResult> many = Train(run);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(many[r].status.ok()) << many[r].status.ToString();
        EXPECT_LT(MaxRelativeDifference(many[r].params, single[0].params), 1e-5)
            << "stage " << stage << " world " << world << " rank " << r << " overlap " << overlap
            << " reduce_scatter " << reduce_scatter;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllStages, ZeroStages,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(1, 2, 4)));

TEST(ZeroEngine, TrainingMovesTheWeights) {
  // Guards the comparison above against a run that never updates anything.
  RunOptions run;
  const std::vector<RankResult> trained = Train(run);
  run.steps = 0;
  const std::vector<RankResult> untrained = Train(run);
  EXPECT_GT(MaxRelativeDifference(trained[0].params, untrained[0].params), 0.05);
}

TEST(ZeroEngine, Bf16StaysNearTheFp32Run) {
  RunOptions fp32;
  const std::vector<RankResult> reference = Train(fp32);
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 2, 4}) {
      RunOptions run;
      run.world = world;
      run.zero.stage = stage;
      run.zero.compute_type = DType::kBFloat16;
      run.zero.comm_type = DType::kBFloat16;
      const std::vector<RankResult> bf16 = Train(run);
      ASSERT_TRUE(bf16[0].status.ok()) << bf16[0].status.ToString();
      double num = 0, den = 0;
      for (size_t i = 0; i < reference[0].params.size(); ++i) {
        const double d = double(bf16[0].params[i]) - reference[0].params[i];
        num += d * d;
        den += double(reference[0].params[i]) * reference[0].params[i];
      }
      // The fp32 masters see bf16-rounded weights and gradients: errors of a few 2^-8.
      EXPECT_LT(std::sqrt(num / den), 5e-2) << "stage " << stage << " world " << world;
      EXPECT_GT(std::sqrt(num / den), 0.0) << "bf16 must round something";
    }
  }
}

TEST(ZeroEngine, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  for (int stage = 0; stage <= 3; ++stage) {
    RunOptions clean;
    clean.world = 2;
    clean.zero.stage = stage;
    clean.steps = 3;
    RunOptions poisoned = clean;
    poisoned.steps = 4;
    // Rank 1 alone sees an inf in step 1; the step is skipped everywhere, so the poisoned run
    // after 4 steps equals the clean run after 3 (each step's targets depend on its index, so
    // shift: skip the last step instead).
    poisoned.poison = [](int step, int rank) { return step == 3 && rank == 1; };
    const std::vector<RankResult> a = Train(clean), b = Train(poisoned);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(b[r].status.ok()) << b[r].status.ToString();
      ASSERT_EQ(b[r].overflow.size(), 4u);
      EXPECT_EQ(b[r].overflow, (std::vector<bool>{false, false, false, true})) << "rank " << r;
      EXPECT_EQ(b[r].params, a[r].params) << "stage " << stage << " rank " << r;
    }
  }
}

// Bytes of one rank's model states by the ZeRO formula, with the plan's padding.
ModelStateBytes Expected(int stage, const PartitionPlan& plan, int64_t param_bytes,
                         int64_t persistent_padded) {
  const int64_t whole = plan.total_padded(), shard = plan.total_shard();
  const int64_t optimizer_per = (param_bytes == 4 ? 8 : 12);
  ModelStateBytes b;
  b.params = param_bytes * (stage == 3 ? shard + persistent_padded : whole);
  b.grads = param_bytes * (stage >= 2 ? shard : whole);
  b.optimizer = optimizer_per * (stage == 0 ? plan.total_real() : shard);
  return b;
}

TEST(ZeroEngine, ModelStateBytesFollowTheZeroFormula) {
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    const int64_t p = type == DType::kFloat32 ? 4 : 2;
    for (int stage = 0; stage <= 3; ++stage) {
      for (int world : {1, 2, 4}) {
        RunOptions run;
        run.world = world;
        run.steps = 1;
        run.zero.stage = stage;
        run.zero.compute_type = type;
        run.zero.comm_type = type;
        run.zero.stage3_param_persistence_threshold = 10;
        const std::vector<RankResult> results = Train(run);
        for (const RankResult& r : results) {
          ASSERT_TRUE(r.status.ok()) << r.status.ToString();
          const int64_t persistent = stage == 3 ? r.plan.unit(3).padded : 0;  // "norm", 2 elements
          const ModelStateBytes want = Expected(stage, r.plan, p, persistent);
          EXPECT_EQ(r.states.params, want.params) << "stage " << stage << " world " << world;
          EXPECT_EQ(r.states.grads, want.grads) << "stage " << stage << " world " << world;
          EXPECT_EQ(r.states.optimizer, want.optimizer) << "stage " << stage << " world " << world;
          // The tracker sees exactly these bytes once the step's transient buffers are gone.
          const auto& current = r.memory.current[int(Place::kDevice)];
          EXPECT_EQ(current[int(Category::kParam)], want.params);
          EXPECT_EQ(current[int(Category::kGrad)], want.grads);
          EXPECT_EQ(current[int(Category::kOptimizer)], want.optimizer);
          EXPECT_EQ(current[int(Category::kComm)], 0);
        }
      }
    }
  }
}

TEST(ZeroEngine, RejectsAStageOutOfRange) {
  auto group = comm::ThreadGroup::Create(1, 5.0);
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  ZeroOptions options;
  options.stage = 4;
  auto engine = ZeroEngine::Create(ToyUnits(), options, &(*group)->comm(0), &backend);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("zero_optimization.stage"), std::string::npos);
}

// Out of device memory in a pass is an error that names the buffer, the bytes asked, held and
// free, and the settings that free memory; the store hands out null, the pass stops, and nothing
// aborts.
TEST(ZeroEngine, RunningOutOfDeviceMemoryIsAnErrorNamingWhatToChange) {
  struct Case {
    int stage;
    DType type;
    bool gradients;  // what runs out: a unit's weights, or its working gradient
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {3,
       DType::kFloat32,
       false,
       {"ZeRO stage 3, gathering parameter unit block0 (stage 3): cannot allocate",
        "stage3_max_live_parameters", "train_micro_batch_size_per_gpu", "offload_param"}},
      {1,
       DType::kBFloat16,
       true,
       {"ZeRO stage 1, the fp32 working gradient of unit block0: cannot allocate",
        "activation_checkpointing", "hoist plan --memory"}},
  };
  for (const Case& c : cases) {
    auto group = comm::ThreadGroup::Create(1, 5.0);
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker);
    kernels::CpuBackend backend(&device);
    ZeroOptions options;
    options.stage = c.stage;
    options.compute_type = c.type;
    options.comm_type = c.type;
    options.stage3_param_persistence_threshold = 0;
    auto engine = ZeroEngine::Create(ToyUnits(), options, &(*group)->comm(0), &backend);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ZeroEngine& e = **engine;
    ASSERT_TRUE(e.Initialize([](int, float* values) { values[0] = 1.0f; }).ok());
    ASSERT_TRUE(e.ZeroGrads().ok());
    // The embeddings fit; then the device is full.
    ASSERT_TRUE(e.AcquireParams(0).ok());
    device.set_capacity_bytes(tracker.Snapshot().CurrentTotal(Place::kDevice));
    if (c.gradients) {
      EXPECT_FALSE(e.AcquireGrads(1).ok());
    } else {
      EXPECT_FALSE(e.AcquireParams(1).ok());
    }
    const Status status = e.status();
    EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
    for (const std::string& part : c.says) {
      EXPECT_NE(status.message().find(part), std::string::npos) << status.message();
    }
    EXPECT_NE(status.message().find(" free)"), std::string::npos) << status.message();
    // Failed: nothing more is handed out, and a step reports the same error.
    EXPECT_FALSE(e.AcquireParams(2).ok());
    EXPECT_FALSE(e.AcquireGrads(0).ok());
    EXPECT_EQ(e.Step(0.1f, 1.0f, 0.0f).status().message(), status.message());
  }
}

}  // namespace
}  // namespace hoist::zero

namespace hoist::zero {
namespace {

// A range fill is asked only for what each rank keeps: at stage 3 its shard of the weights and
// of the master weights (nothing more, so a rank loading a checkpoint reads its share), below it
// the whole unit; and the weights it sets are those of the whole-unit fill.
TEST(ZeroEngine, ARangeFillIsAskedForWhatTheRankKeepsAndSetsTheSameWeights) {
  const std::vector<UnitSpec> units = ToyUnits();
  auto value = [](int u, int64_t i) { return static_cast<float>(u * 1000 + i) * 0.001f; };
  for (int stage : {1, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    constexpr int kWorld = 4;
    auto group = comm::ThreadGroup::Create(kWorld, 30.0);
    ASSERT_TRUE(group.ok());
    std::vector<int64_t> asked(kWorld, 0);
    std::vector<std::vector<float>> gathered(kWorld);
    std::vector<Status> statuses(kWorld);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] {
        CpuDevice device(Place::kDevice);
        kernels::CpuBackend backend(&device);
        ZeroOptions options;
        options.stage = stage;
        options.stage3_param_persistence_threshold = 0;
        auto engine = ZeroEngine::Create(units, options, &(*group)->comm(r), &backend);
        if (!engine.ok()) {
          statuses[r] = engine.status();
          return;
        }
        const ZeroEngine::RangeFill fill = [&](int u, int64_t begin, int64_t count, float* out) {
          asked[r] += count;
          for (int64_t i = 0; i < count; ++i) {
            out[i] = begin + i < units[u].size ? value(u, begin + i) : 0.0f;
          }
        };
        statuses[r] = (*engine)->Initialize(fill);
        if (!statuses[r].ok()) return;
        auto params = (*engine)->GatherFullParams();
        statuses[r] = params.status();
        if (params.ok()) gathered[r] = *params;
      });
    }
    for (std::thread& t : threads) t.join();
    int64_t total = 0, padded = 0;
    for (const UnitSpec& unit : units) {
      total += unit.size;
      padded += (unit.size + kWorld - 1) / kWorld * kWorld;
    }
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      // Stage 3: a quarter of every (padded) unit; below it every unit whole, padding included.
      EXPECT_EQ(asked[r], stage == 3 ? padded / kWorld : padded) << "rank " << r;
      ASSERT_EQ(static_cast<int64_t>(gathered[r].size()), total);
      int64_t at = 0;
      for (int u = 0; u < static_cast<int>(units.size()); ++u) {
        for (int64_t i = 0; i < units[u].size; ++i) {
          ASSERT_EQ(gathered[r][static_cast<size_t>(at + i)], value(u, i)) << u << " " << i;
        }
        at += units[u].size;
      }
    }
  }
}

}  // namespace
}  // namespace hoist::zero
