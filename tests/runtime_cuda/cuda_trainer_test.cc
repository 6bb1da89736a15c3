// `hoist train` on the GPU against the same job on the CPU: the trainer with the CUDA
// DeviceTraining follows the CPU path's loss curve (fp32 to 1e-4 relative, bf16 within bf16's
// tolerance), and its checkpoints resume on the CPU. Suites are Cuda*: label "gpu"; they skip
// where no GPU is visible, and one test pins what happens there instead.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "runtime/checkpoint.h"
#include "runtime/cuda/cuda_training.h"
#include "runtime/trainer.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using testing_util::TinyJob;

struct Result {
  Status status;
  std::vector<float> losses;
  MemorySnapshot memory;
};

Result Train(const Config& config, bool gpu, const std::string& resume_from = "") {
  MemoryTracker tracker;
  TrainerOptions options;
  options.tracker = &tracker;
  options.resume_from = resume_from;
  if (gpu) options.device_training = CreateCudaTraining;
  Result result;
  auto trainer = Trainer::Create(config, options);
  if (!trainer.ok()) {
    result.status = trainer.status();
    return result;
  }
  result.status = (*trainer)->Run();
  result.losses = (*trainer)->losses();
  result.memory = tracker.Snapshot();
  return result;
}

#define SKIP_WITHOUT_GPU()                                                                \
  do {                                                                                    \
    if (CudaDeviceCount() == 0) {                                                         \
      GTEST_SKIP() << "no CUDA GPU visible (driver " << CudaDriverVersionString() << ")"; \
    }                                                                                     \
  } while (0)

TEST(CudaTrainer, Fp32FollowsTheCpuLossCurve) {
  SKIP_WITHOUT_GPU();
  for (const char* attention : {"direct", "tiled"}) {
    SCOPED_TRACE(attention);
    const Config config = TinyJob(
        1, 10, {std::string("model.attention=\"") + attention + "\"", "gradient_clipping=1.0"});
    const Result cpu = Train(config, false);
    const Result gpu = Train(config, true);
    ASSERT_TRUE(cpu.status.ok()) << cpu.status.ToString();
    ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
    ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
    for (size_t i = 0; i < cpu.losses.size(); ++i) {
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-4 * std::fabs(cpu.losses[i])) << "step " << i;
    }
    // The model's states are on the GPU, counted under kDevice; the batch is host memory.
    EXPECT_GT(gpu.memory.Peak(Place::kDevice, Category::kOptimizer), 0);
    EXPECT_GT(gpu.memory.Peak(Place::kHost, Category::kActivation), 0);
  }
}

TEST(CudaTrainer, Bf16StaysWithinBf16OfTheCpuRun) {
  SKIP_WITHOUT_GPU();
  const Config config = TinyJob(1, 10, {"bf16.enabled=true"});
  const Result cpu = Train(config, false);
  const Result gpu = Train(config, true);
  ASSERT_TRUE(cpu.status.ok()) << cpu.status.ToString();
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    // The CPU computes in fp32 and rounds each activation to bf16; the GPU also keeps the
    // activations' gradients in bf16 and multiplies in bf16 with fp32 sums: a few bf16 ulps.
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 2e-2 * std::fabs(cpu.losses[i])) << "step " << i;
  }
}

TEST(CudaTrainer, AGpuCheckpointResumesOnTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::string dir =
      ::testing::TempDir() + "/cuda_trainer_resume_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const Config config =
      TinyJob(1, 6, {"checkpoint.dir=\"" + dir + "\"", "checkpoint.interval_steps=3"});
  const Result gpu = Train(config, true);
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.ToString();
  const Result cpu = Train(config, false, dir + "/" + CheckpointStepDirName(3));
  ASSERT_TRUE(cpu.status.ok()) << cpu.status.ToString();
  ASSERT_EQ(cpu.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(cpu.losses[i], gpu.losses[3 + i], 1e-4 * std::fabs(gpu.losses[3 + i]));
  }
  std::filesystem::remove_all(dir);
}

TEST(CudaTrainerWithoutGpu, SaysThereIsNoGpuAndHowToTrainOnTheCpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "pins the no-GPU behaviour; a GPU is visible";
  const Result gpu = Train(TinyJob(1, 5), true);
  EXPECT_EQ(gpu.status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(gpu.status.message(), HasSubstr("--device cpu"));
}

}  // namespace
}  // namespace hoist::runtime
