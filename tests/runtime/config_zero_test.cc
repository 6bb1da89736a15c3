// The zero_optimization keys (DeepSpeed's names, meanings and defaults) and hoist's comm section.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/tunables.h"
#include "offload/state_swapper.h"
#include "runtime/config/config.h"
#include "tests/runtime/config_test_util.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::ParseOk;

TEST(ConfigZero, DefaultsAreDeepSpeeds) {
  const ZeroConfig z = ParseOk(kMinimal).zero;
  EXPECT_EQ(z.stage, 0);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_FALSE(z.overlap_comm);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(z.stage3_max_live_parameters, 1000000000);
  // An empty section is the same.
  EXPECT_EQ(ParseOk(kMinimal, {"zero_optimization={}"}).zero.reduce_bucket_size, 500000000);
}

// Each tunable of core/tunables.h: its default is what an empty section gives, the engine's and
// offload's options start from it, a value below its least is refused naming the key, the least
// is taken, DeepSpeed's other spelling reads the same setting, and the README's table lists it
// with the same default and least.
TEST(ConfigZero, EachTunableIsDeclaredOnceAndReadFromItsTable) {
  const Config defaults = ParseOk(kMinimal);
  auto field = [](Config& c, const Tunable* t) -> int64_t* {
    ZeroConfig& z = c.zero;
    if (t == &tunables::kReduceBucketSize) return &z.reduce_bucket_size;
    if (t == &tunables::kAllgatherBucketSize) return &z.allgather_bucket_size;
    if (t == &tunables::kPrefetchBucketSize) return &z.stage3_prefetch_bucket_size;
    if (t == &tunables::kParamPersistenceThreshold) return &z.stage3_param_persistence_threshold;
    if (t == &tunables::kMaxLiveParameters) return &z.stage3_max_live_parameters;
    if (t == &tunables::kSubGroupSize) return &z.sub_group_size;
    if (t == &tunables::kOptimizerBufferCount) return &z.offload_optimizer.buffer_count;
    if (t == &tunables::kParamBufferCount) return &z.offload_param.buffer_count;
    if (t == &tunables::kParamBufferSize) return &z.offload_param.buffer_size;
    if (t == &tunables::kParamMaxInCpu) return &z.offload_param.max_in_cpu;
    return nullptr;
  };
  std::ifstream in(std::string(HOIST_SOURCE_DIR) + "/README.md");
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const Tunable* t : tunables::kAll) {
    const std::string path = std::string(t->section) + "." + t->key;
    SCOPED_TRACE(path);
    Config c = defaults;
    ASSERT_NE(field(c, t), nullptr);
    EXPECT_EQ(*field(c, t), t->default_value);
    const std::string set = path + "=" + std::to_string(t->min);
    Config least = ParseOk(kMinimal, {set});
    EXPECT_EQ(*field(least, t), t->min);
    EXPECT_THAT(ErrorOf(kMinimal, {path + "=" + std::to_string(t->min - 1)}).message(),
                AllOf(HasSubstr(path),
                      HasSubstr(t->elements ? "must be in [" + std::to_string(t->min) + ", 2^48]"
                                            : "must be >= " + std::to_string(t->min))));
    if (t->alias != nullptr) {
      Config aliased = ParseOk(
          kMinimal, {std::string(t->section) + "." + t->alias + "=" + std::to_string(t->min)});
      EXPECT_EQ(*field(aliased, t), t->min);
    }
    const std::string row = "| `" + path + "`";
    const size_t at = readme.find(row);
    ASSERT_NE(at, std::string::npos) << "README's table has no row for " << path;
    const std::string line = readme.substr(at, readme.find('\n', at) - at);
    EXPECT_THAT(line, HasSubstr("| " + std::to_string(t->default_value) + " | " +
                                std::to_string(t->min) + " |"));
    EXPECT_THAT(line, HasSubstr(t->what));
  }
  zero::ZeroOptions engine;
  EXPECT_EQ(engine.reduce_bucket_size, tunables::kReduceBucketSize.default_value);
  EXPECT_EQ(engine.offload_optimizer.sub_group_size, tunables::kSubGroupSize.default_value);
  EXPECT_EQ(engine.offload_optimizer.buffer_count, tunables::kOptimizerBufferCount.default_value);
  EXPECT_EQ(engine.offload_param.buffer_count, tunables::kParamBufferCount.default_value);
  EXPECT_EQ(offload::StateSwapperOptions{}.buffer_count,
            tunables::kOptimizerBufferCount.default_value);
}

