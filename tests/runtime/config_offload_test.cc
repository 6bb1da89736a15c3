// ZeRO-Offload / ZeRO-Infinity in the config: zero_optimization.sub_group_size, offload_optimizer,
// offload_param and their legacy spellings, the top-level `aio` section (DeepSpeed's names,
// meanings and defaults) and hoist's own `offload` section.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/config/engine_options.h"
#include "tests/runtime/config_test_util.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using testing_util::kMinimal;
using testing_util::ParseOk;

TEST(ConfigOffload, DefaultsAreDeepSpeeds) {
  const Config c = ParseOk(kMinimal);
  const ZeroConfig& z = c.zero;
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_EQ(z.offload_optimizer.device, Placement::kDevice);
  EXPECT_EQ(z.offload_optimizer.nvme_path, "");
  EXPECT_EQ(z.offload_optimizer.buffer_count, 4);
  EXPECT_TRUE(z.offload_optimizer.pin_memory);
  EXPECT_FALSE(z.offload_optimizer.fast_init);
  EXPECT_EQ(z.offload_param.device, Placement::kDevice);
  EXPECT_EQ(z.offload_param.nvme_path, "");
  EXPECT_EQ(z.offload_param.buffer_count, 5);
  EXPECT_EQ(z.offload_param.buffer_size, 100000000);
  EXPECT_EQ(z.offload_param.max_in_cpu, 1000000000);
  EXPECT_TRUE(z.offload_param.pin_memory);
  EXPECT_EQ(c.aio.block_size, 1048576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.intra_op_parallelism, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
  EXPECT_EQ(c.offload.max_host_bytes, 0);
  EXPECT_TRUE(c.notices.empty());
  // Empty sections are the same.
  const Config empty =
      ParseOk(kMinimal,
              {"zero_optimization={\"stage\": 3, \"offload_optimizer\": {}, \"offload_param\": {}}",
               "aio={}", "offload={}"});
  EXPECT_EQ(empty.zero.offload_optimizer.device, Placement::kDevice);
  EXPECT_EQ(empty.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(empty.aio.queue_depth, 8);
  EXPECT_TRUE(empty.notices.empty());
}

TEST(ConfigOffload, DeviceNamesAreDeepSpeedsSpellings) {
  EXPECT_STREQ(OffloadDeviceName(Placement::kDevice), "none");
  EXPECT_STREQ(OffloadDeviceName(Placement::kHost), "cpu");
  EXPECT_STREQ(OffloadDeviceName(Placement::kNvme), "nvme");
}

TEST(ConfigOffload, SubGroupSizeIsReadWithoutANotice) {
  const Config c =
      ParseOk(kMinimal, {"zero_optimization.stage=3", "zero_optimization.sub_group_size=1e6"});
  EXPECT_EQ(c.zero.sub_group_size, 1000000);
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigOffload, EveryOffloadOptimizerKeyIsRead) {
  const Config c = ParseOk(kMinimal, {R"(zero_optimization={"stage": 2,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 8,
      "pin_memory": false, "fast_init": true, "ratio": 1.0, "super_offload": false}})"});
  const OffloadOptimizerConfig& o = c.zero.offload_optimizer;
  EXPECT_EQ(o.device, Placement::kNvme);
  EXPECT_EQ(o.nvme_path, "/local_nvme");
  EXPECT_EQ(o.buffer_count, 8);
  EXPECT_FALSE(o.pin_memory);
  EXPECT_TRUE(o.fast_init);
  EXPECT_EQ(c.zero.offload_param.device, Placement::kDevice);
  // fast_init is read but changes nothing here, which its notice says.
  ASSERT_EQ(c.notices.size(), 1u);
  EXPECT_NE(c.notices[0].find("zero_optimization.offload_optimizer.fast_init: "), std::string::npos)
      << c.notices[0];
}

TEST(ConfigOffload, EveryOffloadParamKeyIsRead) {
  const Config c = ParseOk(kMinimal, {R"(zero_optimization={"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 3,
      "buffer_size": 2e7, "max_in_cpu": 0, "pin_memory": false}})"});
  const OffloadParamConfig& p = c.zero.offload_param;
  EXPECT_EQ(p.device, Placement::kNvme);
  EXPECT_EQ(p.nvme_path, "/local_nvme");
  EXPECT_EQ(p.buffer_count, 3);
  EXPECT_EQ(p.buffer_size, 20000000);
  EXPECT_EQ(p.max_in_cpu, 0);
  EXPECT_FALSE(p.pin_memory);
  EXPECT_EQ(c.zero.offload_optimizer.device, Placement::kDevice);
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigOffload, APartialOffloadRatioReachesTheEngineOnStages1To3) {
  // DeepSpeed takes ratio < 1 at stage 3 only; hoist's engine splits the shard at any stage that
  // offloads.
  for (int stage : {1, 2, 3}) {
    const Config c = ParseOk(kMinimal, {"zero_optimization.stage=" + std::to_string(stage),
                                        "zero_optimization.offload_optimizer.device=cpu",
                                        "zero_optimization.offload_optimizer.ratio=0.3"});
    EXPECT_EQ(c.zero.offload_optimizer.ratio, 0.3);
    const zero::ZeroOptions options = ZeroOptionsFrom(c);
    EXPECT_EQ(options.offload_optimizer.place, Placement::kHost);
    EXPECT_EQ(options.offload_optimizer.ratio, 0.3);
    EXPECT_TRUE(zero::ValidateZeroOptions(options).ok());
  }
  EXPECT_EQ(ParseOk(kMinimal, {}).zero.offload_optimizer.ratio, 1.0);
}

