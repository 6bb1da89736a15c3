// The DeepSpeed keys hoist does not read: monitors and profilers are accepted with one notice
// each (when they ask for something) and type-checked; DeepSpeed features hoist does not have
// are refused by name, not as unknown keys.
#include "runtime/config/config_deepspeed_keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;
using testing_util::BadValue;
using testing_util::ErrorOf;
using testing_util::kInvalid;
using testing_util::kMinimal;
using testing_util::kUnimplemented;
using testing_util::ParseOk;

TEST(ConfigDeepSpeedKeys, MonitorsAndProfilersAreAcceptedWithOneNoticeEach) {
  Config c = ParseOk(
      kMinimal, {"wall_clock_breakdown=true", "tensorboard.enabled=true",
                 "tensorboard.output_path=/tmp/tb", "prescale_gradients=true",
                 "wandb={\"enabled\": true, \"project\": \"p\"}", "flops_profiler.enabled=true"});
  EXPECT_THAT(c.notices,
              UnorderedElementsAre(
                  AllOf(HasSubstr("job.json: wall_clock_breakdown: times the phases"),
                        HasSubstr("ignored")),
                  HasSubstr("job.json: tensorboard: a DeepSpeed monitor that hoist does not write"),
                  HasSubstr("job.json: wandb: a DeepSpeed monitor that hoist does not write"),
                  HasSubstr("job.json: prescale_gradients: divides gradients before"),
                  HasSubstr("job.json: flops_profiler: DeepSpeed's FLOPs profiler, a DeepSpeed "
                            "feature hoist does not have")));
}

// Their defaults, and a disabled section, ask for nothing.
TEST(ConfigDeepSpeedKeys, NewlyNamedFeaturesAtTheirDefaultsAreAccepted) {
  Config c = ParseOk(kMinimal, {"disable_allgather=false", "expert_parallel.enabled=false"});
  EXPECT_THAT(c.notices, IsEmpty());
}

TEST(ConfigDeepSpeedKeys, TypedZeroAndMonitorKeysAreAcceptedWithANotice) {
  Config c = ParseOk(kMinimal, {"zero_optimization.allgather_partitions=true",
                                "zero_optimization.leaf_module.names=[\"Block\"]",
                                "tensorboard={\"enabled\": false, \"output_path\": \"/tmp/tb\", "
                                "\"job_name\": \"j\"}",
                                "comms_logger.prof_ops=[\"all_reduce\"]"});
  EXPECT_THAT(c.notices,
              UnorderedElementsAre(HasSubstr("zero_optimization.allgather_partitions: a DeepSpeed "
                                             "setting that hoist does not act on yet; ignored"),
                                   HasSubstr("zero_optimization.leaf_module: ")));
}

// The legacy `"zero_optimization": true` is read as stage 1 with DeepSpeed's deprecation message;
// offload_optimizer.fast_init was read and dropped without a word.
TEST(ConfigDeepSpeedKeys, LegacyZeroFlagAndFastInitSayWhatTheyDo) {
  Config legacy = ParseOk(kMinimal, {"zero_optimization=true"});
  EXPECT_EQ(legacy.zero.stage, 1);
  EXPECT_THAT(legacy.notices,
              ElementsAre(AllOf(HasSubstr("job.json: zero_optimization: true is the deprecated "
                                          "format of the ZeRO setup"),
                                HasSubstr("read as stage 1"))));
  Config fast = ParseOk(
      kMinimal, {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                 "zero_optimization.offload_optimizer.fast_init=true"});
  EXPECT_THAT(fast.notices,
              Contains(AllOf(HasSubstr("offload_optimizer.fast_init: "), HasSubstr("no effect"))));
}

TEST(ConfigDeepSpeedKeys, KeysThatAskForNothingGetNoNotice) {
  // DeepSpeed's defaults: the monitors are off unless enabled, the flags false.
  Config c = ParseOk(kMinimal, {"wall_clock_breakdown=false", "tensorboard.output_path=/tmp/tb",
                                "csv_monitor.enabled=false", "gradient_predivide_factor=1.0",
                                "zero_force_ds_cpu_optimizer=true", "sequence_parallel_size=1",
                                "managed_gradient_accumulation=true", "amp.enabled=false",
                                "quantize_training.enabled=false"});
  EXPECT_THAT(c.notices, IsEmpty());
}

