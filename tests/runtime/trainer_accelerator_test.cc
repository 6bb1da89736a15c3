// The trainer on an accelerator (TrainerOptions::accelerator) without a GPU: a CPU backend whose
// streams run their work on worker threads, with memory counted as the device's, and the engine's
// collectives staged through "pinned" host buffers as a GPU rank's are without NCCL. The engine,
// the model and the arithmetic are the CPU's, so every result must equal the CPU's to the bit: a
// loss read before its stream finished, a collective that read a buffer its producer had not
// written yet, or a checkpoint taken from states still in flight would differ. And no backend op
// may be handed pageable host memory where device memory belongs (live_memory), which on a GPU is
// a fault.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/live_memory.h"
#include "kernels/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/train/accelerator.h"
#include "runtime/train/trainer.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using testing_util::RankRun;
using testing_util::TinyJob;
using testing_util::TrainOnRanks;

// A factory of threaded CPU accelerators. The devices the backends borrow live as long as the
// factory (the trainer keeps its copy past its accelerator).
AcceleratorFactory ThreadedCpu() {
  struct Devices {
    std::mutex mu;
    std::vector<std::unique_ptr<CpuDevice>> owned;
    Device* Add(Place place, MemoryTracker* tracker) {
      std::lock_guard<std::mutex> lock(mu);
      owned.push_back(std::make_unique<CpuDevice>(place, tracker));
      return owned.back().get();
    }
  };
  auto devices = std::make_shared<Devices>();
  return [devices](const Config&, comm::Communicator*, int,
                   MemoryTracker* tracker) -> StatusOr<Accelerator> {
    Accelerator accelerator;
    accelerator.backend = std::make_unique<kernels::CpuBackend>(
        devices->Add(Place::kDevice, tracker), HostStream::Mode::kThreaded);
    accelerator.staging = std::make_unique<CpuDevice>(Place::kHostPinned, tracker);
    accelerator.memory_stats = [tracker] {
      DeviceMemoryStats stats;
      stats.allocated = stats.reserved = tracker->Snapshot().CurrentTotal(Place::kDevice);
      return stats;
    };
    return accelerator;
  };
}

// A device communicator's stand-in: the inner one's collectives, refusing any buffer that no
// allocator of hoist's handed out (live_memory), as NCCL cannot read host memory. Its handles are
// the inner group's, which wait on a threaded stream's worker (StreamWait) as NCCL's do on the GPU.
class DeviceOnly final : public comm::Communicator {
 public:
  DeviceOnly(comm::Communicator* inner, std::atomic<int64_t>* calls)
      : inner_(inner), calls_(calls) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Status AllReduce(void* buf, int64_t count, DType type, comm::ReduceOp op) override {
    HOIST_RETURN_IF_ERROR(Check(buf));
    return inner_->AllReduce(buf, count, type, op);
  }
  Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                       comm::ReduceOp op) override {
    HOIST_RETURN_IF_ERROR(Check(send));
    HOIST_RETURN_IF_ERROR(Check(recv));
    return inner_->ReduceScatter(send, recv, recv_count, type, op);
  }
  Status AllGather(const void* send, void* recv, int64_t send_count, DType type) override {
    HOIST_RETURN_IF_ERROR(Check(send));
    HOIST_RETURN_IF_ERROR(Check(recv));
    return inner_->AllGather(send, recv, send_count, type);
  }
  Status Broadcast(void* buf, int64_t count, DType type, int root) override {
    HOIST_RETURN_IF_ERROR(Check(buf));
    return inner_->Broadcast(buf, count, type, root);
  }
  Status Barrier() override { return inner_->Barrier(); }
  // Ordered on the inner group's worker thread, as NCCL orders on its comm stream: the host does
  // not wait for the compute stream.
  Status OrderAfter(const Stream& producer) override { return inner_->OrderAfter(producer); }
  comm::CommHandle AllReduceAsync(void* buf, int64_t count, DType type,
                                  comm::ReduceOp op) override {
    EXPECT_TRUE(Check(buf).ok());
    return inner_->AllReduceAsync(buf, count, type, op);
  }
  comm::CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType type,
                                      comm::ReduceOp op) override {
    EXPECT_TRUE(Check(send).ok() && Check(recv).ok());
    return inner_->ReduceScatterAsync(send, recv, recv_count, type, op);
  }
  comm::CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                  DType type) override {
    EXPECT_TRUE(Check(send).ok() && Check(recv).ok());
    return inner_->AllGatherAsync(send, recv, send_count, type);
  }
  comm::CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) override {
    EXPECT_TRUE(Check(buf).ok());
    return inner_->BroadcastAsync(buf, count, type, root);
  }
  void Abort(const Status& reason, int exit_code) override { inner_->Abort(reason, exit_code); }

 private:
  Status Check(const void* p) {
    ++*calls_;
    if (live_memory::OnDevice(p)) return Status::Ok();
    return InternalError("host memory handed to the device communicator");
  }
  comm::Communicator* inner_;
  std::atomic<int64_t>* calls_;
};

