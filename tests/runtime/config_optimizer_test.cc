// The defaults hoist fills in for the optimizer, the clipping and the warmup are DeepSpeed's
// (its current code), and each one that decides the training is said once in a notice.
#include "runtime/config/config_optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/config/engine_options.h"
#include "runtime/config/lr_schedule.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::ParseOk;

// kMinimal without the optimizer and clipping it sets.
constexpr char kBare[] = R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"},
                             "train": {"steps": 10}})";

// A DeepSpeed config without `optimizer` trains what its script passes; hoist has no script.
TEST(ConfigOptimizerDefaults, NoOptimizerSectionTrainsAdamWAndSaysSo) {
  Config c = ParseOk(kBare, {"gradient_clipping=1.0"});
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_FLOAT_EQ(c.optimizer.lr, 1e-3f);
  EXPECT_THAT(c.notices,
              ElementsAre(AllOf(HasSubstr("job.json: optimizer: not set; DeepSpeed would train "
                                          "with the optimizer the training script passes"),
                                HasSubstr("training AdamW with lr 0.001"))));
}

TEST(ConfigOptimizerDefaults, AnOptimizerWithoutLrSaysWhichLr) {
  Config c = ParseOk(kBare, {"gradient_clipping=1.0", "optimizer.type=Adam"});
  EXPECT_THAT(c.notices, ElementsAre(HasSubstr("job.json: optimizer.params.lr: not set; 0.001 (the "
                                               "default of DeepSpeed's Adam)")));
  EXPECT_THAT(ParseOk(kMinimal).notices, IsEmpty());
}

// DeepSpeed builds an optimizer from the section only when it names a type; hoist trains AdamW
// with the params given, and says so.
TEST(ConfigOptimizerDefaults, AnOptimizerWithoutTypeTrainsAdamWAndSaysSo) {
  Config c = ParseOk(kBare, {"gradient_clipping=1.0", "optimizer.params.lr=3e-4"});
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_FLOAT_EQ(c.optimizer.lr, 3e-4f);
  EXPECT_THAT(c.notices, ElementsAre(AllOf(HasSubstr("job.json: optimizer.type: not set"),
                                           HasSubstr("hoist trains AdamW with these params"))));
}

// warmup_num_steps 0 (DeepSpeed warms up over max(2, n) steps) was accepted by the config, and so
// by `hoist estimate`, and then refused by the trainer's schedule without naming the file: both
// run the schedule's checks now, at parse.
TEST(ConfigOptimizerDefaults, TheScheduleIsCheckedOnceForEveryCommand) {
  const Config c =
      ParseOk(kMinimal, {"scheduler.type=WarmupLR", "scheduler.params.warmup_num_steps=0",
                         "scheduler.params.warmup_max_lr=1e-3"});
  EXPECT_EQ(c.scheduler.warmup_num_steps, 0);
  EXPECT_TRUE(LrSchedule::Create(LrScheduleParamsOf(c)).ok());
}

// DeepSpeed clips at 1.0 by default since 0.19.3 (0: off before it), so an unset key is said.
TEST(ConfigOptimizerDefaults, UnsetClippingClipsAtOneAndSaysSo) {
  // Absent, and null (DeepSpeed's None), are both unset.
  for (const Config& c : {ParseOk(kBare, {"optimizer.type=AdamW", "optimizer.params.lr=1e-3"}),
                          ParseOk(kMinimal, {"gradient_clipping=null"})}) {
    EXPECT_FLOAT_EQ(c.gradient_clipping, 1.0f);
    EXPECT_THAT(c.notices,
                ElementsAre(AllOf(HasSubstr("job.json: gradient_clipping: not set; gradients are "
                                            "clipped to a global norm of 1"),
                                  HasSubstr("earlier releases did not clip"),
                                  HasSubstr("or to 0 to turn clipping off"))));
  }
  EXPECT_THAT(ParseOk(kMinimal, {"gradient_clipping=0"}).notices, IsEmpty());
}