TEST(ConfigZero, StageIsSetFromTheCommandLine) {
  for (int stage : {0, 1, 2, 3}) {
    const Config c = ParseOk(kMinimal, {"zero_optimization.stage=" + std::to_string(stage)});
    EXPECT_EQ(c.zero.stage, stage);
    EXPECT_TRUE(c.notices.empty());
  }
}

TEST(ConfigZero, OverlapCommDefaultsToTrueOnlyForStage3) {
  EXPECT_FALSE(ParseOk(kMinimal, {"zero_optimization.stage=1"}).zero.overlap_comm);
  EXPECT_FALSE(ParseOk(kMinimal, {"zero_optimization.stage=2"}).zero.overlap_comm);
  EXPECT_TRUE(ParseOk(kMinimal, {"zero_optimization.stage=3"}).zero.overlap_comm);
  EXPECT_TRUE(
      ParseOk(kMinimal, {"zero_optimization.stage=3", "zero_optimization.overlap_comm=null"})
          .zero.overlap_comm);
  // Set explicitly, it wins either way.
  EXPECT_FALSE(
      ParseOk(kMinimal, {"zero_optimization.stage=3", "zero_optimization.overlap_comm=false"})
          .zero.overlap_comm);
  EXPECT_TRUE(
      ParseOk(kMinimal, {"zero_optimization.stage=2", "zero_optimization.overlap_comm=true"})
          .zero.overlap_comm);
}

TEST(ConfigZero, LegacyBooleanMeansStageOneOrOff) {
  EXPECT_EQ(ParseOk(kMinimal, {"zero_optimization=true"}).zero.stage, 1);
  EXPECT_EQ(ParseOk(kMinimal, {"zero_optimization=false"}).zero.stage, 0);
}

TEST(ConfigZero, EveryReadKeyIsRead) {
  const ZeroConfig z = ParseOk(kMinimal, {R"(zero_optimization={"stage": 2,
      "reduce_bucket_size": 2e8, "allgather_bucket_size": 300000000, "overlap_comm": true,
      "contiguous_gradients": false, "reduce_scatter": false,
      "stage3_prefetch_bucket_size": 1e7, "stage3_param_persistence_threshold": 1e4,
      "stage3_max_live_parameters": 3e9})"})
                           .zero;
  EXPECT_EQ(z.stage, 2);
  EXPECT_EQ(z.reduce_bucket_size, 200000000);
  EXPECT_EQ(z.allgather_bucket_size, 300000000);
  EXPECT_TRUE(z.overlap_comm);
  EXPECT_FALSE(z.contiguous_gradients);
  EXPECT_FALSE(z.reduce_scatter);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 10000000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 10000);
  EXPECT_EQ(z.stage3_max_live_parameters, 3000000000);
}

TEST(ConfigZero, Stage3KeysTakeTheirShortAliases) {
  const ZeroConfig z = ParseOk(kMinimal, {R"(zero_optimization={"stage": 3,
      "prefetch_bucket_size": 123, "param_persistence_threshold": 0,
      "max_live_parameters": 456})"})
                           .zero;
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 123);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 0);
  EXPECT_EQ(z.stage3_max_live_parameters, 456);
}

TEST(ConfigZero, ZeroMeansOffForStage3Sizes) {
  const ZeroConfig z = ParseOk(kMinimal, {"zero_optimization.stage3_prefetch_bucket_size=0",
                                          "zero_optimization.stage3_max_live_parameters=0"})
                           .zero;
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 0);
  EXPECT_EQ(z.stage3_max_live_parameters, 0);
}

TEST(ConfigZero, KeysThatDoNotChangeTheMathGetOneNoticeEach) {
  const Config c = ParseOk(kMinimal, {R"(zero_optimization={"stage": 2,
      "round_robin_gradients": true, "allgather_partitions": false,
      "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true,
      "ignore_unused_parameters": true, "elastic_checkpoint": false})"});
  const char* kIgnored = "a DeepSpeed setting that hoist does not act on yet; ignored";
  EXPECT_THAT(
      c.notices,
      UnorderedElementsAre(AllOf(HasSubstr("job.json: zero_optimization.round_robin_gradients"),
                                 HasSubstr(kIgnored)),
                           HasSubstr("zero_optimization.allgather_partitions"),
                           HasSubstr("zero_optimization.stage3_max_reuse_distance"),
                           HasSubstr("zero_optimization.stage3_gather_16bit_weights_on_model_save"),
                           HasSubstr("zero_optimization.ignore_unused_parameters"),
                           HasSubstr("zero_optimization.elastic_checkpoint")));
}