TEST(ConfigOffload, OptimizerOffloadIsAcceptedOnStages1To3) {
  for (int stage : {1, 2, 3}) {
    const std::string set_stage = "zero_optimization.stage=" + std::to_string(stage);
    EXPECT_EQ(ParseOk(kMinimal, {set_stage, "zero_optimization.offload_optimizer.device=cpu"})
                  .zero.offload_optimizer.device,
              Placement::kHost)
        << "stage " << stage;
    EXPECT_EQ(ParseOk(kMinimal, {set_stage, "zero_optimization.offload_optimizer.device=nvme",
                                 "zero_optimization.offload_optimizer.nvme_path=/nvme"})
                  .zero.offload_optimizer.device,
              Placement::kNvme)
        << "stage " << stage;
  }
}

TEST(ConfigOffload, ParamOffloadIsAcceptedOnStage3) {
  const Config cpu =
      ParseOk(kMinimal, {"zero_optimization.stage=3", "zero_optimization.offload_param.device=cpu",
                         "zero_optimization.offload_optimizer.device=cpu"});
  EXPECT_EQ(cpu.zero.offload_param.device, Placement::kHost);
  EXPECT_EQ(cpu.zero.offload_optimizer.device, Placement::kHost);
  const Config nvme =
      ParseOk(kMinimal, {"zero_optimization.stage=3", "zero_optimization.offload_param.device=nvme",
                         "zero_optimization.offload_param.nvme_path=/nvme"});
  EXPECT_EQ(nvme.zero.offload_param.device, Placement::kNvme);
  EXPECT_EQ(nvme.zero.offload_param.nvme_path, "/nvme");
}

TEST(ConfigOffload, DeviceNoneNeedsNoStage) {
  const Config c = ParseOk(kMinimal, {"zero_optimization.offload_optimizer.device=none",
                                      "zero_optimization.offload_param.device=none"});
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.zero.offload_optimizer.device, Placement::kDevice);
}

TEST(ConfigOffload, PipelineKeysAreAcceptedWithANoticeEach) {
  const Config c = ParseOk(
      kMinimal, {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                 "zero_optimization.offload_optimizer.pipeline_read=true",
                 "zero_optimization.offload_optimizer.pipeline_write=false"});
  const char* kNoEffect =
      "hoist always overlaps reading, updating and writing sub-groups when buffer_count allows";
  EXPECT_THAT(c.notices,
              UnorderedElementsAre(
                  AllOf(HasSubstr("job.json: zero_optimization.offload_optimizer.pipeline_read"),
                        HasSubstr(kNoEffect)),
                  AllOf(HasSubstr("zero_optimization.offload_optimizer.pipeline_write"),
                        HasSubstr(kNoEffect))));
}

TEST(ConfigOffload, CpuAdamTuningIsAcceptedWithANoticeEach) {
  const Config c = ParseOk(kMinimal, {R"(zero_optimization={"stage": 2,
      "offload_optimizer": {"device": "cpu", "convert_grad_on_cpu": false,
      "cpuadam_cores_perc": 0.5}})"});
  EXPECT_THAT(c.notices,
              UnorderedElementsAre(
                  AllOf(HasSubstr("zero_optimization.offload_optimizer.convert_grad_on_cpu"),
                        HasSubstr("does not act on")),
                  AllOf(HasSubstr("zero_optimization.offload_optimizer.cpuadam_cores_perc"),
                        HasSubstr("OMP_NUM_THREADS"))));
}

