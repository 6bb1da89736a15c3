// Partial optimizer offload (OptimizerOffload::ratio < 1): the leading units of the owned shard
// keep their optimizer states on the device, the rest are offloaded. The AdamW step is the same
// fused kernel wherever a state lives, so every ratio must give the bits of full offload and of no
// offload; the memory must split at the unit boundary DeviceStateElements names; and the
// checkpoint state has one layout whatever the ratio, so a run resumes across ratios.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "offload/pinned_pool.h"
#include "tests/zero/offload_test_util.h"
#include "zero/memory_estimate.h"

namespace hoist::zero {
namespace {

using namespace zero_test;  // NOLINT(google-build-using-namespace): the shared harness

RunOptions AtRatio(RunOptions run, double ratio) {
  run.zero.offload_optimizer.place = Placement::kHost;
  run.zero.offload_optimizer.ratio = ratio;
  return run;
}

// The shard elements a rank keeps on the device at `ratio`.
int64_t SplitAt(int stage, int world, double ratio) {
  auto plan = PartitionPlan::Build(ToyUnits(), world, 0);
  HOIST_CHECK(plan.ok());
  ZeroOptions options;
  options.stage = stage;
  options.offload_optimizer.place = Placement::kHost;
  options.offload_optimizer.ratio = ratio;
  return DeviceStateElements(*plan, options);
}

TEST(PartialOffload, SplitsAtTheUnitBoundaryNearestTheDeviceShare) {
  // One rank: units of 37, 53, 53 and 2 elements, padded to themselves (boundaries 37, 90, 143,
  // 145 of 145).
  auto plan = PartitionPlan::Build(ToyUnits(), 1, 0);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->total_shard(), 145);
  EXPECT_EQ(SplitAt(1, 1, 1.0), 0);      // full offload
  EXPECT_EQ(SplitAt(1, 1, 0.9), 0);      // 14.5 is nearer 0 than 37
  EXPECT_EQ(SplitAt(1, 1, 0.75), 37);    // 36.25
  EXPECT_EQ(SplitAt(1, 1, 0.5), 90);     // 72.5
  EXPECT_EQ(SplitAt(1, 1, 0.25), 90);    // 108.75
  EXPECT_EQ(SplitAt(1, 1, 0.01), 143);   // 143.55
  EXPECT_EQ(SplitAt(1, 1, 0.001), 145);  // no offload in effect
  // Other placements have no split.
  ZeroOptions options;
  options.offload_optimizer.ratio = 0.5;
  EXPECT_EQ(DeviceStateElements(*plan, options), 0);
}

class PartialOffloadBits : public ::testing::TestWithParam<std::tuple<int, int, DType>> {};

TEST_P(PartialOffloadBits, EveryRatioGivesTheBitsOfFullAndOfNoOffload) {
  const auto [stage, world, type] = GetParam();
  const RunOptions device = Base(stage, world, type);
  const std::vector<RankResult> none = Train(device);
  const std::vector<RankResult> full = Train(AtRatio(device, 1.0));
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(none[r].status.ok()) << none[r].status.ToString();
    ASSERT_TRUE(full[r].status.ok()) << full[r].status.ToString();
    ASSERT_EQ(full[r].params, none[r].params);
  }
  // 0.9: a device part of 0 elements; 0.001: a host part of 0 elements (on one rank); between,
  // both parts hold units.
  for (double ratio : {0.9, 0.75, 0.5, 0.25, 0.01, 0.001}) {
    const std::vector<RankResult> got = Train(AtRatio(device, ratio));
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
      EXPECT_EQ(got[r].params, full[r].params) << "ratio " << ratio << " rank " << r;
      EXPECT_EQ(got[r].overflow, full[r].overflow);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(StagesRanksTypes, PartialOffloadBits,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 2),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)));

TEST(PartialOffload, ThreadedStreamsAndAnOverflowKeepTheBits) {
  // The backend's streams on worker threads: the device part's update and the host part's run
  // in their streams' order; an overflow skips the step in both parts.
  RunOptions device = Base(2, 2, DType::kBFloat16);
  device.streams = HostStream::Mode::kThreaded;
  device.poison = [](int step, int rank) { return step == 2 && rank == 1; };
  const std::vector<RankResult> want = Train(device);
  const std::vector<RankResult> got = Train(AtRatio(device, 0.5));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
    EXPECT_EQ(got[r].params, want[r].params);
    EXPECT_EQ(got[r].overflow, want[r].overflow);
  }
}

