#include "runtime/config/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace hoist::runtime {
namespace {

// Learning rates are exactly representable binary fractions so that the float parameters do not
// perturb the hand-derived references below. Steps are chosen where log(it + 1) / log(W) or the
// cosine has an exact value (W = 100: it = 9 gives 1/2; p = 1/2 gives cos = 0).
constexpr double kAtol = 1e-12;
constexpr double kRtol = 1e-12;

void ExpectLr(const LrSchedule& schedule, int64_t iteration, double reference) {
  const double lr = schedule.LrAt(iteration);
  EXPECT_LE(std::abs(lr - reference), kAtol + kRtol * std::abs(reference))
      << "iteration " << iteration << ": lr " << lr << " vs reference " << reference;
}

LrSchedule MustCreate(const LrScheduleParams& params) {
  StatusOr<LrSchedule> schedule = LrSchedule::Create(params);
  EXPECT_TRUE(schedule.ok()) << schedule.status().ToString();
  return std::move(schedule).value();
}

LrScheduleParams Warmup(const std::string& type, const std::string& warmup_type) {
  LrScheduleParams params;
  params.type = type;
  params.base_lr = 2.0f;
  params.warmup_min_lr = 0.25f;
  params.warmup_max_lr = 1.25f;
  params.warmup_num_steps = 100;
  params.warmup_type = warmup_type;
  params.total_num_steps = 300;
  return params;
}

TEST(LrSchedule, ConstantIsBaseLrEverywhere) {
  LrScheduleParams params;
  params.base_lr = 0.375f;
  const LrSchedule schedule = MustCreate(params);
  for (int64_t it : {-1, 0, 1, 1000, 1000000}) ExpectLr(schedule, it, 0.375);
}

TEST(LrSchedule, WarmupLrLogFollowsLogOfIterationThenHolds) {
  const LrSchedule schedule = MustCreate(Warmup("WarmupLR", "log"));
  ExpectLr(schedule, -1, 0.25);             // before the first scheduler step: min
  ExpectLr(schedule, 0, 0.25);              // log(1) = 0
  ExpectLr(schedule, 9, 0.25 + 1.0 * 0.5);  // log(10) / log(100) = 1/2
  ExpectLr(schedule, 99, 1.25);             // log(100) / log(100) = 1
  ExpectLr(schedule, 100, 1.25);            // the boundary
  ExpectLr(schedule, 300, 1.25);            // WarmupLR never decays
  ExpectLr(schedule, 100000, 1.25);
}

TEST(LrSchedule, WarmupLrLinearIsFractionOfWarmup) {
  const LrSchedule schedule = MustCreate(Warmup("WarmupLR", "linear"));
  ExpectLr(schedule, 0, 0.25);
  ExpectLr(schedule, 25, 0.25 + 1.0 * 0.25);
  ExpectLr(schedule, 99, 0.25 + 1.0 * 0.99);
  ExpectLr(schedule, 100, 1.25);
  ExpectLr(schedule, 5000, 1.25);
}

TEST(LrSchedule, LogAndLinearWarmupDiffer) {
  const LrSchedule log = MustCreate(Warmup("WarmupLR", "log"));
  const LrSchedule linear = MustCreate(Warmup("WarmupLR", "linear"));
  // Log warmup front-loads: at it = 9 it is half-way, linear is at 9%.
  EXPECT_GT(log.LrAt(9), linear.LrAt(9) + 0.3);
}

TEST(LrSchedule, WarmupLrMaxDefaultsToOptimizerLr) {
  LrScheduleParams params = Warmup("WarmupLR", "linear");
  params.warmup_max_lr.reset();
  const LrSchedule schedule = MustCreate(params);
  ExpectLr(schedule, 50, 0.25 + (2.0 - 0.25) * 0.5);
  ExpectLr(schedule, 100, 2.0);
}

TEST(LrSchedule, WarmupStepsBelowTwoAreRaisedToTwo) {
  LrScheduleParams params = Warmup("WarmupLR", "linear");
  params.warmup_num_steps = 1;
  const LrSchedule linear = MustCreate(params);
  ExpectLr(linear, 0, 0.25);
  ExpectLr(linear, 1, 0.25 + 1.0 * 0.5);  // 1 / 2, still warming up
  ExpectLr(linear, 2, 1.25);
  params.warmup_type = "log";
  const LrSchedule log = MustCreate(params);
  ExpectLr(log, 1, 1.25);  // log(2) / log(2)
  // 0 too, as DeepSpeed's max(2, warmup_num_steps): the config accepts it, so the schedule must.
  params.warmup_num_steps = 0;
  params.warmup_type = "linear";
  const LrSchedule none = MustCreate(params);
  ExpectLr(none, 1, 0.25 + 1.0 * 0.5);
  ExpectLr(none, 2, 1.25);
}

TEST(LrSchedule, WarmupDecayLrDecaysLinearlyToZeroFactorAtTotal) {
  // W = 100, T = 300: after warmup the factor is (300 - it) / 200.
  const LrSchedule schedule = MustCreate(Warmup("WarmupDecayLR", "linear"));
  ExpectLr(schedule, 0, 0.25);
  ExpectLr(schedule, 50, 0.25 + 1.0 * 0.5);
  ExpectLr(schedule, 100, 0.25 + 1.0 * 1.0);  // boundary: (300 - 100) / 200
  ExpectLr(schedule, 200, 0.25 + 1.0 * 0.5);
  ExpectLr(schedule, 250, 0.25 + 1.0 * 0.25);
  ExpectLr(schedule, 300, 0.25);   // the end: factor 0, lr = min
  ExpectLr(schedule, 1000, 0.25);  // past the end: clamped at 0, not negative
}

TEST(LrSchedule, WarmupDecayLrLogWarmup) {
  const LrSchedule schedule = MustCreate(Warmup("WarmupDecayLR", "log"));
  ExpectLr(schedule, -1, 0.25);
  ExpectLr(schedule, 9, 0.25 + 1.0 * 0.5);
  ExpectLr(schedule, 150, 0.25 + 1.0 * 0.75);
}

TEST(LrSchedule, WarmupDecayLrMaxDefaultsToDeepSpeedsConstant) {
  LrScheduleParams params = Warmup("WarmupDecayLR", "linear");
  params.warmup_max_lr.reset();
  params.warmup_min_lr = 0;
  const LrSchedule schedule = MustCreate(params);
  ExpectLr(schedule, 100, static_cast<double>(0.001f));
}

TEST(LrSchedule, WarmupDecayLrWithTotalNotAboveWarmupDividesByOne) {
  LrScheduleParams params = Warmup("WarmupDecayLR", "linear");
  params.total_num_steps = 100;  // == W: max(1, T - W) = 1
  const LrSchedule schedule = MustCreate(params);
  ExpectLr(schedule, 100, 0.25);  // factor (100 - 100) / 1 = 0
  ExpectLr(schedule, 120, 0.25);
}

LrScheduleParams Cosine(const std::string& warmup_type) {
  LrScheduleParams params;
  params.type = "WarmupCosineLR";
  params.base_lr = 2.0f;
  params.warmup_num_steps = 100;
  params.warmup_type = warmup_type;
  params.warmup_min_ratio = 0.25f;
  params.cos_min_ratio = 0.125f;
  params.total_num_steps = 300;
  return params;
}

TEST(LrSchedule, WarmupCosineLrWarmsFromMinRatio) {
  const LrSchedule linear = MustCreate(Cosine("linear"));
  ExpectLr(linear, -1, 0.0);  // DeepSpeed's value before the first scheduler step
  ExpectLr(linear, 0, 2.0 * 0.25);
  ExpectLr(linear, 50, 2.0 * (0.25 + 0.75 * 0.5));
  const LrSchedule log = MustCreate(Cosine("log"));
  ExpectLr(log, 0, 2.0 * 0.25);
  ExpectLr(log, 9, 2.0 * (0.25 + 0.75 * 0.5));
}

TEST(LrSchedule, WarmupCosineLrFollowsHalfCosineToFloor) {
  // W = 100, T = 300: after warmup p = (it - 99) / 200.
  const LrSchedule schedule = MustCreate(Cosine("linear"));
  const double pi = std::acos(-1.0);
  // The boundary is already one step into the cosine: p = 1/200.
  ExpectLr(schedule, 100, 2.0 * (0.125 + 0.875 * (1 + std::cos(pi / 200)) / 2));
  ExpectLr(schedule, 199, 2.0 * (0.125 + 0.875 * 0.5));  // p = 1/2, cos = 0
  ExpectLr(schedule, 299, 2.0 * 0.125);                  // p = 1: the floor
  ExpectLr(schedule, 300, 2.0 * 0.125);                  // past the end: clamped
  ExpectLr(schedule, 450, 2.0 * 0.125);                  // would rise again without the clamp
}

TEST(LrSchedule, WarmupCosineLrIsMonotoneAfterWarmup) {
  const LrSchedule schedule = MustCreate(Cosine("log"));
  for (int64_t it = 101; it < 400; ++it) {
    ASSERT_LE(schedule.LrAt(it), schedule.LrAt(it - 1)) << "iteration " << it;
  }
}

struct InvalidCase {
  std::string label;
  LrScheduleParams params;
  std::string key;  // the config key the error must name
};

TEST(LrSchedule, InvalidParamsAreRejectedNamingTheField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<InvalidCase> cases;
  auto add = [&](const std::string& label, LrScheduleParams params, const std::string& key) {
    cases.push_back({label, std::move(params), key});
  };
  LrScheduleParams p = Warmup("WarmupLR", "log");
  p.type = "OneCycle";
  add("unknown type", p, "scheduler.type");
  p = Warmup("WarmupLR", "log");
  p.base_lr = -1;
  add("negative optimizer lr", p, "optimizer.params.lr");
  p = Warmup("WarmupCosineLR", "log");
  p.warmup_num_steps = -3;
  add("negative warmup", p, "scheduler.params.warmup_num_steps");
  p = Warmup("WarmupLR", "cosine");
  add("unknown warmup type", p, "scheduler.params.warmup_type");
  p = Warmup("WarmupLR", "log");
  p.warmup_min_lr = -0.5f;
  add("negative min lr", p, "scheduler.params.warmup_min_lr");
  p = Warmup("WarmupDecayLR", "log");
  p.warmup_max_lr = nan;
  add("NaN max lr", p, "scheduler.params.warmup_max_lr");
  p = Warmup("WarmupDecayLR", "log");
  p.total_num_steps = 0;
  add("decay without total", p, "scheduler.params.total_num_steps");
  p = Cosine("log");
  p.total_num_steps = -1;
  add("cosine without total", p, "scheduler.params.total_num_steps");
  p = Cosine("log");
  p.warmup_min_ratio = 1.5f;
  add("min ratio above one", p, "scheduler.params.warmup_min_ratio");
  p = Cosine("log");
  p.cos_min_ratio = -0.125f;
  add("negative cosine floor", p, "scheduler.params.cos_min_ratio");

  for (const InvalidCase& c : cases) {
    StatusOr<LrSchedule> schedule = LrSchedule::Create(c.params);
    ASSERT_FALSE(schedule.ok()) << c.label;
    EXPECT_EQ(schedule.status().code(), StatusCode::kInvalidArgument) << c.label;
    EXPECT_NE(schedule.status().message().find(c.key), std::string::npos)
        << c.label << ": " << schedule.status().message();
  }
}

TEST(LrSchedule, WarmupLrIgnoresTotalSteps) {
  LrScheduleParams params = Warmup("WarmupLR", "log");
  params.total_num_steps = 0;
  EXPECT_TRUE(LrSchedule::Create(params).ok());
}

}  // namespace
}  // namespace hoist::runtime
