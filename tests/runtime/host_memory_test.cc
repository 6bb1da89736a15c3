// The host memory a job may use (MemAvailable and cgroup v1 and v2 limits, read from fake
// files) and the check that refuses a CPU job too large for its node before it allocates.
#include "runtime/memory/host_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "runtime/config/engine_options.h"
#include "runtime/memory/offload_preflight.h"
#include "runtime/train/trainer.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::TinyJob;

constexpr int64_t kGiB = int64_t{1} << 30;

// A fake /proc and cgroup file system under a fresh directory.
class FakeHost {
 public:
  explicit FakeHost(const std::string& name)
      : root_(fs::path(::testing::TempDir()) / ("hoist_host_memory_" + name)) {
    fs::remove_all(root_);
    fs::create_directories(root_ / "cgroup");
    sources_.meminfo = (root_ / "meminfo").string();
    sources_.self_cgroup = (root_ / "self_cgroup").string();
    sources_.cgroup_root = (root_ / "cgroup").string();
  }
  ~FakeHost() { fs::remove_all(root_); }

  void Write(const std::string& relative, const std::string& text) {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  const HostMemorySources& sources() const { return sources_; }
  std::string Cgroup(const std::string& relative) const {
    return (root_ / "cgroup" / relative).string();
  }

 private:
  fs::path root_;
  HostMemorySources sources_;
};

TEST(ReadHostMemory, ReadsMemAvailable) {
  FakeHost host("meminfo");
  host.Write("meminfo",
             "MemTotal:       32000000 kB\nMemFree:         1000 kB\n"
             "MemAvailable:   20000000 kB\nBuffers: 5 kB\n");
  const HostMemory memory = ReadHostMemory(host.sources());
  EXPECT_EQ(memory.mem_available, int64_t{20000000} * 1024);
  EXPECT_EQ(memory.cgroup_free, -1);
}

TEST(ReadHostMemory, NothingReadableIsUnknown) {
  FakeHost host("nothing");
  const HostMemory memory = ReadHostMemory(host.sources());
  EXPECT_EQ(memory.mem_available, -1);
  EXPECT_EQ(memory.cgroup_free, -1);
}

TEST(ReadHostMemory, CgroupV2TakesTheTightestAncestorAndCountsInactivePageCacheAsFree) {
  FakeHost host("v2");
  host.Write("self_cgroup", "0::/job.slice/step.scope\n");
  // The leaf has no limit; its parent allows 8 GiB, 6 GiB in use of which 1 GiB is page cache
  // the kernel can drop: 3 GiB free.
  host.Write("cgroup/job.slice/step.scope/memory.max", "max\n");
  host.Write("cgroup/job.slice/step.scope/memory.current", "123\n");
  host.Write("cgroup/job.slice/memory.max", std::to_string(8 * kGiB) + "\n");
  host.Write("cgroup/job.slice/memory.current", std::to_string(6 * kGiB) + "\n");
  host.Write("cgroup/job.slice/memory.stat",
             "anon 100\nfile 200\ninactive_file " + std::to_string(kGiB) + "\nactive_file 7\n");
  const HostMemory memory = ReadHostMemory(host.sources());
  EXPECT_EQ(memory.cgroup_free, 3 * kGiB);
  EXPECT_EQ(memory.cgroup_path, host.Cgroup("job.slice"));
}

TEST(ReadHostMemory, CgroupV1MemoryControllerIsRead) {
  FakeHost host("v1");
  host.Write("self_cgroup", "9:name=systemd:/\n5:cpu,cpuacct:/\n4:memory:/batch/job42\n0::/\n");
  // v1's "no limit" at the job, a real limit above it.
  host.Write("cgroup/memory/batch/job42/memory.limit_in_bytes", "9223372036854771712\n");
  host.Write("cgroup/memory/batch/job42/memory.usage_in_bytes", "1000\n");
  host.Write("cgroup/memory/batch/memory.limit_in_bytes", std::to_string(4 * kGiB) + "\n");
  host.Write("cgroup/memory/batch/memory.usage_in_bytes", std::to_string(kGiB) + "\n");
  host.Write("cgroup/memory/batch/memory.stat", "cache 5\ntotal_inactive_file 0\n");
  const HostMemory memory = ReadHostMemory(host.sources());
  EXPECT_EQ(memory.cgroup_free, 3 * kGiB);
  EXPECT_EQ(memory.cgroup_path, host.Cgroup("memory/batch"));
}

TEST(ReadHostMemory, CgroupV1InAContainerFallsBackToTheControllerRoot) {
  // Inside a container the host's path is listed, but the container sees its own cgroup at the
  // controller's root.
  FakeHost host("v1_container");
  host.Write("self_cgroup", "4:memory:/docker/0123abcd\n");
  host.Write("cgroup/memory/memory.limit_in_bytes", std::to_string(2 * kGiB) + "\n");
  host.Write("cgroup/memory/memory.usage_in_bytes", std::to_string(kGiB / 2) + "\n");
  const HostMemory memory = ReadHostMemory(host.sources());
  EXPECT_EQ(memory.cgroup_free, 2 * kGiB - kGiB / 2);
}

MemoryEstimate EstimateOf(const Config& config, int world) {
  StatusOr<MemoryEstimate> estimate = EstimateMemory(config, world);
  EXPECT_TRUE(estimate.ok()) << estimate.status().ToString();
  return *estimate;
}

int64_t RankBytes(const MemoryEstimate& estimate) {
  return estimate.PeakTotal(Place::kDevice) + estimate.PeakTotal(Place::kHost) +
         estimate.PeakTotal(Place::kHostPinned);
}

TEST(CheckJobHostMemory, RefusesWithTheNumbersAndWhatToChange) {
  const MemoryEstimate estimate = EstimateOf(TinyJob(1, 5), 1);
  const int64_t rank_bytes = RankBytes(estimate);
  ASSERT_GT(rank_bytes, 0);
  HostMemory host;
  host.mem_available = 2 * rank_bytes - 1;
  const Status refused = CheckJobHostMemory(estimate, 2, host);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("(" + std::to_string(2 * rank_bytes) + " bytes)"));
  EXPECT_THAT(refused.message(), HasSubstr("2 ranks"));
  EXPECT_THAT(refused.message(), HasSubstr("MemAvailable"));
  EXPECT_THAT(refused.message(), HasSubstr("zero_optimization.stage"));
  EXPECT_THAT(refused.message(), HasSubstr("offload_optimizer"));
  EXPECT_THAT(refused.message(), HasSubstr("train_micro_batch_size_per_gpu"));
  EXPECT_THAT(refused.message(), HasSubstr("activation_checkpointing"));
  // One rank fits where two did not.
  EXPECT_TRUE(CheckJobHostMemory(estimate, 1, host).ok());
  EXPECT_TRUE(CheckJobHostMemory(estimate, 2, HostMemory{}).ok());  // nothing known
}