TEST(ConfigZero, OffloadSectionsWithDeviceNoneAreAccepted) {
  const Config c = ParseOk(kMinimal, {R"(zero_optimization={"stage": 3,
      "offload_optimizer": {"device": "none", "pin_memory": true, "buffer_count": 4},
      "offload_param": {"device": "none", "buffer_size": 1e8}, "cpu_offload": false,
      "zero_quantized_weights": false, "load_from_fp32_weights": true,
      "zero_hpz_partition_size": 1, "mics_shard_size": -1})"});
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_TRUE(c.notices.empty());
}

// ---- hoist's comm section ----

TEST(ConfigComm, DefaultsAndValues) {
  const CommConfig defaults = ParseOk(kMinimal).comm;
  EXPECT_EQ(defaults.timeout_s, 600.0);
  EXPECT_EQ(defaults.backend, "auto");
  const CommConfig c = ParseOk(kMinimal, {"comm.timeout_s=30.5", "comm.backend=MPI"}).comm;
  EXPECT_EQ(c.timeout_s, 30.5);
  EXPECT_EQ(c.backend, "mpi");
  EXPECT_EQ(ParseOk(kMinimal, {"comm.backend=shm"}).comm.backend, "shm");
}

// ---- refused values: each case is one set of overrides that must fail naming the key ----

using testing_util::BadValue;
using testing_util::kInvalid;
using testing_util::kUnimplemented;