// A value under a notice-only key is checked as DeepSpeed reads it: a bool is a bool (a value
// nested 100,000 deep under wall_clock_breakdown used to be accepted, then crash the
// checkpoint writer).
class ConfigDeepSpeedKeysRefuse : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigDeepSpeedKeysRefuse, NamingTheKey) { testing_util::ExpectRefused(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Types, ConfigDeepSpeedKeysRefuse,
    ::testing::Values(BadValue{"WallClockNested",
                               {"wall_clock_breakdown=[[[1]]]"},
                               kInvalid,
                               "wall_clock_breakdown: expected true or false, found an array"},
                      BadValue{"TensorboardNotObject",
                               {"tensorboard=true"},
                               kInvalid,
                               "tensorboard: expected an object, found a boolean"},
                      BadValue{"TensorboardEnabledString",
                               {"tensorboard.enabled=\"yes\""},
                               kInvalid,
                               "tensorboard.enabled: expected true or false"},
                      BadValue{"PredivideString",
                               {"gradient_predivide_factor=\"2\""},
                               kInvalid,
                               "gradient_predivide_factor: expected a number"},
                      BadValue{"SequenceParallelZero",
                               {"sequence_parallel_size=0"},
                               kInvalid,
                               "sequence_parallel_size: must be >= 1"},
                      // Inside zero_optimization and the monitors too, as DeepSpeed's pydantic
                      // models declare them (these were accepted whatever they held).
                      BadValue{"AllgatherPartitionsString",
                               {"zero_optimization.allgather_partitions=\"banana\""},
                               kInvalid,
                               "zero_optimization.allgather_partitions: expected true or false, "
                               "found a string"},
                      BadValue{"ReuseDistanceNegative",
                               {"zero_optimization.stage3_max_reuse_distance=-1"},
                               kInvalid,
                               "zero_optimization.stage3_max_reuse_distance: must be >= 0"},
                      BadValue{"LeafModuleNames",
                               {"zero_optimization.leaf_module.names=[1]"},
                               kInvalid,
                               "zero_optimization.leaf_module.names[0]: expected a string"},
                      BadValue{"TensorboardOutputPathNumber",
                               {"tensorboard.output_path=5"},
                               kInvalid,
                               "tensorboard.output_path: expected a string, found a number"},
                      BadValue{"WandbUnknownKey", {"wandb.projet=\"p\""}, kInvalid, "wandb.projet"},
                      BadValue{"CommsLoggerOps",
                               {"comms_logger.prof_ops=\"all_reduce\""},
                               kInvalid,
                               "comms_logger.prof_ops: expected a list of strings"},
                      BadValue{"TagValidationNumber",
                               {"checkpoint.tag_validation=1"},
                               kInvalid,
                               "checkpoint.tag_validation: expected a string"}),
    testing_util::BadValueName);

// DeepSpeed features hoist does not have are named as such, not "unknown key; the keys valid
// here are ...".
INSTANTIATE_TEST_SUITE_P(
    Features, ConfigDeepSpeedKeysRefuse,
    ::testing::Values(
        BadValue{"Compile",
                 {"compile={\"deepcompile\": true}"},
                 kUnimplemented,
                 "compile: torch.compile and DeepCompile is a DeepSpeed feature hoist does not "
                 "have; remove the section"},
        BadValue{"TensorParallel",
                 {"tensor_parallel.autotp_size=2"},
                 kUnimplemented,
                 "tensor_parallel: tensor parallelism (AutoTP) is a DeepSpeed feature hoist"},
        BadValue{"SequenceParallel",
                 {"sequence_parallel_size=2"},
                 kUnimplemented,
                 "sequence_parallel_size: sequence parallelism (Ulysses) is a DeepSpeed feature "
                 "hoist does not have; set it to 1 or remove it"},
        BadValue{"QuantizeTraining",
                 {"quantize_training.enabled=true"},
                 kUnimplemented,
                 "quantize_training.enabled: quantisation-aware training (MoQ) is a DeepSpeed "
                 "feature hoist does not have; set it to false"},
        BadValue{"ProgressiveLayerDrop",
                 {"progressive_layer_drop={\"enabled\": true, \"theta\": 0.5}"},
                 kUnimplemented,
                 "progressive_layer_drop.enabled: progressive layer drop is a DeepSpeed feature"},
        BadValue{"Eigenvalue",
                 {"eigenvalue.enabled=true"},
                 kUnimplemented,
                 "is a DeepSpeed feature hoist does not have"},
        BadValue{"CurriculumLearning",
                 {"curriculum_learning.enabled=true"},
                 kUnimplemented,
                 "curriculum_learning.enabled: curriculum learning is a DeepSpeed feature"},
        BadValue{"DataEfficiency",
                 {"data_efficiency.enabled=true"},
                 kUnimplemented,
                 "is a DeepSpeed feature hoist does not have"},
        BadValue{"Pipeline",
                 {"pipeline={\"stages\": \"auto\"}"},
                 kUnimplemented,
                 "pipeline: pipeline parallelism is a DeepSpeed feature"},
        BadValue{"Elasticity",
                 {"elasticity.enabled=true"},
                 kUnimplemented,
                 "elasticity.enabled: elastic training is a DeepSpeed feature"},
        BadValue{"Amp", {"amp.enabled=true"}, kUnimplemented, "amp.enabled: Apex AMP is a"},
        BadValue{"SparseAttention",
                 {"sparse_attention.mode=fixed"},
                 kUnimplemented,
                 "sparse_attention: sparse attention is a DeepSpeed feature"},
        BadValue{"HybridEngine",
                 {"hybrid_engine.enabled=true"},
                 kUnimplemented,
                 "is a DeepSpeed feature hoist does not have"},
        BadValue{"UnmanagedAccumulation",
                 {"managed_gradient_accumulation=false"},
                 kUnimplemented,
                 "is a DeepSpeed feature hoist does not have; set it to true or remove it"},
        BadValue{"OneBitAdamType",
                 {"optimizer.type=OneBitAdam"},
                 kUnimplemented,
                 "optimizer.type: the \"OneBitAdam\" optimizer is a DeepSpeed feature hoist does "
                 "not have; use \"AdamW\""},
        BadValue{"OneBitAdamParam",
                 {"optimizer.params.freeze_step=400"},
                 kUnimplemented,
                 "optimizer.params.freeze_step: a parameter of DeepSpeed's 1-bit optimizers"},
        BadValue{"OneCycle",
                 {"scheduler.type=OneCycle"},
                 kUnimplemented,
                 "the \"OneCycle\" scheduler is a DeepSpeed feature hoist does not have"},
        BadValue{"UniversalCheckpoint",
                 {"checkpoint.load_universal=true"},
                 kUnimplemented,
                 "checkpoint.load_universal: loading DeepSpeed's universal checkpoints is a "
                 "DeepSpeed feature"},
        BadValue{"ExpertParallel",
                 {"expert_parallel={\"autoep_size\": 4}"},
                 kUnimplemented,
                 "expert_parallel: expert parallelism (AutoEP) is a DeepSpeed feature hoist does "
                 "not have; remove the section"},
        BadValue{"DisableAllgather",
                 {"disable_allgather=true"},
                 kUnimplemented,
                 "disable_allgather: gathering updated parameters by broadcasts instead of an "
                 "all-gather is a DeepSpeed feature hoist does not have; set it to false"},
        BadValue{"DataStates",
                 {"datastates_ckpt={\"host_cache_size\": 16}"},
                 kUnimplemented,
                 "datastates_ckpt: DataStates-LLM asynchronous checkpointing is a DeepSpeed "
                 "feature hoist does not have; remove the section"},
        BadValue{"SummedGradients",
                 {"gradient_allreduce_op=sum"},
                 kUnimplemented,
                 "is a DeepSpeed feature hoist does not have; use \"mean\""}),
    testing_util::BadValueName);

TEST(ConfigDeepSpeedKeys, CheckpointKeysOfDeepSpeedGetANotice) {
  Config c = ParseOk(kMinimal,
                     {"checkpoint.tag_validation=Warn", "checkpoint.use_node_local_storage=true",
                      "checkpoint.writer={\"type\": \"fast\"}", "checkpoint.load_universal=false"});
  EXPECT_THAT(c.notices, UnorderedElementsAre(HasSubstr("checkpoint.tag_validation: "),
                                              HasSubstr("checkpoint.use_node_local_storage: "),
                                              HasSubstr("checkpoint.writer: chooses DeepSpeed's")));
}

// contiguous_gradients was type-checked and then ignored without a word.
TEST(ConfigDeepSpeedKeys, ContiguousGradientsSaysItHasNoEffect) {
  for (const char* value : {"true", "false"}) {
    Config c = ParseOk(kMinimal, {std::string("zero_optimization.contiguous_gradients=") + value});
    EXPECT_THAT(c.notices, UnorderedElementsAre(
                               AllOf(HasSubstr("zero_optimization.contiguous_gradients: "),
                                     HasSubstr("contiguous buckets"), HasSubstr("no effect"))))
        << value;
  }
}

TEST(ConfigDeepSpeedKeys, EveryNamedKeyIsKnownAtTheTopLevel) {
  // None of them falls through to the unknown-key message.
  for (std::string_view key : config_internal::DeepSpeedOnlyKeys()) {
    Status s = ErrorOf(kMinimal, {std::string(key) + "=\"\\u0000\""});
    EXPECT_THAT(s.message(), Not(HasSubstr("unknown key"))) << key;
  }
}

}  // namespace
}  // namespace hoist::runtime
