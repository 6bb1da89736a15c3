// GPT-2 on the one ZeRO engine with the CUDA backend below both, against the same job on the CPU
// backend, its oracle: the model computes in fp32 on the GPU (true fp32 products, no TF32), the
// engine keeps the states there as on a CPU rank. Stages 0-3, activation checkpointing, bf16
// storage, two ranks on one GPU through the host-staged communicator against one rank, and the
// optimizer states offloaded to host memory or NVMe, 8-bit AdamW there and split by a ratio, and
// the parameters offloaded to host memory or NVMe (stage 3).
// Suites Cuda*: label "gpu"; skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/staged_communicator.h"
#include "comm/thread_communicator.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/pinned_host_device.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "runtime/model/gpt2.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {
namespace {

constexpr int kB = 2, kT = 32, kSteps = 4, kMicroBatches = 2;

ModelConfig TinyConfig() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 64;
  m.vocab_size = 101;
  m.seq_len = kT;
  return m;
}

std::vector<int32_t> Tokens(int step, int micro, int salt) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * step + 10 * micro + salt));
  std::uniform_int_distribution<int32_t> dist(0, TinyConfig().vocab_size - 1);
  std::vector<int32_t> out(kB * kT);
  for (int32_t& t : out) t = dist(rng);
  return out;
}

struct Job {
  std::string name;
  int world = 1;
  int stage = 0;
  DType storage = DType::kFloat32;
  Placement optimizer = Placement::kDevice;
  Placement params = Placement::kDevice;
  CheckpointPolicy checkpointing = CheckpointPolicy::kNone;
  bool adamw8bit = false;  // 8-bit moments (every unit)
  double ratio = 1.0;      // offload_optimizer.ratio
};

struct Outcome {
  Status status;
  std::vector<float> losses;  // [step * kMicroBatches + micro]
  std::vector<float> params;  // gathered after the last step
};

