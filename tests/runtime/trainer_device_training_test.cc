// The trainer's accelerator path (TrainerOptions::device_training) with a CPU stand-in for the
// device: a DeviceTraining built from the CPU model, the host communicator and the CPU AdamW, doing
// what the CUDA one does (whole states on every rank, averaged gradients, the engine's norm and
// clipping). The loop, the data, evaluation, logs and checkpoints are the trainer's; these tests
// pin them on this path: the same losses as the CPU path, checkpoints that resume on either
// path, refusals that name the key, and failures agreed by every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/adamw_step.h"
#include "kernels/cpu/ops.h"
#include "runtime/checkpoint.h"
#include "runtime/device_training.h"
#include "runtime/gpt2.h"
#include "runtime/trainer.h"
#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using testing_util::RankRun;
using testing_util::TinyJob;
using testing_util::TrainOnRanks;

// The CUDA path's arithmetic on the CPU.
class CpuStandIn final : public DeviceTraining {
 public:
  static StatusOr<std::unique_ptr<DeviceTraining>> Create(const Config& config,
                                                          comm::Communicator* comm, int,
                                                          MemoryTracker* tracker) {
    HOIST_RETURN_IF_ERROR(SupportsDeviceTraining(config, "cuda"));
    std::unique_ptr<CpuStandIn> training(new CpuStandIn(config, comm, tracker));
    HOIST_ASSIGN_OR_RETURN(
        training->model_,
        Gpt2Model::Create(config.model, static_cast<int>(config.train_micro_batch_size_per_gpu),
                          config.model.seq_len, &training->device_));
    // The moments count as optimizer states on the stand-in's "device", as the GPU's do.
    const int64_t bytes = training->model_->layout().total * int64_t{sizeof(float)};
    HOIST_ASSIGN_OR_RETURN(training->m_, training->device_.Allocate(bytes, Category::kOptimizer));
    HOIST_ASSIGN_OR_RETURN(training->v_, training->device_.Allocate(bytes, Category::kOptimizer));
    return std::unique_ptr<DeviceTraining>(std::move(training));
  }

  std::string name() const override { return "cpu stand-in"; }
  int64_t num_parameters() const override { return model_->num_parameters(); }
  Status InitializeWeights(uint64_t seed) override {
    model_->InitializeWeights(seed);
    return Status::Ok();
  }
  Status ZeroGrads() override {
    model_->ZeroGradients();
    return Status::Ok();
  }
  StatusOr<float> Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float dloss) override {
    return model_->Forward(inputs, targets, B, T, dloss);
  }
  Status Backward() override {
    model_->Backward();
    return Status::Ok();
  }
  StatusOr<zero::StepResult> Step(float lr, float loss_scale, float max_norm) override {
    const ParamLayout& layout = model_->layout();
    if (comm_->world_size() > 1) {
      HOIST_RETURN_IF_ERROR(
          comm_->AllReduce(model_->grads(), layout.total, DType::kFloat32, comm::ReduceOp::kAvg));
    }
    const double inv = 1.0 / loss_scale;
    const double sum =
        kernels::cpu::SumOfSquares(model_->grads(), static_cast<size_t>(layout.total));
    zero::StepResult result;
    result.grad_norm = std::sqrt(sum * inv * inv);
    result.overflow = !std::isfinite(result.grad_norm);
    if (result.overflow) return result;
    kernels::cpu::AdamWHyperparams h;
    h.lr = lr;
    h.beta1 = config_.optimizer.beta1;
    h.beta2 = config_.optimizer.beta2;
    h.eps = config_.optimizer.eps;
    h.grad_scale = zero::ClipScale(result.grad_norm, max_norm) * static_cast<float>(inv);
    h.step = ++steps_;
    for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
      const int layers = ParamLayout::PerBlock(tensor) ? layout.n_layer : 1;
      for (int l = 0; l < layers; ++l) {
        const int64_t offset = layout.Offset(tensor, l);
        kernels::cpu::AdamWShard shard;
        shard.param = model_->params() + offset;
        shard.m = m_.as<float>() + offset;
        shard.v = v_.as<float>() + offset;
        shard.grad = model_->grads() + offset;
        shard.n = static_cast<size_t>(layout.unit_sizes[tensor]);
        h.weight_decay = ParamLayout::Decayed(tensor) ? config_.optimizer.weight_decay : 0.0f;
        kernels::cpu::AdamWFusedStep(shard, h);
      }
    }
    return result;
  }
  int64_t step_count() const override { return steps_; }
  DeviceMemoryStats memory_stats() const override {
    DeviceMemoryStats stats;
    stats.allocated = stats.reserved = device_.tracker()->Snapshot().CurrentTotal(Place::kDevice);
    return stats;
  }
  int64_t state_elements() const override { return model_->layout().total; }
  Status ReadState(float* master, float* m, float* v) override {
    const size_t n = static_cast<size_t>(model_->layout().total);
    std::copy_n(model_->params(), n, master);
    std::copy_n(m_.as<float>(), n, m);
    std::copy_n(v_.as<float>(), n, v);
    return Status::Ok();
  }
  Status RestoreState(const float* master, const float* m, const float* v,
                      int64_t step_count) override {
    const size_t n = static_cast<size_t>(model_->layout().total);
    std::copy_n(master, n, model_->params());
    std::copy_n(m, n, m_.as<float>());
    std::copy_n(v, n, v_.as<float>());
    steps_ = step_count;
    return Status::Ok();
  }

 private:
  CpuStandIn(const Config& config, comm::Communicator* comm, MemoryTracker* tracker)
      : config_(config), comm_(comm), device_(Place::kDevice, tracker) {}

  Config config_;
  comm::Communicator* comm_;
  CpuDevice device_;
  std::unique_ptr<Gpt2Model> model_;
  Buffer m_, v_;  // Adam's moments, fp32
  int64_t steps_ = 0;
};