// ---- legacy spellings ----

TEST(ConfigOffload, LegacyCpuOffloadMeansOptimizerOnCpu) {
  const Config c =
      ParseOk(kMinimal, {"zero_optimization.stage=2", "zero_optimization.cpu_offload=true"});
  EXPECT_EQ(c.zero.offload_optimizer.device, Placement::kHost);
  EXPECT_EQ(c.zero.offload_param.device, Placement::kDevice);
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigOffload, LegacyCpuOffloadParamMeansParamsOnCpu) {
  const Config c =
      ParseOk(kMinimal, {"zero_optimization.stage=3", "zero_optimization.cpu_offload_param=true"});
  EXPECT_EQ(c.zero.offload_param.device, Placement::kHost);
  EXPECT_EQ(c.zero.offload_optimizer.device, Placement::kDevice);
}

TEST(ConfigOffload, LegacyFalseMeansNothing) {
  const Config c = ParseOk(kMinimal, {R"(zero_optimization={"stage": 3, "cpu_offload": false,
      "cpu_offload_param": false, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"},
      "offload_param": {"device": "none"}})"});
  EXPECT_EQ(c.zero.offload_optimizer.device, Placement::kNvme);
  EXPECT_EQ(c.zero.offload_param.device, Placement::kDevice);
  EXPECT_EQ(
      ParseOk(kMinimal, {"zero_optimization.cpu_offload=false"}).zero.offload_optimizer.device,
      Placement::kDevice);
}

TEST(ConfigOffload, LegacyPinMemorySetsBothSections) {
  const Config c =
      ParseOk(kMinimal, {"zero_optimization.stage=3", "zero_optimization.cpu_offload=true",
                         "zero_optimization.cpu_offload_use_pin_memory=false"});
  EXPECT_FALSE(c.zero.offload_optimizer.pin_memory);
  EXPECT_FALSE(c.zero.offload_param.pin_memory);
  EXPECT_TRUE(c.notices.empty());
  const Config on = ParseOk(kMinimal, {"zero_optimization.cpu_offload_use_pin_memory=true"});
  EXPECT_TRUE(on.zero.offload_optimizer.pin_memory);
  EXPECT_TRUE(on.zero.offload_param.pin_memory);
}

// ---- aio and hoist's offload section ----

TEST(ConfigAio, EveryKeyIsReadAndTheLibaioKeysGetANoticeEach) {
  const Config c = ParseOk(kMinimal, {R"(aio={"block_size": 262144, "queue_depth": 32,
      "intra_op_parallelism": 4, "single_submit": true, "overlap_events": false,
      "use_gds": false})"});
  EXPECT_EQ(c.aio.block_size, 262144);
  EXPECT_EQ(c.aio.queue_depth, 32);
  EXPECT_EQ(c.aio.intra_op_parallelism, 4);
  EXPECT_TRUE(c.aio.single_submit);
  EXPECT_FALSE(c.aio.overlap_events);
  const char* kNoCounterpart = "tunes DeepSpeed's libaio threads";
  EXPECT_THAT(c.notices,
              UnorderedElementsAre(
                  AllOf(HasSubstr("job.json: aio.intra_op_parallelism"), HasSubstr(kNoCounterpart)),
                  AllOf(HasSubstr("aio.single_submit"), HasSubstr(kNoCounterpart)),
                  AllOf(HasSubstr("aio.overlap_events"), HasSubstr(kNoCounterpart))));
}

TEST(ConfigAio, BlockSizeAndQueueDepthShapeTheQueueWithoutANotice) {
  const Config c = ParseOk(kMinimal, {"aio.block_size=4096", "aio.queue_depth=4096"});
  EXPECT_EQ(c.aio.block_size, 4096);
  EXPECT_EQ(c.aio.queue_depth, 4096);
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigOffloadLimits, MaxHostBytesIsRead) {
  EXPECT_EQ(ParseOk(kMinimal, {"offload.max_host_bytes=68719476736"}).offload.max_host_bytes,
            68719476736);
  EXPECT_EQ(ParseOk(kMinimal, {"offload.max_host_bytes=0"}).offload.max_host_bytes, 0);
}

// ---- refused values: each case is one set of overrides that must fail naming the key ----

using testing_util::BadValue;
using testing_util::kInvalid;
using testing_util::kUnimplemented;

