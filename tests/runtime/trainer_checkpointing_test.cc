// Activation checkpointing through the trainer: each policy, with ZeRO stages 1-3 on 1 and 2
// ranks and bf16, trains the run without checkpointing bit for bit while holding fewer activation
// bytes, and activation_checkpointing.profile puts the recomputation seconds in the JSONL log.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/memory/memory_estimate.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

using testing_util::RankRun;
using testing_util::TinyJob;
using testing_util::TrainOnRanks;

constexpr int kSteps = 5;

Config Job(int world, std::vector<std::string> extra) {
  extra.push_back("model.n_layer=4");
  return TinyJob(world, kSteps, extra);
}

int64_t ActivationPeak(const RankRun& run) {
  return run.memory.Peak(Place::kDevice, Category::kActivation);
}

TEST(TrainerCheckpointing, EveryPolicyTrainsTheRunWithoutCheckpointingBitForBit) {
  const struct {
    int stage, world;
    const char* precision;
  } setups[] = {
      {1, 2, "bf16.enabled=true"}, {2, 1, "bf16.enabled=false"}, {3, 2, "bf16.enabled=false"}};
  const char* policies[] = {"full", "every_k", "selective"};
  for (const auto& setup : setups) {
    const std::vector<std::string> base = {"zero_optimization.stage=" + std::to_string(setup.stage),
                                           setup.precision};
    const std::vector<RankRun> want = TrainOnRanks(Job(setup.world, base), setup.world);
    for (const char* policy : policies) {
      for (bool cpu : {false, true}) {
        SCOPED_TRACE(std::string(policy) + (cpu ? "+cpu" : "") + " stage " +
                     std::to_string(setup.stage) + " " + setup.precision);
        std::vector<std::string> extra = base;
        extra.push_back(std::string("activation_checkpointing.policy=") + policy);
        extra.push_back(std::string("activation_checkpointing.cpu_checkpointing=") +
                        (cpu ? "true" : "false"));
        const std::vector<RankRun> got = TrainOnRanks(Job(setup.world, extra), setup.world);
        for (int r = 0; r < setup.world; ++r) {
          ASSERT_TRUE(want[r].status.ok()) << want[r].status.ToString();
          ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
          ASSERT_EQ(got[r].losses.size(), size_t{kSteps});
          EXPECT_EQ(got[r].losses, want[r].losses) << "rank " << r;
          EXPECT_EQ(got[r].params, want[r].params) << "rank " << r;
          EXPECT_LT(ActivationPeak(got[r]), ActivationPeak(want[r])) << "rank " << r;
          EXPECT_EQ(got[r].memory.Peak(Place::kHostPinned, Category::kActivation) > 0, cpu);
        }
      }
    }
    EXPECT_LT(want[0].losses.back(), want[0].losses.front());
  }
}

TEST(TrainerCheckpointing, ProfileLogsTheRecomputationSeconds) {
  const std::string path =
      ::testing::TempDir() + "/checkpointing_profile_" + std::to_string(::getpid()) + ".jsonl";
  const std::vector<RankRun> runs = TrainOnRanks(
      Job(1, {"activation_checkpointing.policy=full", "activation_checkpointing.profile=true",
              "monitor.jsonl.path=\"" + path + "\""}),
      1);
  ASSERT_TRUE(runs[0].status.ok()) << runs[0].status.ToString();
  std::ifstream in(path);
  std::string line;
  int steps = 0;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("event")) continue;
    ASSERT_TRUE(record.contains("recompute_s")) << line;
    EXPECT_GE(record["recompute_s"].get<double>(), 0.0);
    ++steps;
  }
  EXPECT_EQ(steps, kSteps);
  std::remove(path.c_str());
}

TEST(TrainerCheckpointing, CpuCheckpointingCountsInTheHostMemoryCheck) {
  // Without offload, cpu_checkpointing's pinned block inputs alone must fit the host.
  TrainerOptions options;
  HostMemory tiny;
  tiny.mem_available = 4096;
  options.host_memory = tiny;
  const std::vector<RankRun> runs =
      TrainOnRanks(Job(2, {"activation_checkpointing.policy=full",
                           "activation_checkpointing.cpu_checkpointing=true"}),
                   2, options);
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status.code(), StatusCode::kResourceExhausted) << run.status.ToString();
    EXPECT_THAT(run.status.message(), ::testing::HasSubstr("cpu_checkpointing"));
  }
  // On the device instead, a host that holds just the two ranks' estimated bytes passes.
  const Config on_device = Job(2, {"activation_checkpointing.policy=full"});
  const StatusOr<MemoryEstimate> estimate = EstimateMemory(on_device, 2);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  EXPECT_EQ(estimate->PeakTotal(Place::kHostPinned), 0);
  options.host_memory->mem_available =
      2 * (estimate->PeakTotal(Place::kDevice) + estimate->PeakTotal(Place::kHost));
  const std::vector<RankRun> ok = TrainOnRanks(on_device, 2, options);
  for (const RankRun& run : ok) EXPECT_TRUE(run.status.ok()) << run.status.ToString();
}

}  // namespace
}  // namespace hoist::runtime