TEST(PartialOffload, TheStatesSplitBetweenTheDeviceAndTheHost) {
  const auto opt = int(Category::kOptimizer);
  const int64_t page = offload::PinnedHostPool::kPageBytes;
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    for (bool pinned : {true, false}) {
      RunOptions run = AtRatio(Base(1, 1, type), 0.5);
      run.zero.offload_optimizer.pin_memory = pinned;
      run.steps = 1;
      const std::vector<RankResult> results = Train(run);
      const RankResult& r = results[0];
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      const int64_t split = SplitAt(1, 1, 0.5);  // 90 of 145
      const int64_t rest = r.plan.total_shard() - split;
      // The device part as without offload (fp32: m and v, the model's copy the master); the
      // host part as with full offload (master, m and v).
      const int64_t device_arrays = type == DType::kFloat32 ? 2 : 3;
      EXPECT_EQ(r.memory.current[int(Place::kDevice)][opt], device_arrays * 4 * split);
      const int64_t pinned_bytes = 3 * ((4 * rest + page - 1) / page * page);
      EXPECT_EQ(r.memory.current[int(Place::kHostPinned)][opt], pinned ? pinned_bytes : 0);
      EXPECT_EQ(r.memory.current[int(Place::kHost)][opt], pinned ? 0 : 12 * rest);
      EXPECT_EQ(r.states.optimizer, device_arrays * 4 * split + 12 * rest);
    }
  }
}

// Runs `count` steps from step `first` on one rank.
void RunSteps(ZeroEngine& e, int first, int count) {
  for (int step = first; step < first + count; ++step) {
    ASSERT_TRUE(e.ZeroGrads().ok());
    MicroBatch(e, ToyUnits(), step, 0, 1.0f, false);
    ASSERT_TRUE(e.Step(0.05f, 1.0f, 1.0f).ok());
  }
}

TEST(PartialOffload, CheckpointsResumeAcrossRatios) {
  auto group = comm::ThreadGroup::Create(1, 30.0);
  ASSERT_TRUE(group.ok());
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker);
    kernels::CpuBackend backend(&device);
    auto init = [](int u, float* values) {
      for (int64_t i = 0; i < ToyUnits()[u].size; ++i) values[i] = InitialValue(u, i);
    };
    auto make = [&](double ratio, bool offload) {
      ZeroOptions options = Base(1, 1, type).zero;
      if (offload) options = AtRatio(Base(1, 1, type), ratio).zero;
      auto engine = ZeroEngine::Create(ToyUnits(), options, &(*group)->comm(0), &backend);
      HOIST_CHECK(engine.ok()) << engine.status().ToString();
      return std::move(engine).value();
    };
    // A ratio 0.5 run and a full-offload run: the same state, in the same flat layout.
    auto half = make(0.5, true);
    auto full = make(1.0, true);
    ASSERT_TRUE(half->Initialize(init).ok());
    ASSERT_TRUE(full->Initialize(init).ok());
    RunSteps(*half, 0, 3);
    RunSteps(*full, 0, 3);
    const auto n = static_cast<size_t>(half->state_elements());
    std::vector<float> w(n), m(n), v(n), fw(n), fm(n), fv(n);
    ASSERT_TRUE(half->ReadState(w.data(), m.data(), v.data()).ok());
    ASSERT_TRUE(full->ReadState(fw.data(), fm.data(), fv.data()).ok());
    EXPECT_EQ(w, fw);
    EXPECT_EQ(m, fm);
    EXPECT_EQ(v, fv);
    // The ratio 0.5 state resumed at ratio 1, without offload, and at 0.5 again: each continues
    // the trajectory of the run it was saved from.
    RunSteps(*half, 3, 2);
    const std::vector<float> want = *half->GatherFullParams();
    for (auto [ratio, offload] : {std::pair{1.0, true}, {0.0, false}, {0.5, true}, {0.25, true}}) {
      auto resumed = make(ratio, offload);
      ASSERT_TRUE(resumed->RestoreState(w.data(), m.data(), v.data(), 3).ok());
      RunSteps(*resumed, 3, 2);
      EXPECT_EQ(*resumed->GatherFullParams(), want) << "ratio " << ratio << " offload " << offload;
    }
  }
}

TEST(PartialOffload, RefusesWhatItCannotSplit) {
  ZeroOptions options;
  options.stage = 2;
  options.offload_optimizer.place = Placement::kHost;
  for (double ratio : {0.0, -0.5, 1.5}) {
    options.offload_optimizer.ratio = ratio;
    const Status status = ValidateZeroOptions(options);
    ASSERT_FALSE(status.ok()) << ratio;
    EXPECT_NE(status.message().find("ratio must be in (0, 1]"), std::string::npos)
        << status.ToString();
  }
  options.offload_optimizer.ratio = 0.5;
  EXPECT_TRUE(ValidateZeroOptions(options).ok());
  options.offload_optimizer.place = Placement::kNvme;
  Status status = ValidateZeroOptions(options);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("device \"cpu\""), std::string::npos) << status.ToString();
  options.offload_optimizer.place = Placement::kHost;
  options.adam.eight_bit = true;  // 8-bit moments split too (zero_adamw8bit_test)
  EXPECT_TRUE(ValidateZeroOptions(options).ok());
}

}  // namespace
}  // namespace hoist::zero
