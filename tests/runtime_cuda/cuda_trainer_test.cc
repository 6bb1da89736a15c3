// `hoist train --device cuda` against the same job on the CPU: the trainer over the CUDA
// accelerator (the one engine and model on the CUDA backend) follows the CPU's loss curve (fp32
// to 1e-4 relative, 16-bit within what the tests derive), on every ZeRO stage, with activation
// checkpointing, with the optimizer offloaded to the host, and on two ranks sharing the GPU
// through the host-staged communicator; its
// checkpoints resume on the CPU and the CPU's on it. Suites are Cuda*: label "gpu"; they skip
// where no GPU is visible, and one test pins what happens there instead.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/cuda/cuda_accelerator.h"
#include "runtime/memory/memory_estimate.h"
#include "runtime/train/trainer.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using testing_util::RankRun;
using testing_util::TinyJob;
using testing_util::TrainOnRanks;

std::vector<RankRun> Train(const Config& config, int world, bool gpu,
                           const std::string& resume_from = "") {
  TrainerOptions options;
  options.resume_from = resume_from;
  // Ranks in one process share the GPU: NCCL cannot run them, the staged communicator can.
  CudaAcceleratorOptions cuda;
  cuda.nccl = false;
  if (gpu) options.accelerator = CudaAccelerator(cuda);
  return TrainOnRanks(config, world, options);
}

void ExpectFollows(const RankRun& gpu, const RankRun& cpu, double tolerance) {
  ASSERT_TRUE(cpu.status.ok()) << cpu.status.ToString();
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], tolerance * std::fabs(cpu.losses[i]))
        << "step " << i + 1;
    worst = std::max(
        worst, std::fabs(double(gpu.losses[i]) - cpu.losses[i]) / std::fabs(double(cpu.losses[i])));
  }
  std::printf("  losses within %.2e of the CPU's (tolerance %.0e)\n", worst, tolerance);
}

#define SKIP_WITHOUT_GPU()                                                                \
  do {                                                                                    \
    if (CudaDeviceCount() == 0) {                                                         \
      GTEST_SKIP() << "no CUDA GPU visible (driver " << CudaDriverVersionString() << ")"; \
    }                                                                                     \
  } while (0)

TEST(CudaTrainer, FollowsTheCpuLossCurve) {
  SKIP_WITHOUT_GPU();
  const struct {
    int world;
    std::vector<std::string> set;
    double tolerance;
  } jobs[] = {
      {1, {"gradient_clipping=1.0"}, 1e-4},
      {1, {"model.attention=\"tiled\"", "zero_optimization.stage=3"}, 1e-4},
      {1, {"activation_checkpointing.policy=\"selective\""}, 1e-4},
      {2, {"zero_optimization.stage=2"}, 1e-4},
      {2, {"zero_optimization.stage=3", "activation_checkpointing.policy=\"full\""}, 1e-4},
      // The kept block inputs in pinned host memory, read and written by the GPU's kernels.
      {1,
       {"activation_checkpointing.policy=\"full\"",
        "activation_checkpointing.cpu_checkpointing=true"},
       1e-4},
      // ZeRO-Offload: the CPU's AdamW on the states in host memory.
      {2,
       {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\""},
       1e-4},
      // 16-bit storage rounds the same values on both sides; a value near a rounding boundary
      // can round either way, and the curve carries it on (CudaEngine's tolerance, over 10
      // steps instead of 4).
      {1, {"bf16.enabled=true"}, 2e-2},
      {1, {"fp16.enabled=true"}, 2e-2},
  };
  for (const auto& job : jobs) {
    std::string name = std::to_string(job.world) + " ranks";
    for (const std::string& s : job.set) name += ", " + s;
    SCOPED_TRACE(name);
    std::printf("%s\n", name.c_str());
    const Config config = TinyJob(job.world, 10, job.set);
    const std::vector<RankRun> cpu = Train(config, job.world, false);
    const std::vector<RankRun> gpu = Train(config, job.world, true);
    for (int r = 0; r < job.world; ++r) ExpectFollows(gpu[r], cpu[r], job.tolerance);
    // The model's states are on the GPU, counted under kDevice (the optimizer's in pinned host
    // memory when offloaded); the batch is host memory.
    const bool offloaded = config.zero.offload_optimizer.device != Placement::kDevice;
    EXPECT_GT(
        gpu[0].memory.Peak(offloaded ? Place::kHostPinned : Place::kDevice, Category::kOptimizer),
        0);
    EXPECT_GT(gpu[0].memory.Peak(Place::kDevice, Category::kParam), 0);
    EXPECT_GT(gpu[0].memory.Peak(Place::kHost, Category::kActivation), 0);
    EXPECT_EQ(gpu[0].memory.Peak(Place::kHost, Category::kParam), 0);
  }
}