// Trains `config` on `world` thread ranks, on the stand-in when `factory` is set.
std::vector<RankRun> Train(const Config& config, int world, DeviceTrainingFactory factory,
                           TrainerOptions options = {}) {
  options.device_training = std::move(factory);
  return TrainOnRanks(config, world, options);
}

void ExpectSameCurve(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i])) << "step " << i + 1;
  }
}

std::string TempDir(const char* name) {
  const std::string dir =
      ::testing::TempDir() + "/device_training_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(TrainerDeviceTraining, TrainsTheCpuPathsLossCurveOnOneAndTwoRanks) {
  for (int world : {1, 2}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const Config config = TinyJob(world, 6, {"gradient_clipping=0.5"});
    const std::vector<RankRun> want = Train(config, world, {});
    const std::vector<RankRun> got = Train(config, world, CpuStandIn::Create);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(want[r].status.ok()) << want[r].status.ToString();
      ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
      ExpectSameCurve(got[r].losses, want[r].losses);
    }
    EXPECT_LT(got[0].losses.back(), got[0].losses.front());
  }
}

TEST(TrainerDeviceTraining, HostBuffersCountAsHostAndTheModelAsDevice) {
  const std::vector<RankRun> runs = Train(TinyJob(1, 5), 1, CpuStandIn::Create);
  ASSERT_TRUE(runs[0].status.ok()) << runs[0].status.ToString();
  const MemorySnapshot& memory = runs[0].memory;
  EXPECT_GT(memory.Current(Place::kDevice, Category::kParam), 0);
  EXPECT_GT(memory.Current(Place::kHost, Category::kActivation), 0);  // the batch
  EXPECT_GT(memory.Current(Place::kDevice, Category::kOptimizer), 0);
  EXPECT_EQ(memory.Current(Place::kHost, Category::kParam), 0);
}

