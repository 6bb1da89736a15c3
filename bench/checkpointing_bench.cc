// Activation memory against step time, in one run on this machine:
//   1. a forward+backward of one GPT-2 micro-batch under each activation checkpointing policy,
//      timed interleaved (rounds of every policy in turn, median per policy) and divided by the
//      time of no checkpointing measured in the same rounds, beside the activation bytes each
//      policy holds and saves (Gpt2Model::ActivationFootprint, which equals the tracker's
//      bytes: tests/runtime/gpt2_checkpointing_test.cc);
//   2. activation bytes per token against the sequence length T for direct and tiled attention
//      (the allocation of a model for (B, T)): direct grows with T, tiled stays flat;
//   3. the memory estimate's error over a matrix of jobs, each trained for a few steps on
//      threads-as-ranks: max and median of |predicted - measured| / measured per place.
//
// Usage: checkpointing_bench [--layers L] [--embd C] [--heads NH] [--seq T] [--batch B]
//                            [--rounds R] [--skip-matrix]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "comm/thread_communicator.h"
#include "core/random.h"
#include "runtime/config/config.h"
#include "runtime/memory/memory_estimate.h"
#include "runtime/model/gpt2.h"
#include "runtime/train/trainer.h"

namespace hoist::bench {
namespace {

using runtime::ActivationCheckpointingConfig;
using runtime::CheckpointPolicy;
using runtime::Gpt2Model;
using runtime::ModelConfig;

struct PolicyCase {
  const char* name;
  ActivationCheckpointingConfig ac;
};

std::vector<PolicyCase> Policies() {
  auto make = [](CheckpointPolicy policy, int k = 2) {
    ActivationCheckpointingConfig ac;
    ac.policy = policy;
    ac.every_k = k;
    return ac;
  };
  return {{"none", make(CheckpointPolicy::kNone)},
          {"selective", make(CheckpointPolicy::kSelective)},
          {"every_k (k=2)", make(CheckpointPolicy::kEveryK, 2)},
          {"full", make(CheckpointPolicy::kFull)}};
}

void StepTimes(const ModelConfig& m, int B, int rounds) {
  const int T = m.seq_len;
  std::printf(
      "1. forward+backward of one micro-batch: GPT-2 %d layers, %d wide, %d heads, "
      "B=%d, T=%d, fp32, %s attention, %d rounds\n",
      m.n_layer, m.n_embd, m.n_head, B, T,
      m.attention == runtime::AttentionKind::kTiled ? "tiled" : "direct", rounds);
  const std::vector<PolicyCase> policies = Policies();
  CpuDevice device;
  std::vector<std::unique_ptr<Gpt2Model>> models;
  for (const PolicyCase& p : policies) {
    models.push_back(
        std::move(Gpt2Model::Create(m, B, T, &device, nullptr, DType::kFloat32, p.ac)).value());
    HOIST_CHECK_OK(models.back()->InitializeWeights(1));
  }
  Rng rng(3);
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t(rng.NextU64() % uint64_t(m.vocab_size));
    targets[i] = int32_t(rng.NextU64() % uint64_t(m.vocab_size));
  }
  // Rounds of every policy in turn, so that the machine's drift hits them alike.
  std::vector<std::vector<double>> times(policies.size());
  for (int round = -1; round < rounds; ++round) {
    for (size_t i = 0; i < policies.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      models[i]->Forward(inputs.data(), targets.data(), B, T, 1.0f).value();
      HOIST_CHECK_OK(models[i]->Backward());
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (round >= 0) times[i].push_back(s);  // round -1 warms up
    }
  }
  std::vector<double> median;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    median.push_back(t[t.size() / 2]);
  }
  const int64_t none_bytes =
      Gpt2Model::ActivationFootprint(m, B, T, DType::kFloat32, policies[0].ac).device;
  std::printf("   %-14s %10s %9s %12s %10s %12s\n", "policy", "step ms", "vs none", "activations",
              "saved", "recompute ms");
  for (size_t i = 0; i < policies.size(); ++i) {
    const int64_t bytes =
        Gpt2Model::ActivationFootprint(m, B, T, DType::kFloat32, policies[i].ac).device;
    const double recompute_ms =
        1e3 * models[i]->recompute_seconds() / double(rounds + 1);  // per step, all rounds
    std::printf("   %-14s %10.2f %8.3fx %12s %9.1f%% %12.2f\n", policies[i].name, 1e3 * median[i],
                median[i] / median[0], FormatBytes(bytes).c_str(),
                100.0 * double(none_bytes - bytes) / double(none_bytes), recompute_ms);
  }
}

void BytesPerToken(ModelConfig m, int B) {
  std::printf(
      "\n2. activation bytes per token against T (GPT-2 %d layers, %d wide, %d heads, "
      "B=%d, fp32, no checkpointing)\n",
      m.n_layer, m.n_embd, m.n_head, B);
  std::printf("   %6s %16s %16s %10s\n", "T", "direct B/token", "tiled B/token", "direct/tiled");
  for (int T : {128, 256, 512, 1024, 2048, 4096}) {
    m.seq_len = T;
    m.attention = runtime::AttentionKind::kDirect;
    const int64_t direct = Gpt2Model::ActivationFootprint(m, B, T).device;
    m.attention = runtime::AttentionKind::kTiled;
    const int64_t tiled = Gpt2Model::ActivationFootprint(m, B, T).device;
    const double tokens = double(B) * T;
    std::printf("   %6d %16.0f %16.0f %9.2fx\n", T, direct / tokens, tiled / tokens,
                double(direct) / double(tiled));
  }
}

