// The fp16 loss scaler against trajectories worked out by hand from DeepSpeed's rules
// (runtime/train/loss_scaler.h): "O" is a step whose gradients overflowed, "." a clean one, and
// each expected scale is the one set for the step after.
#include "runtime/train/loss_scaler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace hoist::runtime {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

Fp16Config Dynamic(int initial_scale_power, int64_t window, int hysteresis,
                   bool consecutive = false, float min_loss_scale = 1) {
  Fp16Config c;
  c.enabled = true;
  c.initial_scale_power = initial_scale_power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  c.min_loss_scale = min_loss_scale;
  return c;
}

// Feeds the pattern and returns the scale after each step; every step must report skipped
// exactly when it overflowed.
std::vector<float> Trajectory(LossScaler& scaler, const std::string& pattern) {
  std::vector<float> scales;
  for (char c : pattern) {
    const bool overflow = c == 'O';
    StatusOr<bool> skipped = scaler.Update(overflow);
    EXPECT_TRUE(skipped.ok()) << skipped.status().ToString();
    if (!skipped.ok()) break;
    EXPECT_EQ(*skipped, overflow);
    scales.push_back(scaler.scale());
  }
  return scales;
}

std::vector<float> Trajectory(const Fp16Config& config, const std::string& pattern) {
  LossScaler scaler(config);
  return Trajectory(scaler, pattern);
}

TEST(LossScaler, DefaultsStartAtTwoToTheSixteenAndAreDynamic) {
  Fp16Config defaults;
  LossScaler scaler(defaults);
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.state().hysteresis_left, 2);
  EXPECT_EQ(LossScaler(Dynamic(3, 10, 2)).scale(), 8.0f);
  EXPECT_EQ(LossScaler(Dynamic(-2, 10, 2, false, 0.125f)).scale(), 0.25f);
}