class ConfigOffloadRefuses : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigOffloadRefuses, NamingTheKey) { testing_util::ExpectRefused(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Values, ConfigOffloadRefuses,
    ::testing::Values(
        // sub_group_size
        BadValue{"ZeroSubGroup",
                 {"zero_optimization.sub_group_size=0"},
                 kInvalid,
                 "zero_optimization.sub_group_size: must be in [1, 2^48] (a count of elements), "
                 "found 0"},
        BadValue{"SubGroupFraction",
                 {"zero_optimization.sub_group_size=1.5"},
                 kInvalid,
                 "zero_optimization.sub_group_size: expected an integer"},
        // device
        BadValue{"UnknownDevice",
                 {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=gpu"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.device: must be \"none\", \"cpu\" or "
                 "\"nvme\", found \"gpu\""},
        BadValue{"DeviceUpperCase",
                 {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=CPU"},
                 kInvalid,
                 "found \"CPU\"; did you mean \"cpu\"?"},
        BadValue{"ParamDeviceTypo",
                 {"zero_optimization.stage=3", "zero_optimization.offload_param.device=nvem"},
                 kInvalid,
                 "zero_optimization.offload_param.device: must be \"none\", \"cpu\" or \"nvme\", "
                 "found \"nvem\"; did you mean \"nvme\"?"},
        BadValue{"DeviceNotAString",
                 {"zero_optimization.offload_optimizer.device=1"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.device: expected a string"},
        // nvme_path
        BadValue{"OptimizerNvmeWithoutPath",
                 {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.nvme_path: must name a directory when "
                 "device is \"nvme\""},
        BadValue{"OptimizerNvmeEmptyPath",
                 {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme",
                  "zero_optimization.offload_optimizer.nvme_path=\"\""},
                 kInvalid,
                 "zero_optimization.offload_optimizer.nvme_path: must name a directory"},
        BadValue{"ParamNvmeWithoutPath",
                 {"zero_optimization.stage=3", "zero_optimization.offload_param.device=nvme"},
                 kInvalid,
                 "zero_optimization.offload_param.nvme_path: must name a directory when device "
                 "is \"nvme\": the offloaded states live in scratch files there"},
        BadValue{"NvmePathNotAString",
                 {"zero_optimization.offload_optimizer.nvme_path=5"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.nvme_path: expected a string"},
        // stages
        BadValue{"OptimizerOffloadOnStage0",
                 {"zero_optimization.offload_optimizer.device=cpu"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.device: offloading the optimizer needs ZeRO "
                 "stage 1, 2 or 3 (as in DeepSpeed), but zero_optimization.stage is 0; set "
                 "zero_optimization.stage"},
        BadValue{"OptimizerNvmeOnStage0",
                 {"zero_optimization.stage=0", "zero_optimization.offload_optimizer.device=nvme",
                  "zero_optimization.offload_optimizer.nvme_path=/n"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.device: offloading the optimizer needs"},
        BadValue{"ParamOffloadOnStage2",
                 {"zero_optimization.stage=2", "zero_optimization.offload_param.device=cpu"},
                 kInvalid,
                 "zero_optimization.offload_param.device: offloading parameters needs ZeRO stage "
                 "3 (as in DeepSpeed), but zero_optimization.stage is 2; set "
                 "zero_optimization.stage to 3"},
        BadValue{
            "ParamOffloadOnStage1",
            {"zero_optimization.stage=1", "zero_optimization.offload_param.device=nvme",
             "zero_optimization.offload_param.nvme_path=/n"},
            kInvalid,
            "zero_optimization.offload_param.device: offloading parameters needs ZeRO stage 3"},
        BadValue{"LegacyCpuOffloadOnStage0",
                 {"zero_optimization.cpu_offload=true"},
                 kInvalid,
                 "zero_optimization.cpu_offload: offloading the optimizer needs ZeRO stage 1, 2 "
                 "or 3"},
        BadValue{"LegacyCpuOffloadParamOnStage2",
                 {"zero_optimization.stage=2", "zero_optimization.cpu_offload_param=true"},
                 kInvalid,
                 "zero_optimization.cpu_offload_param: offloading parameters needs ZeRO stage 3"},
        // offload_optimizer values
        BadValue{"ZeroOptimizerBuffers",
                 {"zero_optimization.offload_optimizer.buffer_count=0"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.buffer_count: must be >= 1"},
        BadValue{"OptimizerBuffersFraction",
                 {"zero_optimization.offload_optimizer.buffer_count=2.5"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.buffer_count: expected an integer"},
        BadValue{"PinMemoryString",
                 {"zero_optimization.offload_optimizer.pin_memory=\"yes\""},
                 kInvalid,
                 "zero_optimization.offload_optimizer.pin_memory: expected true or false"},
        BadValue{"FastInitNumber",
                 {"zero_optimization.offload_optimizer.fast_init=1"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.fast_init: expected true or false"},
        BadValue{"PipelineReadString",
                 {"zero_optimization.offload_optimizer.pipeline_read=\"true\""},
                 kInvalid,
                 "zero_optimization.offload_optimizer.pipeline_read: expected true or false"},
        BadValue{"PartialRatioToNvme",
                 {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                  "zero_optimization.offload_optimizer.nvme_path=/local_nvme",
                  "zero_optimization.offload_optimizer.ratio=0.3"},
                 kUnimplemented,
                 "zero_optimization.offload_optimizer.ratio: a partial offload (ratio < 1) to "
                 "nvme is not supported; set ratio to 1, or device to \"cpu\""},
        BadValue{"ZeroRatio",
                 {"zero_optimization.offload_optimizer.ratio=0"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.ratio: must be in (0, 1]"},
        BadValue{"NegativeRatio",
                 {"zero_optimization.offload_optimizer.ratio=-0.5"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.ratio: must be in (0, 1]"},
        BadValue{"RatioAboveOne",
                 {"zero_optimization.offload_optimizer.ratio=1.5"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.ratio: must be in (0, 1] (the fraction of "
                 "the optimizer offloaded), found 1.5"},
        BadValue{"RatioString",
                 {"zero_optimization.offload_optimizer.ratio=\"1\""},
                 kInvalid,
                 "zero_optimization.offload_optimizer.ratio: expected a number"},
        BadValue{"SuperOffload",
                 {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                  "zero_optimization.offload_optimizer.super_offload=true"},
                 kUnimplemented,
                 "zero_optimization.offload_optimizer.super_offload: this build does not support "
                 "SuperOffload yet; set it to false or remove it"},
        BadValue{"ConvertGradNumber",
                 {"zero_optimization.offload_optimizer.convert_grad_on_cpu=0"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.convert_grad_on_cpu: expected true or false"},
        BadValue{"ZeroCoresPerc",
                 {"zero_optimization.offload_optimizer.cpuadam_cores_perc=0"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.cpuadam_cores_perc: must be in (0, 1]"},
        BadValue{"CoresPercAboveOne",
                 {"zero_optimization.offload_optimizer.cpuadam_cores_perc=1.2"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.cpuadam_cores_perc: must be in (0, 1]"},
        BadValue{"OptimizerKeyTypo",
                 {"zero_optimization.offload_optimizer.buffer_cont=4"},
                 kInvalid,
                 "zero_optimization.offload_optimizer.buffer_cont: unknown key \"buffer_cont\"; "
                 "did you mean \""
                 "zero_optimization.offload_optimizer.buffer_count\"?"},
        BadValue{"OptimizerNotAnObject",
                 {"zero_optimization.offload_optimizer=\"cpu\""},
                 kInvalid,
                 "zero_optimization.offload_optimizer: expected an object"},
        // offload_param values
        BadValue{"ZeroParamBuffers",
                 {"zero_optimization.offload_param.buffer_count=0"},
                 kInvalid,
                 "zero_optimization.offload_param.buffer_count: must be >= 1"},
        BadValue{"ZeroParamBufferSize",
                 {"zero_optimization.offload_param.buffer_size=0"},
                 kInvalid,
                 "zero_optimization.offload_param.buffer_size: must be in [1, 2^48]"},
        BadValue{"NegativeMaxInCpu",
                 {"zero_optimization.offload_param.max_in_cpu=-1"},
                 kInvalid,
                 "zero_optimization.offload_param.max_in_cpu: must be in [0, 2^48]"},
        BadValue{"ParamPinMemoryNumber",
                 {"zero_optimization.offload_param.pin_memory=1"},
                 kInvalid,
                 "zero_optimization.offload_param.pin_memory: expected true or false"},
        BadValue{"ParamKeyFromTheOptimizer",
                 {"zero_optimization.offload_param.ratio=1"},
                 kInvalid,
                 "zero_optimization.offload_param.ratio: unknown key"},
        // legacy spellings
        BadValue{"LegacyCpuOffloadAndSection",
                 {"zero_optimization.stage=2", "zero_optimization.cpu_offload=true",
                  "zero_optimization.offload_optimizer.device=cpu"},
                 kInvalid,
                 "zero_optimization.cpu_offload: is the legacy spelling of "
                 "zero_optimization.offload_optimizer.device \"cpu\", and "
                 "zero_optimization.offload_optimizer is also set; set only one of them"},
        BadValue{"LegacyCpuOffloadParamAndSection",
                 {"zero_optimization.stage=3", "zero_optimization.cpu_offload_param=true",
                  "zero_optimization.offload_param.buffer_count=2"},
                 kInvalid,
                 "zero_optimization.cpu_offload_param: is the legacy spelling of "
                 "zero_optimization.offload_param.device \"cpu\""},
        BadValue{"LegacyCpuOffloadString",
                 {"zero_optimization.cpu_offload=\"true\""},
                 kInvalid,
                 "zero_optimization.cpu_offload: expected true or false"},
        BadValue{"LegacyPinMemoryAndSectionPinMemory",
                 {"zero_optimization.stage=3", "zero_optimization.cpu_offload_use_pin_memory=true",
                  "zero_optimization.offload_param.pin_memory=false"},
                 kInvalid,
                 "zero_optimization.cpu_offload_use_pin_memory: is the legacy spelling of "
                 "zero_optimization.offload_param.pin_memory, which is also set; set only one"},
        BadValue{"LegacyPinMemoryNumber",
                 {"zero_optimization.cpu_offload_use_pin_memory=1"},
                 kInvalid,
                 "zero_optimization.cpu_offload_use_pin_memory: expected true or false"},
        // aio
        BadValue{"UnalignedBlockSize",
                 {"aio.block_size=1000"},
                 kInvalid,
                 "aio.block_size: must be a positive multiple of 4096 bytes (O_DIRECT reads and "
                 "writes aligned blocks), found 1000"},
        BadValue{"ZeroBlockSize", {"aio.block_size=0"}, kInvalid, "aio.block_size: must be a"},
        BadValue{"NegativeBlockSize",
                 {"aio.block_size=-4096"},
                 kInvalid,
                 "aio.block_size: must be a positive multiple of 4096"},
        BadValue{"BlockSizeFraction",
                 {"aio.block_size=4096.5"},
                 kInvalid,
                 "aio.block_size: expected an integer"},
        BadValue{"ZeroQueueDepth",
                 {"aio.queue_depth=0"},
                 kInvalid,
                 "aio.queue_depth: must be in [1, 4096] (requests in flight), found 0"},
        BadValue{"HugeQueueDepth",
                 {"aio.queue_depth=4097"},
                 kInvalid,
                 "aio.queue_depth: must be in [1, 4096]"},
        BadValue{"ZeroIntraOpParallelism",
                 {"aio.intra_op_parallelism=0"},
                 kInvalid,
                 "aio.intra_op_parallelism: must be >= 1"},
        BadValue{"SingleSubmitString",
                 {"aio.single_submit=\"false\""},
                 kInvalid,
                 "aio.single_submit: expected true or false"},
        BadValue{"OverlapEventsNumber",
                 {"aio.overlap_events=1"},
                 kInvalid,
                 "aio.overlap_events: expected true or false"},
        BadValue{"GpuDirectStorage",
                 {"aio.use_gds=true"},
                 kUnimplemented,
                 "aio.use_gds: this build does not support GPUDirect Storage yet; set it to false "
                 "or remove it"},
        BadValue{"AioKeyTypo",
                 {"aio.queue_dept=8"},
                 kInvalid,
                 "aio.queue_dept: unknown key \"queue_dept\"; did you mean \"aio.queue_depth\"?"},
        BadValue{
            "AioOldThreadCount", {"aio.thread_count=1"}, kInvalid, "aio.thread_count: unknown key"},
        BadValue{"AioNotAnObject", {"aio=true"}, kInvalid, "aio: expected an object"},
        // hoist's offload section
        BadValue{"NegativeMaxHostBytes",
                 {"offload.max_host_bytes=-1"},
                 kInvalid,
                 "offload.max_host_bytes: must be >= 0 bytes (0: no cap), found -1"},
        BadValue{"MaxHostBytesFraction",
                 {"offload.max_host_bytes=1.5"},
                 kInvalid,
                 "offload.max_host_bytes: expected an integer"},
        BadValue{"OffloadKeyTypo",
                 {"offload.max_host_byte=1"},
                 kInvalid,
                 "offload.max_host_byte: unknown key \"max_host_byte\"; did you mean "
                 "\"offload.max_host_bytes\"?"}),
    testing_util::BadValueName);

}  // namespace
}  // namespace hoist::runtime
