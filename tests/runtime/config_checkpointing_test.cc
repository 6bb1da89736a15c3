// `activation_checkpointing` in the config: DeepSpeed's keys, hoist's `policy` and `every_k`, and
// the keys that are accepted with a notice because they have no counterpart here.
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

TEST(ConfigCheckpointing, AbsentMeansNoCheckpointing) {
  const Config c = ParseOk(kMinimal);
  EXPECT_EQ(c.activation_checkpointing.policy, CheckpointPolicy::kNone);
  EXPECT_FALSE(c.activation_checkpointing.enabled());
  EXPECT_FALSE(c.activation_checkpointing.cpu_checkpointing);
}

TEST(ConfigCheckpointing, SectionWithoutPolicyCheckpointsEveryBlock) {
  const Config c = ParseOk(kMinimal, {"activation_checkpointing={}"});
  EXPECT_EQ(c.activation_checkpointing.policy, CheckpointPolicy::kFull);
  // Said once, since a DeepSpeed file carries the section without hoist's policy.
  EXPECT_THAT(c.notices, ElementsAre(AllOf(HasSubstr("activation_checkpointing.policy"),
                                           HasSubstr("\"full\""))));
  for (int l = 0; l < 4; ++l) EXPECT_TRUE(c.activation_checkpointing.Checkpointed(l));
}

TEST(ConfigCheckpointing, PoliciesAreReadCaseInsensitively) {
  const struct {
    const char* text;
    CheckpointPolicy policy;
  } cases[] = {{"none", CheckpointPolicy::kNone},
               {"FULL", CheckpointPolicy::kFull},
               {"every_k", CheckpointPolicy::kEveryK},
               {"Selective", CheckpointPolicy::kSelective}};
  for (const auto& c : cases) {
    const Config config =
        ParseOk(kMinimal, {std::string("activation_checkpointing.policy=") + c.text});
    EXPECT_EQ(config.activation_checkpointing.policy, c.policy) << c.text;
  }
}

TEST(ConfigCheckpointing, EveryKCheckpointsOneBlockInK) {
  const Config c = ParseOk(
      kMinimal, {"activation_checkpointing.policy=every_k", "activation_checkpointing.every_k=3"});
  const ActivationCheckpointingConfig& ac = c.activation_checkpointing;
  EXPECT_EQ(ac.every_k, 3);
  std::vector<bool> checkpointed;
  for (int l = 0; l < 7; ++l) checkpointed.push_back(ac.Checkpointed(l));
  EXPECT_THAT(checkpointed, ElementsAre(true, false, false, true, false, false, true));
  // The default k is 2.
  const Config d = ParseOk(kMinimal, {"activation_checkpointing.policy=every_k"});
  EXPECT_EQ(d.activation_checkpointing.every_k, 2);
  // Selective recomputes part of every block, so no block is checkpointed whole.
  const Config s = ParseOk(kMinimal, {"activation_checkpointing.policy=selective"});
  EXPECT_FALSE(s.activation_checkpointing.Checkpointed(0));
}

TEST(ConfigCheckpointing, CpuCheckpointingIsRead) {
  const Config c = ParseOk(kMinimal, {"activation_checkpointing.policy=full",
                                      "activation_checkpointing.cpu_checkpointing=true"});
  EXPECT_TRUE(c.activation_checkpointing.cpu_checkpointing);
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigCheckpointing, KeysWithoutACounterpartGiveOneNoticeEach) {
  const Config c =
      ParseOk(kMinimal, {"activation_checkpointing.policy=full",
                         "activation_checkpointing.partition_activations=true",
                         "activation_checkpointing.contiguous_memory_optimization=true",
                         "activation_checkpointing.number_checkpoints=4",
                         "activation_checkpointing.synchronize_checkpoint_boundary=true",
                         "activation_checkpointing.profile=true"});
  EXPECT_THAT(c.notices,
              ElementsAre(AllOf(HasSubstr("activation_checkpointing.partition_activations"),
                                HasSubstr("no model parallelism")),
                          HasSubstr("activation_checkpointing.contiguous_memory_optimization"),
                          HasSubstr("activation_checkpointing.number_checkpoints"),
                          HasSubstr("activation_checkpointing.synchronize_checkpoint_boundary")));
  EXPECT_TRUE(c.activation_checkpointing.profile);
  EXPECT_EQ(c.activation_checkpointing.number_checkpoints, 4);
  // DeepSpeed's defaults (false, null) say nothing.
  const Config quiet =
      ParseOk(kMinimal,
              {"activation_checkpointing={\"policy\": \"full\", \"partition_activations\": false, "
               "\"contiguous_memory_optimization\": false, \"number_checkpoints\": null, "
               "\"synchronize_checkpoint_boundary\": false, \"profile\": false}"});
  EXPECT_TRUE(quiet.notices.empty());
}

TEST(ConfigCheckpointing, BadValuesNameTheKey) {
  const struct {
    std::vector<std::string> overrides;
    const char* path;
    const char* says;
  } cases[] = {
      {{"activation_checkpointing.policy=fulll"},
       "activation_checkpointing.policy",
       "did you mean \"full\""},
      {{"activation_checkpointing.policy=3"}, "activation_checkpointing.policy", "string"},
      {{"activation_checkpointing.policy=every_k", "activation_checkpointing.every_k=0"},
       "activation_checkpointing.every_k",
       ">= 1"},
      {{"activation_checkpointing.every_k=2"},
       "activation_checkpointing.every_k",
       "only read with policy \"every_k\""},
      {{"activation_checkpointing.number_checkpoints=0"},
       "activation_checkpointing.number_checkpoints",
       ">= 1"},
      {{"activation_checkpointing.policy=none", "activation_checkpointing.cpu_checkpointing=true"},
       "activation_checkpointing.cpu_checkpointing",
       "nothing is checkpointed"},
      {{"activation_checkpointing.cpu_checkpoint=true"},
       "activation_checkpointing.cpu_checkpoint",
       "cpu_checkpointing"},
      {{"activation_checkpointing.profile=1"}, "activation_checkpointing.profile", "true or false"},
  };
  for (const auto& c : cases) {
    const Status s = ErrorOf(kMinimal, c.overrides);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.path << ": " << s.message();
    EXPECT_THAT(s.message(), AllOf(HasSubstr(c.path), HasSubstr(c.says))) << s.message();
  }
}

}  // namespace
}  // namespace hoist::runtime