TEST(LossScaler, FirstOverflowIsAbsorbedByHysteresis) {
  // hysteresis 2: the first overflow spends the budget (2 -> 1), the scale stays.
  LossScaler scaler(Dynamic(16, 1000, 2));
  EXPECT_THAT(Trajectory(scaler, "O"), ElementsAreArray({65536.0f}));
  EXPECT_EQ(scaler.state().hysteresis_left, 1);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(LossScaler, IsolatedOverflowsHalveOnceTheBudgetIsSpent) {
  // Without consecutive_hysteresis clean steps do not refill the budget; only a growth does.
  EXPECT_THAT(Trajectory(Dynamic(16, 1000, 2), "O...O...O"),
              ElementsAreArray({65536.0f, 65536.0f, 65536.0f, 65536.0f, 32768.0f, 32768.0f,
                                32768.0f, 32768.0f, 16384.0f}));
}

TEST(LossScaler, HysteresisOfOneHalvesOnEveryOverflow) {
  EXPECT_THAT(Trajectory(Dynamic(10, 1000, 1), "O.O"), ElementsAreArray({512.0f, 512.0f, 256.0f}));
}

TEST(LossScaler, ConsecutiveOverflowsHalveEachTimeAfterTheBudget) {
  // hysteresis 3: two overflows absorbed (3 -> 2 -> 1), then every overflow halves.
  LossScaler scaler(Dynamic(16, 1000, 3));
  EXPECT_THAT(Trajectory(scaler, "OOOOO"),
              ElementsAreArray({65536.0f, 65536.0f, 32768.0f, 16384.0f, 8192.0f}));
  EXPECT_EQ(scaler.skipped_steps(), 5);
  EXPECT_EQ(scaler.state().hysteresis_left, 1);
}

TEST(LossScaler, GrowsOnTheCleanStepAfterAFullWindow) {
  // window 4 from the start: clean steps 0-3 keep the scale, step 4 (4 clean steps before it)
  // doubles, step 8 doubles again.
  EXPECT_THAT(Trajectory(Dynamic(16, 4, 2), "........."),
              ElementsAreArray({65536.0f, 65536.0f, 65536.0f, 65536.0f, 131072.0f, 131072.0f,
                                131072.0f, 131072.0f, 262144.0f}));
}

TEST(LossScaler, AnOverflowRestartsTheWindowAndAGrowthRefillsTheBudget) {
  // Step 0 overflows (budget 2 -> 1). The window counts from there: step 5 is the fifth clean
  // step, with four before it, and doubles the scale and refills the budget, so the overflow at
  // step 6 is absorbed and the one at step 7 halves.
  LossScaler scaler(Dynamic(16, 4, 2));
  EXPECT_THAT(Trajectory(scaler, "O.....OO"),
              ElementsAreArray({65536.0f, 65536.0f, 65536.0f, 65536.0f, 65536.0f, 131072.0f,
                                131072.0f, 65536.0f}));
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

TEST(LossScaler, AnAbsorbedOverflowAlsoRestartsTheWindow) {
  // Clean steps 0-2, an absorbed overflow at 3, then four clean steps are needed again.
  EXPECT_THAT(Trajectory(Dynamic(16, 4, 2), "...O....."),
              ElementsAreArray({65536.0f, 65536.0f, 65536.0f, 65536.0f, 65536.0f, 65536.0f,
                                65536.0f, 65536.0f, 131072.0f}));
}

TEST(LossScaler, ConsecutiveHysteresisRefillsAfterEveryCleanStep) {
  const std::string pattern = "O.O.O.OO";
  EXPECT_THAT(Trajectory(Dynamic(16, 1000, 2, /*consecutive=*/false), pattern),
              ElementsAreArray(
                  {65536.0f, 65536.0f, 32768.0f, 32768.0f, 16384.0f, 16384.0f, 8192.0f, 4096.0f}));
  // With it, an overflow between clean steps is always absorbed; two in a row halve once.
  EXPECT_THAT(Trajectory(Dynamic(16, 1000, 2, /*consecutive=*/true), pattern),
              ElementsAreArray({65536.0f, 65536.0f, 65536.0f, 65536.0f, 65536.0f, 65536.0f,
                                65536.0f, 32768.0f}));
}

TEST(LossScaler, ConsecutiveHysteresisStillGrowsAfterAWindow) {
  // window 2: step 0 overflows, steps 1-2 are clean, step 3 has two clean steps before it.
  LossScaler scaler(Dynamic(16, 2, 2, /*consecutive=*/true));
  EXPECT_THAT(Trajectory(scaler, "O..."),
              ElementsAreArray({65536.0f, 65536.0f, 65536.0f, 131072.0f}));
  EXPECT_EQ(scaler.state().hysteresis_left, 2);
}

TEST(LossScaler, HalvingStopsAtMinLossScale) {
  // 4 -> max(2, 3) = 3; the scale is then at the minimum and another overflow ends the run.
  LossScaler scaler(Dynamic(2, 1000, 1, false, /*min_loss_scale=*/3));
  EXPECT_THAT(Trajectory(scaler, "O"), ElementsAreArray({3.0f}));
  const LossScalerState before = scaler.state();
  StatusOr<bool> result = scaler.Update(true);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(),
              HasSubstr("loss scale already at fp16.min_loss_scale (3)"));
  EXPECT_EQ(scaler.scale(), 3.0f);
  EXPECT_EQ(scaler.skipped_steps(), before.skipped_steps);
  // A clean step is still fine, and growth starts from the floor.
  EXPECT_THAT(Trajectory(scaler, "."), ElementsAreArray({3.0f}));
}

TEST(LossScaler, ReachingTheMinimumExactlyIsAllowedOnce) {
  LossScaler scaler(Dynamic(2, 1000, 1));
  EXPECT_THAT(Trajectory(scaler, "OO"), ElementsAreArray({2.0f, 1.0f}));
  EXPECT_FALSE(scaler.Update(true).ok());
  // Spending hysteresis at the minimum is not a halving and is allowed.
  LossScaler absorbing(Dynamic(0, 1000, 2));
  EXPECT_THAT(Trajectory(absorbing, "O"), ElementsAreArray({1.0f}));
  EXPECT_FALSE(absorbing.Update(true).ok());
}

TEST(LossScaler, StaticScaleNeverChangesButStillSkipsOverflows) {
  Fp16Config config;
  config.enabled = true;
  config.loss_scale = 128;
  config.loss_scale_window = 1;
  config.hysteresis = 1;
  LossScaler scaler(config);
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 128.0f);
  const std::vector<float> scales =
      Trajectory(scaler, "OO...OOOO.." + std::string(2000, '.') + "O");
  EXPECT_EQ(scales, std::vector<float>(scales.size(), 128.0f));
  EXPECT_EQ(scaler.skipped_steps(), 7);
}