// Every rank takes micro-batches rank, rank + world, ... of each step's kMicroBatches.
Outcome Train(const Job& job, bool gpu) {
  Outcome outcome;
  outcome.losses.assign(kSteps * kMicroBatches, 0.0f);
  auto group = comm::ThreadGroup::Create(job.world, 60.0);
  if (!group.ok()) return {group.status(), {}, {}};
  std::vector<Status> statuses(static_cast<size_t>(job.world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < job.world; ++r) {
    ranks.emplace_back([&, r] {
      Status& status = statuses[static_cast<size_t>(r)];
      MemoryTracker tracker;
      CpuDevice cpu_device(Place::kDevice, &tracker);
      std::unique_ptr<kernels::Backend> backend;
      std::unique_ptr<Device> staging;
      if (gpu) {
        auto cuda = kernels::CudaBackend::Create(0, &tracker);
        auto pinned = PinnedHostDevice::Open(&tracker);
        if (!cuda.ok() || !pinned.ok()) {
          status = cuda.ok() ? pinned.status() : cuda.status();
          return;
        }
        backend = std::move(cuda).value();
        staging = std::move(pinned).value();
      } else {
        backend = std::make_unique<kernels::CpuBackend>(&cpu_device);
        staging = std::make_unique<CpuDevice>(Place::kHostPinned, &tracker);
      }
      comm::StagedCommunicator comm(&(*group)->comm(r), backend.get(), staging.get());
      const ModelConfig config = TinyConfig();
      zero::ZeroOptions options;
      options.stage = job.stage;
      options.compute_type = job.storage;
      options.offload_optimizer.place = job.optimizer;
      options.offload_optimizer.ratio = job.ratio;
      options.adam.eight_bit = job.adamw8bit;
      options.adam.min_8bit_size = 0;
      options.offload_optimizer.sub_group_size = 20000;  // several sub-groups on NVMe
      options.offload_optimizer.nvme_file = ::testing::TempDir() + "/cuda_engine_" + job.name +
                                            "_" + std::to_string(gpu) + "_rank" +
                                            std::to_string(r) + ".swp";
      options.offload_param.place = job.params;
      options.offload_param.max_in_cpu = 0;  // kNvme: every shard on the file
      options.offload_param.nvme_file = ::testing::TempDir() + "/cuda_engine_" + job.name +
                                        "_params_" + std::to_string(gpu) + "_rank" +
                                        std::to_string(r) + ".swp";
      options.stage3_param_persistence_threshold = 0;  // every unit partitioned in stage 3
      auto engine =
          zero::ZeroEngine::Create(ParamLayout::For(config).Units(), options, &comm, backend.get());
      if (!engine.ok()) {
        status = engine.status();
        return;
      }
      ActivationCheckpointingConfig checkpointing;
      checkpointing.policy = job.checkpointing;
      auto model = Gpt2Model::Create(config, kB, kT, backend.get(), engine->get(), job.storage,
                                     checkpointing);
      if (!model.ok()) {
        status = model.status();
        return;
      }
      zero::ZeroEngine& e = **engine;
      Gpt2Model& m = **model;
      status =
          e.Initialize([&](int unit, float* out) { InitializeGpt2Unit(config, unit, 7, out); });
      const int per_rank = kMicroBatches / job.world;
      for (int step = 0; step < kSteps && status.ok(); ++step) {
        status = e.ZeroGrads();
        for (int i = 0; i < per_rank && status.ok(); ++i) {
          const int micro = r + i * job.world;
          const std::vector<int32_t> inputs = Tokens(step, micro, 1);
          const std::vector<int32_t> targets = Tokens(step, micro, 2);
          const StatusOr<float> loss =
              m.Forward(inputs.data(), targets.data(), kB, kT, 1.0f / per_rank);
          status = loss.status();
          if (status.ok()) status = m.Backward();
          if (status.ok()) status = e.status();
          if (!status.ok()) break;
          outcome.losses[static_cast<size_t>(step * kMicroBatches + micro)] = *loss;
        }
        if (!status.ok()) break;
        auto result = e.Step(1e-3f, 1.0f, 1.0f);
        if (!result.ok()) status = result.status();
      }
      if (!status.ok()) return;
      auto params = e.GatherFullParams();
      if (!params.ok()) {
        status = params.status();
        return;
      }
      if (r == 0) outcome.params = std::move(params).value();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const Status& s : statuses) {
    if (!s.ok()) {
      outcome.status = s;
      break;
    }
  }
  return outcome;
}

struct Spread {
  double losses = 0;   // the largest relative difference of a micro-batch's loss
  double weights = 0;  // the relative L2 distance of the final weights
};

Spread Measure(const Outcome& got, const Outcome& want) {
  Spread spread;
  for (size_t i = 0; i < want.losses.size() && i < got.losses.size(); ++i) {
    spread.losses = std::max(spread.losses, std::fabs(double(got.losses[i]) - want.losses[i]) /
                                                std::fabs(double(want.losses[i])));
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.params.size() && i < got.params.size(); ++i) {
    diff += (double(got.params[i]) - want.params[i]) * (double(got.params[i]) - want.params[i]);
    norm += double(want.params[i]) * want.params[i];
  }
  spread.weights = std::sqrt(diff / norm);
  return spread;
}

void ExpectClose(const Outcome& got, const Outcome& want, double tolerance) {
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  ASSERT_TRUE(want.status.ok()) << want.status.ToString();
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], tolerance * std::fabs(want.losses[i]))
        << "step " << i / kMicroBatches << ", micro-batch " << i % kMicroBatches;
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  const Spread spread = Measure(got, want);
  EXPECT_LT(spread.weights, tolerance) << "the weights after " << kSteps << " steps";
  std::printf("  losses within %.2e of the CPU's, weights within %.2e (tolerance %.0e)\n",
              spread.losses, spread.weights, tolerance);
}

// The 16-bit tolerance. Two correct bf16 runs differ where their sums are added in another order
// and a value near a rounding boundary rounds the other way, and the difference grows with the
// steps; each is a bf16 rounding of the fp32 run, so a GPU run is held to about as far from the
// CPU's bf16 run as bf16 itself is from fp32 (measured on the CPU below: 1.95e-3 of the weights,
// 1.1e-4 of the losses; the H100 run of stage2_bf16 was 1.94e-3 and 4.7e-5 from the CPU's). A
// step not taken, or one applied twice, moves the weights by about 7% of their norm (four steps of
// AdamW at lr 1e-3) and fails it.
constexpr double kSixteenBitTolerance = 5e-3;

class CudaEngine : public ::testing::TestWithParam<Job> {};

TEST_P(CudaEngine, FollowsTheCpuBackend) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA GPU visible (driver " << CudaDriverVersionString() << ")";
  }
  const Job& job = GetParam();
  Job reference = job;
  reference.world = 1;  // the oracle: one CPU rank
  const Outcome want = Train(reference, /*gpu=*/false);
  const Outcome got = Train(job, /*gpu=*/true);
  // fp32: only the order of additions differs.
  ExpectClose(got, want, job.storage == DType::kFloat32 ? 1e-4 : kSixteenBitTolerance);
}