// ThreadedCpu() with collectives of its own between the ranks' "devices" (`world` ranks),
// counting the buffers they are handed into `calls`.
AcceleratorFactory ThreadedCpuWithCollectives(int world,
                                              std::shared_ptr<std::atomic<int64_t>> calls) {
  auto group =
      std::shared_ptr<comm::ThreadGroup>(std::move(comm::ThreadGroup::Create(world, 60.0)).value());
  AcceleratorFactory threaded = ThreadedCpu();
  return [group, threaded, calls](const Config& config, comm::Communicator* comm, int local_rank,
                                  MemoryTracker* tracker) -> StatusOr<Accelerator> {
    HOIST_ASSIGN_OR_RETURN(Accelerator accelerator, threaded(config, comm, local_rank, tracker));
    accelerator.staging.reset();
    accelerator.collectives = std::make_unique<DeviceOnly>(&group->comm(comm->rank()), calls.get());
    return accelerator;
  };
}

std::vector<RankRun> Train(const Config& config, int world, AcceleratorFactory factory,
                           TrainerOptions options = {}) {
  options.accelerator = std::move(factory);
  return TrainOnRanks(config, world, options);
}

void ExpectSameRun(const RankRun& got, const RankRun& want) {
  ASSERT_TRUE(want.status.ok()) << want.status.ToString();
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.params, want.params);
}

