// The fp16, bf16 and communication_data_type keys: DeepSpeed's names, meanings and defaults.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::ParseOk;

TEST(ConfigPrecision, DefaultsAreDeepSpeeds) {
  Config c = ParseOk(kMinimal);
  EXPECT_EQ(c.precision(), DType::kFloat32);
  EXPECT_EQ(c.communication_data_type, DType::kFloat32);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.loss_scale, 0.0f);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_FALSE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0f);
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigPrecision, Fp16SectionIsReadWhole) {
  Config c = ParseOk(kMinimal, {R"(fp16={"enabled": true, "auto_cast": false, "loss_scale": 0,
      "initial_scale_power": 12, "loss_scale_window": 500, "hysteresis": 4,
      "consecutive_hysteresis": true, "min_loss_scale": 0.25,
      "fp16_master_weights_and_grads": false})"});
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_EQ(c.precision(), DType::kFloat16);
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_EQ(c.fp16.loss_scale_window, 500);
  EXPECT_EQ(c.fp16.hysteresis, 4);
  EXPECT_TRUE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.fp16.min_loss_scale, 0.25f);
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigPrecision, StaticLossScaleIsRead) {
  Config c = ParseOk(kMinimal, {"fp16.enabled=true", "fp16.loss_scale=1024"});
  EXPECT_EQ(c.fp16.loss_scale, 1024.0f);
}

TEST(ConfigPrecision, Bf16AndItsLegacyNameEnableBf16) {
  EXPECT_EQ(ParseOk(kMinimal, {"bf16.enabled=true"}).precision(), DType::kBFloat16);
  EXPECT_EQ(ParseOk(kMinimal, {"bfloat16.enabled=true"}).precision(), DType::kBFloat16);
  Config c = ParseOk(kMinimal, {R"(bf16={"enabled": true, "immediate_grad_update": false,
      "check_grad_overflow": true, "bf16_master_weights_and_grads": false,
      "bf16_optimizer_states": false})"});
  EXPECT_TRUE(c.bf16.enabled);
  // immediate_grad_update does not change the sum of the gradients: one notice.
  EXPECT_THAT(c.notices, ElementsAre(HasSubstr("bf16.immediate_grad_update")));
}

TEST(ConfigPrecision, Bf16UnderBothNamesIsRefused) {
  Status s = ErrorOf(kMinimal, {"bf16.enabled=true", "bfloat16.enabled=true"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("bfloat16: is the legacy name of bf16"),
                                 HasSubstr("keep only bf16")));
}

TEST(ConfigPrecision, Fp16AndBf16TogetherAreRefused) {
  Status s = ErrorOf(kMinimal, {"fp16.enabled=true", "bf16.enabled=true"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("bf16.enabled: fp16.enabled and bf16.enabled are both true"),
                    HasSubstr("enable at most one")));
  EXPECT_THAT(ErrorOf(kMinimal, {"fp16.enabled=true", "bfloat16.enabled=true"}).message(),
              HasSubstr("fp16.enabled and bfloat16.enabled are both true"));
  // One enabled and the other present but off is fine.
  EXPECT_EQ(ParseOk(kMinimal, {"fp16.enabled=true", "bf16.enabled=false"}).precision(),
            DType::kFloat16);
}

TEST(ConfigPrecision, CommunicationTypeDefaultsToTheComputePrecision) {
  EXPECT_EQ(ParseOk(kMinimal, {"fp16.enabled=true"}).communication_data_type, DType::kFloat16);
  EXPECT_EQ(ParseOk(kMinimal, {"bf16.enabled=true"}).communication_data_type, DType::kBFloat16);
  EXPECT_EQ(ParseOk(kMinimal, {"bf16.enabled=true", "communication_data_type=null"})
                .communication_data_type,
            DType::kBFloat16);
}

TEST(ConfigPrecision, CommunicationTypeIsReadInAnyCase) {
  EXPECT_EQ(ParseOk(kMinimal, {"fp16.enabled=true", "communication_data_type=fp32"})
                .communication_data_type,
            DType::kFloat32);
  EXPECT_EQ(ParseOk(kMinimal, {"communication_data_type=BF16"}).communication_data_type,
            DType::kBFloat16);
  EXPECT_EQ(ParseOk(kMinimal, {"communication_data_type=fp16"}).communication_data_type,
            DType::kFloat16);
}