class ConfigZeroRefuses : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigZeroRefuses, NamingTheKey) { testing_util::ExpectRefused(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Values, ConfigZeroRefuses,
    ::testing::Values(
        // stage
        BadValue{"StageFour",
                 {"zero_optimization.stage=4"},
                 kInvalid,
                 "--set zero_optimization.stage=4: zero_optimization.stage: must be 0, 1, 2 or 3, "
                 "found 4"},
        BadValue{"NegativeStage",
                 {"zero_optimization.stage=-1"},
                 kInvalid,
                 "zero_optimization.stage: must be 0, 1, 2 or 3, found -1"},
        BadValue{"StageString",
                 {"zero_optimization.stage=\"2\""},
                 kInvalid,
                 "zero_optimization.stage: expected an integer, found a string (\"2\")"},
        BadValue{"StageFraction",
                 {"zero_optimization.stage=1.5"},
                 kInvalid,
                 "zero_optimization.stage: expected an integer, found 1.5"},
        BadValue{"StageTypo",
                 {"zero_optimization.stgae=2"},
                 kInvalid,
                 "zero_optimization.stgae: unknown key \"stgae\"; did you mean "
                 "\"zero_optimization.stage\"?"},
        // other read keys: types, ranges, typos
        BadValue{"OverlapString",
                 {"zero_optimization.overlap_comm=\"true\""},
                 kInvalid,
                 "zero_optimization.overlap_comm: expected true or false, found a string"},
        BadValue{"ContiguousNumber",
                 {"zero_optimization.contiguous_gradients=1"},
                 kInvalid,
                 "zero_optimization.contiguous_gradients: expected true or false"},
        BadValue{"ReduceScatterNull",
                 {"zero_optimization.reduce_scatter=[]"},
                 kInvalid,
                 "zero_optimization.reduce_scatter: expected true or false, found an array"},
        BadValue{"BucketAuto",
                 {"zero_optimization.reduce_bucket_size=auto"},
                 kInvalid,
                 "zero_optimization.reduce_bucket_size: \"auto\" is a placeholder"},
        BadValue{"BucketFraction",
                 {"zero_optimization.allgather_bucket_size=5.5e-1"},
                 kInvalid,
                 "zero_optimization.allgather_bucket_size: expected an integer"},
        BadValue{"ZeroReduceBucket",
                 {"zero_optimization.reduce_bucket_size=0"},
                 kInvalid,
                 "zero_optimization.reduce_bucket_size: must be in [1, 2^48] (a count of "
                 "elements), found 0"},
        BadValue{"NegativeAllgatherBucket",
                 {"zero_optimization.allgather_bucket_size=-5"},
                 kInvalid,
                 "zero_optimization.allgather_bucket_size: must be in [1, 2^48]"},
        BadValue{"HugeBucket",
                 {"zero_optimization.reduce_bucket_size=1e15"},
                 kInvalid,
                 "zero_optimization.reduce_bucket_size: must be in [1, 2^48]"},
        BadValue{"NegativePrefetch",
                 {"zero_optimization.stage3_prefetch_bucket_size=-1"},
                 kInvalid,
                 "zero_optimization.stage3_prefetch_bucket_size: must be in [0, 2^48]"},
        BadValue{"NegativePersistenceAlias",
                 {"zero_optimization.param_persistence_threshold=-1"},
                 kInvalid,
                 "zero_optimization.param_persistence_threshold: must be in [0, 2^48]"},
        BadValue{"NegativeMaxLive",
                 {"zero_optimization.stage3_max_live_parameters=-1"},
                 kInvalid,
                 "zero_optimization.stage3_max_live_parameters: must be in [0, 2^48]"},
        BadValue{"AliasAndFullName",
                 {"zero_optimization.stage3_prefetch_bucket_size=1",
                  "zero_optimization.prefetch_bucket_size=2"},
                 kInvalid,
                 "zero_optimization.prefetch_bucket_size: is the same setting as "
                 "zero_optimization.stage3_prefetch_bucket_size; set only one"},
        BadValue{"PrefetchTypo",
                 {"zero_optimization.stage3_prefetch_bucket_sise=1"},
                 kInvalid,
                 "did you mean \"zero_optimization.stage3_prefetch_bucket_size\"?"},
        BadValue{"SectionNotAnObject",
                 {"zero_optimization=5"},
                 kInvalid,
                 "zero_optimization: expected an object, found a number (5)"},
        BadValue{"NoticeKeyTypo",
                 {"zero_optimization.round_robin_gradient=true"},
                 kInvalid,
                 "did you mean \"zero_optimization.round_robin_gradients\"?"},
        // offload sections (the rest of their rules: config_offload_test.cc)
        BadValue{"OffloadUnknownDevice",
                 {"zero_optimization.offload_optimizer.device=gpu"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.device: must be \"none\", \"cpu\" or "
                 "\"nvme\", found \"gpu\""},
        BadValue{"OffloadUnknownKey",
                 {"zero_optimization.offload_param.pin_memroy=true"},
                 kInvalid,
                 "did you mean \"zero_optimization.offload_param.pin_memory\"?"},
        // features that change what is trained
        BadValue{"QuantizedGradients",
                 {"zero_optimization.zero_quantized_gradients=true"},
                 kUnimplemented,
                 "zero_optimization.zero_quantized_gradients"},
        BadValue{"QuantizedWeights",
                 {"zero_optimization.zero_quantized_weights=true"},
                 kUnimplemented,
                 "zero_optimization.zero_quantized_weights"},
        BadValue{"MasterWeightsFrom16Bit",
                 {"zero_optimization.load_from_fp32_weights=false"},
                 kUnimplemented,
                 "zero_optimization.load_from_fp32_weights: this build"},
        BadValue{"Hpz",
                 {"zero_optimization.zero_hpz_partition_size=8"},
                 kUnimplemented,
                 "zero_optimization.zero_hpz_partition_size: this build does not support "
                 "hierarchical partitioning"},
        BadValue{"Mics",
                 {"zero_optimization.mics_shard_size=4"},
                 kUnimplemented,
                 "zero_optimization.mics_shard_size"},
        BadValue{"ZenFlow",
                 {"zero_optimization.zenflow={}"},
                 kUnimplemented,
                 "zero_optimization.zenflow: this build does not support ZenFlow"},
        // comm
        BadValue{"ZeroTimeout",
                 {"comm.timeout_s=0"},
                 kInvalid,
                 "comm.timeout_s: must be in (0, 1e9] seconds, found 0"},
        BadValue{"NegativeTimeout", {"comm.timeout_s=-5"}, kInvalid, "comm.timeout_s: must be"},
        BadValue{"HugeTimeout", {"comm.timeout_s=1e10"}, kInvalid, "comm.timeout_s: must be"},
        BadValue{"TimeoutString",
                 {"comm.timeout_s=\"600\""},
                 kInvalid,
                 "comm.timeout_s: expected a number, found a string"},
        BadValue{"UnknownBackend",
                 {"comm.backend=nccl"},
                 kInvalid,
                 "comm.backend: unknown backend \"nccl\"; hoist supports \"auto\", \"mpi\" and "
                 "\"shm\""},
        BadValue{"BackendTypo", {"comm.backend=shn"}, kInvalid, "did you mean \"shm\"?"},
        BadValue{"CommKeyTypo",
                 {"comm.timeout=5"},
                 kInvalid,
                 "comm.timeout: unknown key \"timeout\"; did you mean \"comm.timeout_s\"?"}),
    testing_util::BadValueName);

}  // namespace
}  // namespace hoist::runtime
