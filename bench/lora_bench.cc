// Fine-tuning in little memory: how large a Llama this machine can train in full, with LoRA on a
// bf16 base, and with LoRA on a 4-bit (NF4) base, and what a step of each costs.
//
// Part 1 (estimate): for Llama shapes of published sizes, hoist's memory estimate of each mode
// (bf16 mixed precision, AdamW, ZeRO stage 0 on one rank, micro-batch 1 x --seq tokens, full
// activation checkpointing; LoRA r 16 on every linear layer of the blocks) against the memory
// this machine has available (MemAvailable, or --budget), and the largest shape that fits each.
// Part 2 (measured): one shape (--model; "largest": each mode's largest that fits) trained for
// --steps steps in each mode, --rounds times
// in turn (the machine is shared: the modes alternate so that noise falls on all of them), with
// the median seconds per step and the tracker's peak. Random weights: the speed and the memory do
// not depend on them.
//
// With --device cuda (a build with CUDA) both parts are the GPU's: the estimate's device peak
// against the GPU's memory (or --budget), and the steps computed on the GPU.
//
//   lora_bench [--model NAME] [--modes full,lora,nf4] [--steps N] [--rounds R] [--seq T]
//              [--budget BYTES] [--device cpu|cuda] [--estimate-only]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef HOIST_LORA_BENCH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_device.h"
#include "runtime/cuda/cuda_accelerator.h"
#endif

#include "bench/bench_util.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "runtime/config/config.h"
#include "runtime/memory/memory_estimate.h"
#include "runtime/train/trainer.h"