TEST(ConfigOptimizerDefaults, WarmupLrWithoutItsEndWarmsToTheOptimizersLrAndSaysSo) {
  Config c = ParseOk(kMinimal, {"optimizer.params.lr=3e-4", "scheduler.type=WarmupLR"});
  EXPECT_FALSE(c.scheduler.warmup_max_lr.has_value());
  EXPECT_THAT(c.notices,
              ElementsAre(AllOf(HasSubstr("job.json: scheduler.params.warmup_max_lr: not set; "
                                          "WarmupLR warms up to optimizer.params.lr (0.0003)"),
                                HasSubstr("older DeepSpeed releases warm up to 0.001"))));
  EXPECT_THAT(
      ParseOk(kMinimal, {"scheduler.type=WarmupLR", "scheduler.params.warmup_max_lr=3e-4"}).notices,
      IsEmpty());
}

TEST(ConfigOptimizerDefaults, WarmupDecayLrWithoutItsEndWarmsToDeepSpeedsConstantAndSaysSo) {
  Config c = ParseOk(kMinimal, {"optimizer.params.lr=3e-4", "scheduler.type=WarmupDecayLR",
                                "scheduler.params.total_num_steps=2000"});
  EXPECT_THAT(c.notices,
              ElementsAre(HasSubstr("scheduler.params.warmup_max_lr: not set; WarmupDecayLR warms "
                                    "up to 0.001 (DeepSpeed's default for WarmupDecayLR), not to "
                                    "optimizer.params.lr (0.0003)")));
}

TEST(ConfigOptimizerDefaults, AWarmupStartAboveItsDefaultEndIsRefused) {
  Status s = ErrorOf(kMinimal, {"scheduler.type=WarmupLR", "scheduler.params.warmup_min_lr=0.01"});
  EXPECT_THAT(s.message(), HasSubstr("scheduler.params.warmup_min_lr: is 0.01, above where the "
                                     "warmup ends: warmup_max_lr is not set, so it is "
                                     "optimizer.params.lr (0.001); set warmup_max_lr"));
}

// The demo job sets everything that would be noticed.
TEST(ConfigOptimizerDefaults, TheDemoJobDrawsNoNotice) {
  StatusOr<Config> demo = LoadConfig("", {}, 1);
  ASSERT_TRUE(demo.ok()) << demo.status().ToString();
  EXPECT_THAT(demo->notices, IsEmpty());
}

}  // namespace
}  // namespace hoist::runtime

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::ParseOk;

// bitsandbytes' class name and Hugging Face's optimizer names, in any case, are one optimizer.
TEST(ConfigAdamW8bit, TypeIsAcceptedUnderItsNamesAndReachesTheEngine) {
  for (const char* name : {"AdamW8bit", "adamw8bit", "adamw_8bit", "ADAMW_BNB_8BIT"}) {
    const Config c = ParseOk(kMinimal, {std::string("optimizer.type=") + name});
    EXPECT_EQ(c.optimizer.type, "AdamW8bit") << name;
    EXPECT_EQ(c.optimizer.min_8bit_size, 4096);
    const zero::ZeroOptions options = ZeroOptionsFrom(c);
    EXPECT_TRUE(options.adam.eight_bit);
    EXPECT_EQ(options.adam.min_8bit_size, 4096);
  }
  EXPECT_FALSE(ZeroOptionsFrom(ParseOk(kMinimal, {})).adam.eight_bit);
}

TEST(ConfigAdamW8bit, MinSizeIsAParamOfTheEightBitOptimizerOnly) {
  const Config c =
      ParseOk(kMinimal, {"optimizer.type=AdamW8bit", "optimizer.params.min_8bit_size=100"});
  EXPECT_EQ(c.optimizer.min_8bit_size, 100);
  EXPECT_EQ(ZeroOptionsFrom(c).adam.min_8bit_size, 100);
  EXPECT_THAT(ErrorOf(kMinimal, {"optimizer.type=AdamW8bit", "optimizer.params.min_8bit_size=-1"})
                  .message(),
              HasSubstr("min_8bit_size"));
  // AdamW has no such parameter: an unknown key.
  EXPECT_THAT(ErrorOf(kMinimal, {"optimizer.params.min_8bit_size=100"}).message(),
              HasSubstr("min_8bit_size"));
}

}  // namespace
}  // namespace hoist::runtime