// The measurement behind kSixteenBitTolerance, on the CPU alone: bf16 against fp32, the same job.
TEST(CpuRegime, Bf16StaysWithinTheSixteenBitToleranceOfFp32) {
  Job fp32;
  fp32.stage = 2;
  Job bf16 = fp32;
  bf16.storage = DType::kBFloat16;
  const Outcome want = Train(fp32, /*gpu=*/false);
  const Outcome got = Train(bf16, /*gpu=*/false);
  ASSERT_TRUE(want.status.ok()) << want.status.ToString();
  ASSERT_TRUE(got.status.ok()) << got.status.ToString();
  const Spread spread = Measure(got, want);
  std::printf("  bf16 against fp32 on the CPU: losses within %.2e, weights within %.2e\n",
              spread.losses, spread.weights);
  EXPECT_LT(spread.weights, kSixteenBitTolerance);
  EXPECT_LT(spread.losses, kSixteenBitTolerance);
  // And bf16 is not fp32 by another name: the rounding shows.
  EXPECT_GT(spread.weights, 1e-4);
}

Job Make(std::string name, int world, int stage) {
  Job job;
  job.name = std::move(name);
  job.world = world;
  job.stage = stage;
  return job;
}

std::vector<Job> Jobs() {
  std::vector<Job> jobs = {Make("stage0", 1, 0), Make("stage1", 1, 1), Make("stage2", 1, 2),
                           Make("stage3", 1, 3)};
  Job checkpointed = Make("stage3_full_checkpointing", 1, 3);
  checkpointed.checkpointing = CheckpointPolicy::kFull;
  jobs.push_back(checkpointed);
  Job bf16 = Make("stage2_bf16", 1, 2);
  bf16.storage = DType::kBFloat16;
  jobs.push_back(bf16);
  // Two ranks on the one GPU, staged through pinned host memory, against one CPU rank.
  jobs.push_back(Make("two_ranks_stage2", 2, 2));
  jobs.push_back(Make("two_ranks_stage3", 2, 3));
  // ZeRO-Offload: the optimizer states in host memory or on NVMe, updated by the CPU's AdamW
  // from gradients brought down, the new weights sent up.
  Job host = Make("stage2_optimizer_on_host", 1, 2);
  host.optimizer = Placement::kHost;
  jobs.push_back(host);
  Job host_bf16 = Make("two_ranks_stage2_bf16_optimizer_on_host", 2, 2);
  host_bf16.optimizer = Placement::kHost;
  host_bf16.storage = DType::kBFloat16;
  jobs.push_back(host_bf16);
  Job nvme = Make("stage3_optimizer_on_nvme", 1, 3);
  nvme.optimizer = Placement::kNvme;
  jobs.push_back(nvme);
  // 8-bit AdamW: on the device (the CUDA kernel), split by a ratio (the device part on the GPU,
  // the host part by the CPU's kernel) and on NVMe (sub-groups cut on block boundaries).
  Job eight = Make("stage2_adamw8bit", 1, 2);
  eight.adamw8bit = true;
  jobs.push_back(eight);
  // (One rank: two would quantize other blocks than the one-rank oracle.)
  Job eight_split = Make("stage2_bf16_adamw8bit_half_offloaded", 1, 2);
  eight_split.adamw8bit = true;
  eight_split.storage = DType::kBFloat16;
  eight_split.optimizer = Placement::kHost;
  eight_split.ratio = 0.5;
  jobs.push_back(eight_split);
  // ZeRO-Infinity: the parameter shards in pinned host memory or on NVMe, each brought up
  // through the device's staging for its gather and brought down after its update.
  Job params = Make("stage3_params_on_host", 1, 3);
  params.params = Placement::kHost;
  jobs.push_back(params);
  Job infinity = Make("two_ranks_stage3_bf16_params_and_optimizer_on_nvme", 2, 3);
  infinity.params = Placement::kNvme;
  infinity.optimizer = Placement::kNvme;
  infinity.storage = DType::kBFloat16;
  jobs.push_back(infinity);
  Job eight_nvme = Make("stage3_adamw8bit_on_nvme", 1, 3);
  eight_nvme.adamw8bit = true;
  eight_nvme.optimizer = Placement::kNvme;
  jobs.push_back(eight_nvme);
  return jobs;
}

INSTANTIATE_TEST_SUITE_P(Jobs, CudaEngine, ::testing::ValuesIn(Jobs()),
                         [](const ::testing::TestParamInfo<Job>& info) { return info.param.name; });

}  // namespace
}  // namespace hoist::runtime