TEST(LossScaler, GrowthStopsAtTheLargestFloatPowerOfTwo) {
  EXPECT_THAT(Trajectory(Dynamic(126, 1, 2), "...."),
              ElementsAreArray({0x1p126f, 0x1p127f, 0x1p127f, 0x1p127f}));
}

TEST(LossScaler, RestoredStateContinuesTheSameTrajectory) {
  const Fp16Config config = Dynamic(16, 3, 2);
  LossScaler original(config);
  Trajectory(original, "O..O.");
  const LossScalerState saved = original.state();
  LossScaler resumed(config);
  ASSERT_TRUE(resumed.Restore(saved).ok());
  EXPECT_EQ(resumed.scale(), original.scale());
  EXPECT_EQ(resumed.skipped_steps(), 2);
  const std::string rest = "..O.O....OO";
  EXPECT_EQ(Trajectory(resumed, rest), Trajectory(original, rest));
  EXPECT_EQ(resumed.skipped_steps(), original.skipped_steps());
  EXPECT_EQ(resumed.state().clean_steps, original.state().clean_steps);
}

TEST(LossScaler, RestoreCutsTheBudgetToTheConfiguredHysteresis) {
  LossScalerState state;
  state.scale = 1024;
  state.hysteresis_left = 5;
  LossScaler scaler(Dynamic(16, 1000, 2));
  ASSERT_TRUE(scaler.Restore(state).ok());
  EXPECT_EQ(scaler.state().hysteresis_left, 2);
  EXPECT_THAT(Trajectory(scaler, "OO"), ElementsAreArray({1024.0f, 512.0f}));
}

TEST(LossScaler, StaticScalerRestoresOnlyTheSkippedCount) {
  Fp16Config config;
  config.enabled = true;
  config.loss_scale = 64;
  LossScaler scaler(config);
  LossScalerState state;
  state.scale = 4096;
  state.skipped_steps = 9;
  ASSERT_TRUE(scaler.Restore(state).ok());
  EXPECT_EQ(scaler.scale(), 64.0f);
  EXPECT_EQ(scaler.skipped_steps(), 9);
}

TEST(LossScaler, RestoreRefusesAStateNoScalerCanHold) {
  LossScaler scaler(Dynamic(16, 1000, 2));
  for (auto damage :
       {+[](LossScalerState& s) { s.scale = 0; }, +[](LossScalerState& s) { s.scale = -2; },
        +[](LossScalerState& s) { s.scale = std::numeric_limits<float>::infinity(); },
        +[](LossScalerState& s) { s.hysteresis_left = 0; },
        +[](LossScalerState& s) { s.clean_steps = -1; },
        +[](LossScalerState& s) { s.skipped_steps = -1; }}) {
    LossScalerState state;
    damage(state);
    Status status = scaler.Restore(state);
    EXPECT_EQ(status.code(), StatusCode::kDataLoss);
    EXPECT_THAT(status.message(), HasSubstr("resume from another one"));
  }
  EXPECT_EQ(scaler.scale(), 65536.0f);
}

}  // namespace
}  // namespace hoist::runtime