TEST(CheckJobHostMemory, TheCgroupLimitIsHonoured) {
  const MemoryEstimate estimate = EstimateOf(TinyJob(1, 5), 1);
  HostMemory host;
  host.mem_available = 1000 * RankBytes(estimate);
  host.cgroup_free = RankBytes(estimate) / 2;
  host.cgroup_path = "/sys/fs/cgroup/memory/job";
  const Status refused = CheckJobHostMemory(estimate, 1, host);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("/sys/fs/cgroup/memory/job"));
  EXPECT_THAT(refused.message(), HasSubstr("raise the job's memory limit"));
}

// The trainer checks before it allocates the model: every rank refuses, nothing is held.
TEST(CheckJobHostMemory, TheTrainerRefusesBeforeAllocatingOnEveryRank) {
  const Config config = TinyJob(2, 5);
  HostMemory host;
  host.mem_available = RankBytes(EstimateOf(config, 2));  // one rank's worth, for two
  auto group = comm::ThreadGroup::Create(2, 20.0);
  ASSERT_TRUE(group.ok());
  std::vector<Status> statuses(2);
  std::vector<int64_t> peaks(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      MemoryTracker tracker;
      TrainerOptions options;
      options.comm = &(*group)->comm(r);
      options.tracker = &tracker;
      options.host_memory = host;
      statuses[r] = Trainer::Create(config, options).status();
      peaks[r] = tracker.Snapshot().peak_total[int(Place::kDevice)];
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kResourceExhausted) << statuses[r].ToString();
    EXPECT_THAT(statuses[r].message(), HasSubstr("the job needs")) << statuses[r].ToString();
    EXPECT_EQ(peaks[r], 0) << "rank " << r << " allocated before the check";
  }
}

}  // namespace
}  // namespace hoist::runtime

namespace hoist::runtime {
namespace {

// On a GPU, ZeRO-Offload's update keeps the owned gradients in pinned host memory (they come down
// during the backward) and stages each unit's new bf16 weights there: the host-memory check
// counts those buffers too, as the engine allocates them.
TEST(OffloadFootprint, AnAcceleratorAddsTheHostUpdatesStaging) {
  const Config config =
      testing_util::TinyJob(1, 5,
                            {"zero_optimization.stage=2", "bf16.enabled=true",
                             "zero_optimization.offload_optimizer.device=\"cpu\""});
  const std::vector<zero::UnitSpec> units = ModelUnits(config.model);
  const zero::ZeroOptions options = ZeroOptionsFrom(config);
  const StatusOr<OffloadFootprint> cpu = OffloadFootprintPerRank(units, options, 1, 0);
  const StatusOr<OffloadFootprint> gpu =
      OffloadFootprintPerRank(units, options, 1, 0, /*accelerator=*/true);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  int64_t largest = 0, total = 0;
  for (const zero::UnitSpec& unit : units) {
    largest = std::max(largest, unit.size);
    total += unit.size;
  }
  // One rank: every unit whole. The gradients of all units in bf16, and two slots of the bf16
  // copy, each the largest unit; whole pages.
  const int64_t page = offload::PinnedHostPool::kPageBytes;
  auto pages = [&](int64_t bytes) { return (bytes + page - 1) / page * page; };
  EXPECT_EQ(gpu->pinned_bytes - cpu->pinned_bytes, pages(total * 2) + 2 * pages(largest * 2));
  EXPECT_EQ(gpu->host_bytes, cpu->host_bytes);
}

}  // namespace
}  // namespace hoist::runtime