TEST(ConfigPrecision, UnknownCommunicationTypeListsTheValidOnes) {
  Status s = ErrorOf(kMinimal, {"communication_data_type=float32"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("communication_data_type: must be \"fp32\", \"fp16\" or \"bf16\""));
  EXPECT_THAT(ErrorOf(kMinimal, {"communication_data_type=fp61"}).message(),
              HasSubstr("did you mean \"fp16\"?"));
}

TEST(ConfigPrecision, PrecisionNamesAreDeepSpeeds) {
  EXPECT_STREQ(DTypeName(DType::kFloat32), "fp32");
  EXPECT_STREQ(DTypeName(DType::kBFloat16), "bf16");
  EXPECT_STREQ(DTypeName(DType::kFloat16), "fp16");
}

TEST(ConfigPrecision, AutoCastIsAcceptedWithANoticeWhenFp16IsOn) {
  Config c = ParseOk(kMinimal, {"fp16.enabled=true", "fp16.auto_cast=true"});
  EXPECT_THAT(c.notices, ElementsAre(AllOf(HasSubstr("job.json: fp16.auto_cast"),
                                           HasSubstr("token ids"), HasSubstr("ignored"))));
  EXPECT_TRUE(ParseOk(kMinimal, {"fp16.enabled=true", "fp16.auto_cast=false"}).notices.empty());
}

TEST(ConfigPrecision, DynamicScalerChecksSkipAStaticScaleAndADisabledSection) {
  // DeepSpeed validates the dynamic scaler's arguments only when it builds one.
  ParseOk(kMinimal, {"fp16.enabled=true", "fp16.loss_scale=128", "fp16.loss_scale_window=0",
                     "fp16.hysteresis=0"});
  ParseOk(kMinimal, {"fp16.enabled=false", "fp16.min_loss_scale=0"});
}

TEST(ConfigPrecision, OverrideAttributesFp16Errors) {
  Status s = ErrorOf(kMinimal, {"fp16.enabled=true", "fp16.hysteresis=0"});
  EXPECT_THAT(s.message(), HasSubstr("--set fp16.hysteresis=0: fp16.hysteresis: must be >= 1"));
}

// ---- refused values: each case is one set of overrides that must fail naming the key ----

using testing_util::BadValue;
using testing_util::kInvalid;
using testing_util::kUnimplemented;

class ConfigPrecisionRefuses : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigPrecisionRefuses, NamingTheKey) { testing_util::ExpectRefused(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Values, ConfigPrecisionRefuses,
    ::testing::Values(
        // wrong types
        BadValue{"EnabledString",
                 {"fp16.enabled=yes"},
                 kInvalid,
                 "fp16.enabled: expected true or false, found a string (\"yes\")"},
        BadValue{"LossScaleBool",
                 {"fp16.loss_scale=true"},
                 kInvalid,
                 "fp16.loss_scale: expected a number, found a boolean"},
        BadValue{"PowerFraction",
                 {"fp16.initial_scale_power=16.5"},
                 kInvalid,
                 "fp16.initial_scale_power: expected an integer, found 16.5"},
        BadValue{"WindowString",
                 {"fp16.loss_scale_window=\"1000\""},
                 kInvalid,
                 "fp16.loss_scale_window: expected an integer, found a string"},
        BadValue{"HysteresisArray",
                 {"fp16.hysteresis=[2]"},
                 kInvalid,
                 "fp16.hysteresis: expected an integer, found an array"},
        BadValue{"ConsecutiveNumber",
                 {"fp16.consecutive_hysteresis=1"},
                 kInvalid,
                 "fp16.consecutive_hysteresis: expected true or false, found a number"},
        BadValue{"MinScaleString",
                 {"fp16.min_loss_scale=\"1\""},
                 kInvalid,
                 "fp16.min_loss_scale: expected a number, found a string"},
        BadValue{"AutoCastAuto",
                 {"fp16.auto_cast=auto"},
                 kInvalid,
                 "fp16.auto_cast: \"auto\" is a placeholder"},
        BadValue{"Bf16EnabledNumber",
                 {"bf16.enabled=1"},
                 kInvalid,
                 "bf16.enabled: expected true or false, found a number (1)"},
        BadValue{
            "Fp16NotAnObject", {"fp16=5"}, kInvalid, "fp16: expected an object, found a number"},
        BadValue{"CommTypeNumber",
                 {"communication_data_type=16"},
                 kInvalid,
                 "communication_data_type: expected a string, found a number"},
        // out of range
        BadValue{"NegativeLossScale",
                 {"fp16.loss_scale=-1"},
                 kInvalid,
                 "fp16.loss_scale: must be >= 0 (0: dynamic loss scaling"},
        BadValue{"PowerTooLarge",
                 {"fp16.enabled=true", "fp16.initial_scale_power=128"},
                 kInvalid,
                 "fp16.initial_scale_power: must be in [-126, 127]"},
        BadValue{"PowerTooSmall",
                 {"fp16.enabled=true", "fp16.initial_scale_power=-127"},
                 kInvalid,
                 "fp16.initial_scale_power: must be in [-126, 127]"},
        BadValue{"PowerBeyondInt",
                 {"fp16.initial_scale_power=3e9"},
                 kInvalid,
                 "fp16.initial_scale_power: 3000000000.0 is out of range"},
        BadValue{"ZeroWindow",
                 {"fp16.enabled=true", "fp16.loss_scale_window=0"},
                 kInvalid,
                 "fp16.loss_scale_window: must be > 0"},
        BadValue{"ZeroHysteresis",
                 {"fp16.enabled=true", "fp16.hysteresis=0"},
                 kInvalid,
                 "fp16.hysteresis: must be >= 1"},
        BadValue{"ZeroMinScale",
                 {"fp16.enabled=true", "fp16.min_loss_scale=0"},
                 kInvalid,
                 "fp16.min_loss_scale: must be > 0, found 0"},
        BadValue{"NegativeMinScale",
                 {"fp16.enabled=true", "fp16.min_loss_scale=-0.5"},
                 kInvalid,
                 "fp16.min_loss_scale: must be > 0, found -0.5"},
        // typos
        BadValue{"Fp16Typo",
                 {"fp16.hysteresys=2"},
                 kInvalid,
                 "fp16.hysteresys: unknown key \"hysteresys\"; did you mean \"fp16.hysteresis\"?"},
        BadValue{"WindowTypo",
                 {"fp16.loss_scale_windw=2"},
                 kInvalid,
                 "did you mean \"fp16.loss_scale_window\"?"},
        BadValue{"Bf16Typo",
                 {"bf16.enabeld=true"},
                 kInvalid,
                 "bf16.enabeld: unknown key \"enabeld\"; did you mean \"bf16.enabled\"?"},
        BadValue{"LegacyBf16Typo",
                 {"bfloat16.enabeld=true"},
                 kInvalid,
                 "did you mean \"bfloat16.enabled\"?"},
        BadValue{"SectionTypo", {"fp61.enabled=true"}, kInvalid, "did you mean \"fp16\"?"},
        // features hoist lacks
        BadValue{"Fp16MasterWeights",
                 {"fp16.fp16_master_weights_and_grads=true"},
                 kUnimplemented,
                 "fp16.fp16_master_weights_and_grads: this build does not support fp16 master "
                 "weights yet; set it to false"},
        BadValue{"Bf16MasterWeights",
                 {"bf16.bf16_master_weights_and_grads=true"},
                 kUnimplemented,
                 "bf16.bf16_master_weights_and_grads: this build does not support"},
        BadValue{"Bf16OptimizerStates",
                 {"bf16.bf16_optimizer_states=true"},
                 kUnimplemented,
                 "bf16.bf16_optimizer_states: this build does not support"},
        BadValue{"Bf16WithoutOverflowCheck",
                 {"bf16.check_grad_overflow=false"},
                 kUnimplemented,
                 "bf16.check_grad_overflow: this build does not support bf16 steps without the "
                 "inf/NaN gradient check yet; set it to true"}),
    testing_util::BadValueName);

}  // namespace
}  // namespace hoist::runtime