TEST(TrainerDeviceTraining, CheckpointsResumeOnEitherPath) {
  const std::string dir = TempDir("resume");
  const std::vector<std::string> keep = {"checkpoint.dir=\"" + dir + "\"",
                                         "checkpoint.interval_steps=3"};
  const Config config = TinyJob(1, 6, keep);
  // Six steps on the stand-in, saving at 3 and 6; then steps 4-6 again from step 3 on the CPU
  // path, and on the stand-in from the CPU path's step 3.
  const std::vector<RankRun> device_run = Train(config, 1, CpuStandIn::Create);
  ASSERT_TRUE(device_run[0].status.ok()) << device_run[0].status.ToString();
  TrainerOptions from_step3;
  from_step3.resume_from = dir + "/" + CheckpointStepDirName(3);
  ASSERT_TRUE(std::filesystem::exists(from_step3.resume_from)) << from_step3.resume_from;
  const std::vector<RankRun> cpu_resumed = Train(config, 1, {}, from_step3);
  ASSERT_TRUE(cpu_resumed[0].status.ok()) << cpu_resumed[0].status.ToString();
  ExpectSameCurve(cpu_resumed[0].losses,
                  std::vector<float>(device_run[0].losses.begin() + 3, device_run[0].losses.end()));

  const std::string cpu_dir = TempDir("resume_cpu");
  const Config cpu_config =
      TinyJob(1, 6, {"checkpoint.dir=\"" + cpu_dir + "\"", "checkpoint.interval_steps=3"});
  const std::vector<RankRun> cpu_run = Train(cpu_config, 1, {});
  ASSERT_TRUE(cpu_run[0].status.ok()) << cpu_run[0].status.ToString();
  TrainerOptions from_cpu_step3;
  from_cpu_step3.resume_from = cpu_dir + "/" + CheckpointStepDirName(3);
  const std::vector<RankRun> device_resumed =
      Train(cpu_config, 1, CpuStandIn::Create, from_cpu_step3);
  ASSERT_TRUE(device_resumed[0].status.ok()) << device_resumed[0].status.ToString();
  ExpectSameCurve(device_resumed[0].losses,
                  std::vector<float>(cpu_run[0].losses.begin() + 3, cpu_run[0].losses.end()));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(cpu_dir);
}

TEST(TrainerDeviceTraining, RefusesWhatThePathCannotRunNamingTheKey) {
  const struct {
    std::string set, key;
  } cases[] = {
      {"zero_optimization.stage=2", "zero_optimization.stage"},
      {"activation_checkpointing.policy=full", "activation_checkpointing.policy"},
  };
  for (const auto& c : cases) {
    const std::vector<RankRun> runs = Train(TinyJob(1, 5, {c.set}), 1, CpuStandIn::Create);
    EXPECT_EQ(runs[0].status.code(), StatusCode::kUnimplemented) << c.set;
    EXPECT_THAT(runs[0].status.message(), HasSubstr(c.key));
    EXPECT_THAT(runs[0].status.message(), HasSubstr("--device cpu"));
  }
}

TEST(TrainerDeviceTraining, OneRankWithoutItsDeviceStopsEveryRankWithItsReason) {
  DeviceTrainingFactory flaky =
      [](const Config& config, comm::Communicator* comm, int local_rank,
         MemoryTracker* tracker) -> StatusOr<std::unique_ptr<DeviceTraining>> {
    if (comm->rank() == 1) return UnavailableError("rank 1 has no GPU");
    return CpuStandIn::Create(config, comm, local_rank, tracker);
  };
  const std::vector<RankRun> runs = Train(TinyJob(2, 5), 2, flaky);
  for (const RankRun& run : runs) {
    EXPECT_FALSE(run.status.ok());
    EXPECT_THAT(run.status.message(), HasSubstr("rank 1 has no GPU"));
  }
}

TEST(TrainerDeviceTraining, TheEndRecordCarriesTheDeviceAllocatorsFigures) {
  const std::string path =
      ::testing::TempDir() + "/device_training_end_" + std::to_string(::getpid()) + ".jsonl";
  const std::vector<RankRun> runs =
      Train(TinyJob(1, 5, {"monitor.jsonl.path=\"" + path + "\""}), 1, CpuStandIn::Create);
  ASSERT_TRUE(runs[0].status.ok()) << runs[0].status.ToString();
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const nlohmann::json end = nlohmann::json::parse(last);
  ASSERT_EQ(end.value("event", ""), "end");
  ASSERT_TRUE(end.contains("device_allocator"));
  EXPECT_EQ(end["device_allocator"]["name"], "cpu stand-in");
  EXPECT_EQ(end["device_allocator"]["reserved"].get<int64_t>(),
            runs[0].memory.CurrentTotal(Place::kDevice));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hoist::runtime