// One job of the estimate matrix, trained on `world` threads-as-ranks with their own trackers.
std::array<int64_t, kNumPlaces> MeasuredPeaks(const runtime::Config& config, int world) {
  auto group = std::move(comm::ThreadGroup::Create(world, 120.0)).value();
  std::vector<MemoryTracker> trackers(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  std::vector<Status> statuses(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      runtime::TrainerOptions options;
      options.comm = &group->comm(r);
      options.tracker = &trackers[static_cast<size_t>(r)];
      auto trainer = runtime::Trainer::Create(config, options);
      statuses[size_t(r)] = trainer.ok() ? (*trainer)->Run() : trainer.status();
    });
  }
  for (auto& t : threads) t.join();
  std::array<int64_t, kNumPlaces> peaks{};
  for (int r = 0; r < world; ++r) {
    if (!statuses[size_t(r)].ok()) {
      std::fprintf(stderr, "job failed: %s\n", statuses[size_t(r)].ToString().c_str());
      std::exit(1);
    }
    const MemorySnapshot s = trackers[size_t(r)].Snapshot();
    for (int p = 0; p < kNumPlaces; ++p) peaks[p] = std::max(peaks[p], s.peak_total[p]);
  }
  return peaks;
}

void EstimateMatrix() {
  std::printf("\n3. estimate against measurement (GPT-2 6 layers, 128 wide, 3 steps per job)\n");
  std::vector<double> errors;
  std::printf("   %-58s %12s %12s %8s\n", "job", "predicted", "measured", "error");
  int jobs = 0;
  for (int world : {1, 2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (const char* policy : {"none", "selective", "full"}) {
        const bool bf16 = (stage + world) % 2 == 0;
        const int micro = world == 4 ? 1 : 2;
        std::vector<std::string> overrides = {
            "model.n_layer=6",
            "model.n_head=4",
            "model.n_embd=128",
            "model.seq_len=64",
            "train_batch_size=" + std::to_string(4 * world * micro),
            "train_micro_batch_size_per_gpu=" + std::to_string(micro),
            "gradient_accumulation_steps=null",
            "zero_optimization.stage=" + std::to_string(stage),
            std::string("activation_checkpointing.policy=") + policy,
            std::string("bf16.enabled=") + (bf16 ? "true" : "false")};
        for (std::string& quiet : QuietRunOverrides(3)) overrides.push_back(std::move(quiet));
        StatusOr<runtime::Config> config = runtime::LoadConfig("", overrides, world);
        if (!config.ok()) {
          std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
          std::exit(1);
        }
        const auto estimate = runtime::EstimateMemory(*config, world);
        if (!estimate.ok()) {
          std::fprintf(stderr, "%s\n", estimate.status().ToString().c_str());
          std::exit(1);
        }
        const auto measured = MeasuredPeaks(*config, world);
        const int64_t want = measured[int(Place::kDevice)];
        const int64_t got = estimate->PeakTotal(Place::kDevice);
        const double error = std::abs(double(got - want)) / double(want);
        errors.push_back(error);
        char job[96];
        std::snprintf(job, sizeof(job), "%d rank(s), stage %d, %s, %s, micro-batch %d", world,
                      stage, bf16 ? "bf16" : "fp32", policy, micro);
        std::printf("   %-58s %12s %12s %7.3f%%\n", job, FormatBytes(got).c_str(),
                    FormatBytes(want).c_str(), 100 * error);
        ++jobs;
      }
    }
  }
  std::sort(errors.begin(), errors.end());
  std::printf("   device peak error over %d jobs: median %.3f%%, max %.3f%%\n", jobs,
              100 * errors[errors.size() / 2], 100 * errors.back());
}

}  // namespace
}  // namespace hoist::bench

int main(int argc, char** argv) {
  using namespace hoist;
  runtime::ModelConfig m;
  m.n_layer = 6;
  m.n_embd = 256;
  m.n_head = 8;
  m.seq_len = 256;
  m.vocab_size = 8192;
  int B = 4, rounds = 7;
  bool skip_matrix = false;
  bench::ParseFlags(
      argc, argv,
      {{"--layers", [&](const std::string& v) { m.n_layer = std::stoi(v); }},
       {"--embd", [&](const std::string& v) { m.n_embd = std::stoi(v); }},
       {"--heads", [&](const std::string& v) { m.n_head = std::stoi(v); }},
       {"--seq", [&](const std::string& v) { m.seq_len = std::stoi(v); }},
       {"--batch", [&](const std::string& v) { B = std::stoi(v); }},
       {"--rounds", [&](const std::string& v) { rounds = std::stoi(v); }},
       {"--skip-matrix", nullptr, &skip_matrix}},
      "checkpointing_bench [--layers L] [--embd C] [--heads NH] [--seq T] [--batch B] "
      "[--rounds R] [--skip-matrix]");
  bench::StepTimes(m, B, rounds);
  bench::BytesPerToken(m, 1);
  if (!skip_matrix) bench::EstimateMatrix();
  return 0;
}