TEST(CudaTrainer, CheckpointsResumeOnEitherDevice) {
  SKIP_WITHOUT_GPU();
  const std::string dir =
      ::testing::TempDir() + "/cuda_trainer_resume_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const Config config = TinyJob(2, 6,
                                {"checkpoint.dir=\"" + dir + "\"", "checkpoint.interval_steps=3",
                                 "zero_optimization.stage=2"});
  const std::string step3 = dir + "/" + CheckpointStepDirName(3);
  const std::vector<RankRun> gpu = Train(config, 2, true);
  ASSERT_TRUE(gpu[0].status.ok()) << gpu[0].status.ToString();
  const std::vector<RankRun> cpu_resumed = Train(config, 2, false, step3);
  RankRun tail = gpu[0];
  tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 3);
  ExpectFollows(cpu_resumed[0], tail, 1e-4);

  const std::vector<RankRun> cpu = Train(config, 2, false);
  ASSERT_TRUE(cpu[0].status.ok()) << cpu[0].status.ToString();
  const std::vector<RankRun> gpu_resumed = Train(config, 2, true, step3);
  tail = cpu[0];
  tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 3);
  ExpectFollows(gpu_resumed[0], tail, 1e-4);
  std::filesystem::remove_all(dir);
}

// `hoist estimate --device cuda` against the run: the tracker's device peak to the byte (the same
// engine and model allocate the same buffers as the estimate replays), and the caching
// allocator's peak reserved bytes, which add its rounding and cache, within 10% of it.
TEST(CudaTrainer, TheEstimateHoldsForTheGpu) {
  SKIP_WITHOUT_GPU();
  const std::string dir = ::testing::TempDir() + "/cuda_estimate_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::vector<std::string> medium = {
      "model.n_layer=6",     "model.n_embd=512",
      "model.n_head=8",      "model.vocab_size=50257",
      "model.seq_len=256",   "train_micro_batch_size_per_gpu=8",
      "train_batch_size=16", "monitor.jsonl.path=\"" + dir + "/run.jsonl\""};
  const struct {
    std::string name;
    std::vector<std::string> set;
  } jobs[] = {
      {"stage 0, fp32", {"zero_optimization.stage=0"}},
      {"stage 2, bf16, full checkpointing",
       {"zero_optimization.stage=2", "bf16.enabled=true",
        "activation_checkpointing.policy=\"full\""}},
      {"stage 3, bf16, optimizer on the host",
       {"zero_optimization.stage=3", "bf16.enabled=true",
        "zero_optimization.offload_optimizer.device=\"cpu\""}},
      {"stage 1, tiled attention", {"zero_optimization.stage=1", "model.attention=\"tiled\""}},
  };
  for (const auto& job : jobs) {
    SCOPED_TRACE(job.name);
    std::vector<std::string> set = medium;
    set.insert(set.end(), job.set.begin(), job.set.end());
    const Config config = TinyJob(1, 5, set);
    const StatusOr<MemoryEstimate> estimate = EstimateMemory(config, 1, DeviceKind::kCuda);
    ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
    std::filesystem::remove(dir + "/run.jsonl");
    const std::vector<RankRun> runs = Train(config, 1, true);
    ASSERT_TRUE(runs[0].status.ok()) << runs[0].status.ToString();
    for (Place place : {Place::kDevice, Place::kHostPinned}) {
      EXPECT_EQ(runs[0].memory.peak_total[int(place)], estimate->PeakTotal(place))
          << PlaceName(place);
    }
    std::ifstream in(dir + "/run.jsonl");
    std::string line, last;
    while (std::getline(in, line)) last = line;
    const nlohmann::json end = nlohmann::json::parse(last);
    ASSERT_TRUE(end.contains("device_allocator")) << last;
    const int64_t reserved = end["device_allocator"]["max_reserved"].get<int64_t>();
    const int64_t predicted = estimate->PeakTotal(Place::kDevice);
    std::printf(
        "  %s: estimate %.1f MiB, tracker %.1f MiB, allocator reserved %.1f MiB (%+.1f%%)\n",
        job.name.c_str(), predicted / 1048576.0,
        runs[0].memory.peak_total[int(Place::kDevice)] / 1048576.0, reserved / 1048576.0,
        100.0 * double(reserved - predicted) / double(predicted));
    EXPECT_LE(std::fabs(double(reserved - predicted)), 0.1 * double(predicted));
  }
  std::filesystem::remove_all(dir);
}

// ZeRO-Infinity's parameter offload, which the GPU runs as every accelerator does: each shard in
// pinned host memory goes up through the device's staging for its gather and comes down after its
// update. The curve is the CPU's, and the shards are counted in pinned host memory.
TEST(CudaTrainer, ParameterOffloadFollowsTheCpuLossCurve) {
  SKIP_WITHOUT_GPU();
  for (int world : {1, 2}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    const Config config = TinyJob(
        world, 10, {"zero_optimization.stage=3", "zero_optimization.offload_param.device=\"cpu\""});
    const std::vector<RankRun> cpu = Train(config, world, false);
    const std::vector<RankRun> gpu = Train(config, world, true);
    for (int r = 0; r < world; ++r) ExpectFollows(gpu[r], cpu[r], 1e-4);
    EXPECT_GT(gpu[0].memory.Peak(Place::kHostPinned, Category::kParam), 0);
  }
}

TEST(CudaTrainerWithoutGpu, SaysThereIsNoGpuAndHowToTrainOnTheCpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "pins the no-GPU behaviour; a GPU is visible";
  const std::vector<RankRun> runs = Train(TinyJob(1, 5), 1, true);
  EXPECT_EQ(runs[0].status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(runs[0].status.message(), HasSubstr("--device cpu"));
}

}  // namespace
}  // namespace hoist::runtime