namespace {

using hoist::runtime::Config;

struct Shape {
  const char* name;
  int layers, embd, heads, kv_heads, intermediate, vocab;
  bool tied;
};

// Published Llama shapes (config.json of each), smallest first.
const Shape kShapes[] = {
    {"llama-110m", 12, 768, 12, 12, 2048, 32000, false},  // a small Llama-2-shaped model
    {"tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, false},
    {"llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, true},
    {"llama-3.2-3b", 28, 3072, 24, 8, 8192, 128256, true},
    {"llama-2-7b", 32, 4096, 32, 32, 11008, 32000, false},
    {"llama-3-8b", 32, 4096, 32, 8, 14336, 128256, false},
    {"llama-2-13b", 40, 5120, 40, 40, 13824, 32000, false},
    {"llama-30b", 60, 6656, 52, 52, 17920, 32000, false},     // LLaMA 1
    {"codellama-34b", 48, 8192, 64, 8, 22016, 32000, false},  // Code Llama 34B
    {"llama-2-70b", 80, 8192, 64, 8, 28672, 32000, false},
};

enum Mode { kFull, kLora, kLoraNf4, kNumModes };
const char* const kModeNames[] = {"full fine-tune", "LoRA, bf16 base", "LoRA, NF4 base"};

struct Flags {
  std::string model = "llama-110m";
  std::string modes = "full,lora,nf4";
  int steps = 3;
  int rounds = 2;
  int seq = 128;
  int64_t budget = 0;
  bool estimate_only = false;
  std::string device = "cpu";
};

hoist::StatusOr<Config> JobFor(const Shape& s, Mode mode, int seq, int steps) {
  std::vector<std::string> o = {
      "model.model_type=\"llama\"",
      "model.n_layer=" + std::to_string(s.layers),
      "model.n_embd=" + std::to_string(s.embd),
      "model.n_head=" + std::to_string(s.heads),
      "model.n_kv_head=" + std::to_string(s.kv_heads),
      "model.intermediate_size=" + std::to_string(s.intermediate),
      "model.vocab_size=" + std::to_string(s.vocab),
      std::string("model.tie_word_embeddings=") + (s.tied ? "true" : "false"),
      "model.seq_len=" + std::to_string(seq),
      "train_batch_size=1",
      "train_micro_batch_size_per_gpu=1",
      "train.steps=" + std::to_string(steps),
      "train.eval_interval=0",
      "data.val=\"\"",
      "monitor.jsonl.path=\"\"",
      "steps_per_print=0",
      "checkpoint.dir=\"\"",
      "checkpoint.interval_steps=0",
      "scheduler.params.total_num_steps=" + std::to_string(std::max(steps, 5)),
      "scheduler.params.warmup_num_steps=1",
      "bf16.enabled=true",
      "activation_checkpointing.policy=\"full\"",
  };
  if (mode != kFull) {
    o.push_back("lora.r=16");
    o.push_back("lora.alpha=32");
    o.push_back("lora.target_modules=\"all-linear\"");
    if (mode == kLoraNf4) o.push_back("lora.base_quantization=\"nf4\"");
  }
  return hoist::runtime::LoadConfig("", o, 1);
}

double Gib(int64_t bytes) { return double(bytes) / double(int64_t{1} << 30); }

// What the estimate says a job holds at its peak where the budget applies: on the CPU all places
// of host memory together (the device is host memory too), on the GPU its memory.
int64_t BudgetPeak(const hoist::runtime::MemoryEstimate& e, bool gpu) {
  using hoist::Place;
  if (gpu) return e.PeakTotal(Place::kDevice);
  return e.PeakTotal(Place::kDevice) + e.PeakTotal(Place::kHost) + e.PeakTotal(Place::kHostPinned);
}

// GPU 0's free memory once this process holds a CUDA context (the context, cuBLASLt's workspace
// and the caching allocator's slack are outside the estimate: the first is left out here, the
// others are a few percent); 0 without a GPU or a CUDA build.
int64_t GpuMemory() {
#ifdef HOIST_LORA_BENCH_CUDA
  hoist::MemoryTracker tracker;
  auto device = hoist::CudaDevice::Open(0, &tracker);
  if (device.ok()) return (*device)->FreeBytes().value_or(0);
#endif
  return 0;
}

// A step's GPU work may still be queued when Step returns: wait for it, so that each timed step
// holds its own work.
bool SyncGpu(bool gpu) {
#ifdef HOIST_LORA_BENCH_CUDA
  if (gpu) return cudaDeviceSynchronize() == cudaSuccess;
#endif
  (void)gpu;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  hoist::bench::ParseFlags(
      argc, argv,
      {{"--model", [&](const std::string& v) { flags.model = v; }},
       {"--modes", [&](const std::string& v) { flags.modes = v; }},
       {"--steps", [&](const std::string& v) { flags.steps = std::atoi(v.c_str()); }},
       {"--rounds", [&](const std::string& v) { flags.rounds = std::atoi(v.c_str()); }},
       {"--seq", [&](const std::string& v) { flags.seq = std::atoi(v.c_str()); }},
       {"--budget", [&](const std::string& v) { flags.budget = std::atoll(v.c_str()); }},
       {"--device", [&](const std::string& v) { flags.device = v; }},
       {"--estimate-only", nullptr, &flags.estimate_only}},
      "lora_bench [--model NAME] [--modes full,lora,nf4] [--steps N] [--rounds R] [--seq T] "
      "[--budget BYTES] [--device cpu|cuda] [--estimate-only]");
  if (flags.steps < 1 || flags.rounds < 1 || flags.seq < 1) {
    std::fprintf(stderr, "need --steps, --rounds and --seq >= 1\n");
    return 2;
  }
  if (flags.device != "cpu" && flags.device != "cuda") {
    std::fprintf(stderr, "--device: %s is neither cpu nor cuda\n", flags.device.c_str());
    return 2;
  }
  const bool gpu = flags.device == "cuda";
#ifndef HOIST_LORA_BENCH_CUDA
  if (gpu) {
    std::printf("lora_bench: --device cuda needs a build with CUDA; nothing measured\n");
    return 0;
  }
#endif
  const int64_t measured_budget = gpu ? GpuMemory() : hoist::HostMemAvailableBytes().value_or(0);
  if (gpu && flags.budget <= 0 && measured_budget == 0) {
    std::printf("lora_bench: no GPU visible and no --budget; nothing measured\n");
    return 0;
  }
  const int64_t budget = flags.budget > 0 ? flags.budget : measured_budget;
  std::printf(
      "lora_bench: micro-batch 1 x %d tokens, bf16, full activation checkpointing, "
      "LoRA r 16 on every block linear layer, on the %s; memory budget %.1f GiB%s\n\n",
      flags.seq, gpu ? "GPU" : "CPU", Gib(budget),
      flags.budget > 0 ? "" : (gpu ? " (the GPU's free memory)" : " (MemAvailable)"));
  const auto device_kind = gpu ? hoist::DeviceKind::kCuda : hoist::DeviceKind::kCpu;

  // Part 1: the estimate of every shape and mode.
  std::printf("%-16s %10s %18s %18s %18s\n", "model", "params", kModeNames[0], kModeNames[1],
              kModeNames[2]);
  const Shape* largest[kNumModes] = {};
  for (const Shape& shape : kShapes) {
    std::printf("%-16s", shape.name);
    int64_t params = 0;
    std::string cells;
    for (int m = 0; m < kNumModes; ++m) {
      auto config = JobFor(shape, Mode(m), flags.seq, 1);
      if (!config.ok()) {
        std::fprintf(stderr, "\n%s: %s\n", shape.name, config.status().ToString().c_str());
        return 1;
      }
      auto estimate = hoist::runtime::EstimateMemory(*config, 1, device_kind);
      if (!estimate.ok()) {
        std::fprintf(stderr, "\n%s: %s\n", shape.name, estimate.status().ToString().c_str());
        return 1;
      }
      params = estimate->parameters;
      const int64_t peak = BudgetPeak(*estimate, gpu);
      const bool fits = peak <= budget;
      if (fits) largest[m] = &shape;
      char cell[64];
      std::snprintf(cell, sizeof(cell), " %12.1f GiB %s", Gib(peak), fits ? "ok" : "--");
      cells += cell;
    }
    std::printf(" %9.2fB%s\n", double(params) / 1e9, cells.c_str());
  }
  std::printf("\nlargest that fits:");
  for (int m = 0; m < kNumModes; ++m) {
    std::printf(" %s: %s;", kModeNames[m], largest[m] != nullptr ? largest[m]->name : "none");
  }
  std::printf("\n");
  if (flags.estimate_only) return 0;

  // Part 2: measured steps of one shape in each mode (or each mode's largest), the modes in turn.
  const bool each_largest = flags.model == "largest";
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes) {
    if (flags.model == s.name) shape = &s;
  }
  if (shape == nullptr && !each_largest) {
    std::fprintf(stderr, "lora_bench: no shape named %s\n", flags.model.c_str());
    return 2;
  }
  std::printf("\nmeasured: %s, %d steps after one warm-up step, %d rounds\n",
              each_largest ? "each mode's largest" : shape->name, flags.steps, flags.rounds);
  const char* const kModeFlags[] = {"full", "lora", "nf4"};
  bool run_mode[kNumModes] = {};
  for (int m = 0; m < kNumModes; ++m) {
    const std::string list = "," + flags.modes + ",";
    run_mode[m] = list.find("," + std::string(kModeFlags[m]) + ",") != std::string::npos;
    if (each_largest && largest[m] == nullptr) run_mode[m] = false;
  }
  std::vector<double> seconds[kNumModes];
  int64_t peak[kNumModes] = {};
  using Clock = std::chrono::steady_clock;
  for (int round = 0; round < flags.rounds; ++round) {
    for (int m = 0; m < kNumModes; ++m) {
      if (!run_mode[m]) continue;
      const Shape& measured = each_largest ? *largest[m] : *shape;
      auto config = JobFor(measured, Mode(m), flags.seq, flags.steps + 1);
      hoist::MemoryTracker tracker;
      hoist::runtime::TrainerOptions options;
      options.tracker = &tracker;
#ifdef HOIST_LORA_BENCH_CUDA
      if (gpu) options.accelerator = hoist::runtime::CudaAccelerator({});
#endif
      const auto created = Clock::now();
      auto trainer = hoist::runtime::Trainer::Create(*config, options);
      if (!trainer.ok()) {
        std::fprintf(stderr, "%s: %s\n", kModeNames[m], trainer.status().ToString().c_str());
        return 1;
      }
      std::printf("  %s, %s: set up in %.1f s\n", kModeNames[m], measured.name,
                  std::chrono::duration<double>(Clock::now() - created).count());
      std::fflush(stdout);
      for (int step = 0; step <= flags.steps; ++step) {
        const auto start = Clock::now();
        auto record = (*trainer)->Step();
        if (record.ok() && !SyncGpu(gpu)) {
          record = hoist::InternalError("the GPU failed during the step");
        }
        if (!record.ok()) {
          std::fprintf(stderr, "%s: %s\n", kModeNames[m], record.status().ToString().c_str());
          return 1;
        }
        if (step > 0) {
          seconds[m].push_back(std::chrono::duration<double>(Clock::now() - start).count());
        }
      }
      const hoist::MemorySnapshot snapshot = tracker.Snapshot();
      peak[m] = snapshot.peak_total[int(hoist::Place::kDevice)];
      if (!gpu) {
        peak[m] += snapshot.peak_total[int(hoist::Place::kHost)] +
                   snapshot.peak_total[int(hoist::Place::kHostPinned)];
      }
      // Each run as it ends, so that a run cut short by a time limit still reports the others.
      std::printf("  %s, %s: %.3f s the last step, peak %.2f GiB tracked\n", kModeNames[m],
                  measured.name, seconds[m].back(), Gib(peak[m]));
      std::fflush(stdout);
    }
  }
  if (each_largest) {
    // Different models: tokens per second, not a ratio.
    for (int m = 0; m < kNumModes; ++m) {
      if (!run_mode[m]) continue;
      std::vector<double> s = seconds[m];
      std::sort(s.begin(), s.end());
      const double median = s[s.size() / 2];
      std::printf("  %-16s %-16s %9.3f s/step, %8.0f tokens/s, peak %.2f GiB tracked%s\n",
                  kModeNames[m], largest[m]->name, median, flags.seq / median, Gib(peak[m]),
                  gpu ? " on the GPU" : "");
    }
    return 0;
  }
  double full = 0;
  for (int m = 0; m < kNumModes; ++m) {
    if (!run_mode[m]) continue;
    std::vector<double> s = seconds[m];
    std::sort(s.begin(), s.end());
    const double median = s[s.size() / 2];
    if (m == kFull) full = median;
    std::printf("  %-16s %9.3f s/step", kModeNames[m], median);
    if (full > 0) std::printf(" (%.2fx the full fine-tune's)", median / full);
    std::printf(", peak %.2f GiB tracked%s\n", Gib(peak[m]), gpu ? " on the GPU" : "");
  }
  return 0;
}