std::string TempDir(const char* name) {
  const std::string dir =
      ::testing::TempDir() + "/trainer_accelerator_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// The CPU's run is made with live_memory off, so that it takes the CPU's own paths (offloaded
// states updated where they lie); the accelerator's with it on, as a GPU's (gradients down to the
// CPU's AdamW, the updated weights up).
TEST(TrainerAccelerator, TrainsTheCpuRunToTheBitOnEveryStage) {
  const std::string nvme = TempDir("nvme");
  std::filesystem::create_directories(nvme);
  const struct {
    int world;
    std::vector<std::string> set;
  } jobs[] = {
      {1, {"gradient_clipping=0.5"}},
      {2, {"zero_optimization.stage=1"}},
      {2, {"zero_optimization.stage=2", "bf16.enabled=true"}},
      {2, {"zero_optimization.stage=3", "activation_checkpointing.policy=\"full\""}},
      {1, {"fp16.enabled=true", "activation_checkpointing.policy=\"selective\""}},
      // ZeRO-Offload: the optimizer states in host memory, pinned or not, and on NVMe.
      {2,
       {"zero_optimization.stage=2", "bf16.enabled=true",
        "zero_optimization.offload_optimizer.device=\"cpu\""}},
      {1,
       {"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=\"cpu\"",
        "zero_optimization.offload_optimizer.pin_memory=false"}},
      {2,
       {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=\"nvme\"",
        "zero_optimization.offload_optimizer.nvme_path=\"" + nvme + "\"",
        "zero_optimization.sub_group_size=5000"}},
      // 8-bit AdamW: on NVMe (sub-groups cut on block boundaries), and split by a ratio (the
      // device part's codes updated on the device, the host part's by the CPU's kernel).
      {2,
       {"zero_optimization.stage=2", "bf16.enabled=true", "optimizer.type=\"AdamW8bit\"",
        "optimizer.params.min_8bit_size=0", "zero_optimization.offload_optimizer.device=\"nvme\"",
        "zero_optimization.offload_optimizer.nvme_path=\"" + nvme + "\"",
        "zero_optimization.sub_group_size=3000"}},
      {2,
       {"zero_optimization.stage=2", "bf16.enabled=true", "optimizer.type=\"AdamW8bit\"",
        "optimizer.params.min_8bit_size=0", "zero_optimization.offload_optimizer.device=\"cpu\"",
        "zero_optimization.offload_optimizer.ratio=0.5"}},
      // ZeRO-Infinity's parameter offload: the shards in host memory or on NVMe, each brought
      // up for its gather and the updated one brought down.
      {2,
       {"zero_optimization.stage=3", "bf16.enabled=true",
        "zero_optimization.offload_param.device=\"cpu\""}},
      {1, {"zero_optimization.stage=3", "zero_optimization.offload_param.device=\"cpu\""}},
      {2,
       {"zero_optimization.stage=3", "bf16.enabled=true", "optimizer.type=\"AdamW8bit\"",
        "optimizer.params.min_8bit_size=0", "zero_optimization.offload_param.device=\"cpu\"",
        "zero_optimization.offload_optimizer.device=\"cpu\"",
        "zero_optimization.offload_optimizer.ratio=0.5"}},
      {1,
       {"zero_optimization.stage=3", "zero_optimization.offload_param.device=\"nvme\"",
        "zero_optimization.offload_param.nvme_path=\"" + nvme + "\"",
        "zero_optimization.offload_param.max_in_cpu=0",
        "zero_optimization.offload_optimizer.device=\"cpu\""}},
      {2,
       {"zero_optimization.stage=3", "zero_optimization.offload_param.device=\"cpu\"",
        "zero_optimization.offload_param.pin_memory=false",
        "zero_optimization.offload_optimizer.device=\"nvme\"",
        "zero_optimization.offload_optimizer.nvme_path=\"" + nvme + "\"",
        "zero_optimization.sub_group_size=3000",
        "zero_optimization.stage3_param_persistence_threshold=200"}},
      {1,
       {"zero_optimization.stage=3", "optimizer.type=\"AdamW8bit\"",
        "optimizer.params.min_8bit_size=1000", "zero_optimization.offload_optimizer.device=\"cpu\"",
        "zero_optimization.offload_optimizer.pin_memory=false",
        "zero_optimization.offload_optimizer.ratio=0.5"}},
  };
  for (const auto& job : jobs) {
    std::string name = std::to_string(job.world) + " ranks";
    for (const std::string& s : job.set) name += ", " + s;
    SCOPED_TRACE(name);
    const Config config = TinyJob(job.world, 5, job.set);
    const std::vector<RankRun> want = Train(config, job.world, {});
    live_memory::ScopedEnable checked;
    const std::vector<RankRun> got = Train(config, job.world, ThreadedCpu());
    for (int r = 0; r < job.world; ++r) ExpectSameRun(got[r], want[r]);
    EXPECT_LT(got[0].losses.back(), got[0].losses.front());
  }
  std::filesystem::remove_all(nvme);
}

// With a device communicator (NCCL between GPUs) the engine's device buffers go to it and its
// host scalars to the host communicator; the run is the CPU's to the bit.
TEST(TrainerAccelerator, DeviceCollectivesCarryOnlyDeviceMemory) {
  live_memory::ScopedEnable checked;
  for (int stage : {0, 2, 3, 4}) {
    // "4": stage 3 with the parameters offloaded, whose shards go up before their gathers.
    SCOPED_TRACE("stage " + std::to_string(stage));
    std::vector<std::string> set = {"zero_optimization.stage=" +
                                    std::to_string(std::min(stage, 3))};
    if (stage == 4) {
      set.push_back("zero_optimization.offload_param.device=\"cpu\"");
      set.push_back("zero_optimization.stage3_param_persistence_threshold=200");
    }
    const Config config = TinyJob(2, 5, set);
    auto calls = std::make_shared<std::atomic<int64_t>>(0);
    const std::vector<RankRun> want = Train(config, 2, {});
    const std::vector<RankRun> got = Train(config, 2, ThreadedCpuWithCollectives(2, calls));
    for (int r = 0; r < 2; ++r) ExpectSameRun(got[r], want[r]);
    EXPECT_GT(calls->load(), 0);  // the gradients went through the device side
  }
}

TEST(TrainerAccelerator, HostBuffersCountAsHostAndTheModelAsDevice) {
  const std::vector<RankRun> runs = Train(TinyJob(1, 5), 1, ThreadedCpu());
  ASSERT_TRUE(runs[0].status.ok()) << runs[0].status.ToString();
  const MemorySnapshot& memory = runs[0].memory;
  EXPECT_GT(memory.Current(Place::kDevice, Category::kParam), 0);
  EXPECT_GT(memory.Current(Place::kDevice, Category::kOptimizer), 0);
  EXPECT_GT(memory.Current(Place::kDevice, Category::kActivation), 0);
  EXPECT_GT(memory.Current(Place::kHost, Category::kActivation), 0);  // the batch
  EXPECT_EQ(memory.Current(Place::kHost, Category::kParam), 0);
}

TEST(TrainerAccelerator, CheckpointsResumeOnEitherDevice) {
  live_memory::ScopedEnable checked;
  const std::string nvme = TempDir("resume_nvme");
  std::filesystem::create_directories(nvme);
  for (int stage : {0, 2, 3, 4}) {
    // 3 and 4: stage 3 with the parameters offloaded (restored through the device's staging),
    // 4 with the optimizer on NVMe too (restored a sub-group at a time).
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string dir = TempDir("resume");
    std::vector<std::string> set = {
        "checkpoint.dir=\"" + dir + "\"", "checkpoint.interval_steps=3",
        "zero_optimization.stage=" + std::to_string(std::min(stage, 3))};
    if (stage >= 3) set.push_back("zero_optimization.offload_param.device=\"cpu\"");
    if (stage == 4) {
      set.push_back("zero_optimization.offload_optimizer.device=\"nvme\"");
      set.push_back("zero_optimization.offload_optimizer.nvme_path=\"" + nvme + "\"");
      set.push_back("zero_optimization.sub_group_size=3000");
    }
    const Config config = TinyJob(2, 6, set);
    // Six steps on the accelerator, saving at 3 and 6; then steps 4-6 again from its step 3 on
    // the CPU, and on the accelerator from the CPU's step 3.
    const std::vector<RankRun> device_run = Train(config, 2, ThreadedCpu());
    ASSERT_TRUE(device_run[0].status.ok()) << device_run[0].status.ToString();
    TrainerOptions from_step3;
    from_step3.resume_from = dir + "/" + CheckpointStepDirName(3);
    const std::vector<RankRun> cpu_resumed = Train(config, 2, {}, from_step3);
    ASSERT_TRUE(cpu_resumed[0].status.ok()) << cpu_resumed[0].status.ToString();
    EXPECT_EQ(cpu_resumed[0].losses,
              std::vector<float>(device_run[0].losses.begin() + 3, device_run[0].losses.end()));
    EXPECT_EQ(cpu_resumed[0].params, device_run[0].params);

    const std::vector<RankRun> cpu_run = Train(config, 2, {});  // overwrites the checkpoints
    ASSERT_TRUE(cpu_run[0].status.ok()) << cpu_run[0].status.ToString();
    const std::vector<RankRun> device_resumed = Train(config, 2, ThreadedCpu(), from_step3);
    ASSERT_TRUE(device_resumed[0].status.ok()) << device_resumed[0].status.ToString();
    EXPECT_EQ(device_resumed[0].losses,
              std::vector<float>(cpu_run[0].losses.begin() + 3, cpu_run[0].losses.end()));
    EXPECT_EQ(device_resumed[0].params, cpu_run[0].params);
    std::filesystem::remove_all(dir);
  }
  std::filesystem::remove_all(nvme);
}

TEST(TrainerAccelerator, OneRankWithoutItsDeviceStopsEveryRankWithItsReason) {
  AcceleratorFactory threaded = ThreadedCpu();
  AcceleratorFactory flaky = [threaded](const Config& config, comm::Communicator* comm,
                                        int local_rank,
                                        MemoryTracker* tracker) -> StatusOr<Accelerator> {
    if (comm->rank() == 1) return UnavailableError("rank 1 has no GPU");
    return threaded(config, comm, local_rank, tracker);
  };
  const std::vector<RankRun> runs = Train(TinyJob(2, 5), 2, flaky);
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status.code(), StatusCode::kUnavailable);
    EXPECT_THAT(run.status.message(), HasSubstr("rank 1 has no GPU"));
  }
}

TEST(TrainerAccelerator, TheEndRecordCarriesTheDeviceAllocatorsFigures) {
  const std::string path =
      ::testing::TempDir() + "/trainer_accelerator_end_" + std::to_string(::getpid()) + ".jsonl";
  const std::vector<RankRun> runs =
      Train(TinyJob(1, 5, {"monitor.jsonl.path=\"" + path + "\""}), 1, ThreadedCpu());
  ASSERT_TRUE(runs[0].status.ok()) << runs[0].status.ToString();
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const nlohmann::json end = nlohmann::json::parse(last);
  ASSERT_EQ(end.value("event", ""), "end");
  ASSERT_TRUE(end.contains("device_allocator"));
  EXPECT_EQ(end["device_allocator"]["name"], "cpu (threaded streams)");
  EXPECT_EQ(end["device_allocator"]["reserved"].get<int64_t>(),
            runs[0].memory.CurrentTotal(Place::kDevice));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hoist::runtime
