// Training-step time with the optimizer states offloaded, over the same step without offload,
// measured in the same run (the machines are shared and noisy: only ratios mean something).
//
// A GPT-2-shaped model that fits trains a few steps under each placement of its optimizer
// states: on the device (the anchor), in pinned host memory, and on NVMe with buffer_count 3
// (reads and writes overlapped with the update) and 1 (nothing overlapped). The share of the
// NVMe I/O hidden behind the update is 1 - wait(3) / wait(1), from the time the step spent
// blocked on the swapper in each. Stage 3 with the parameters on NVMe too is measured beside them,
// and 8-bit AdamW on NVMe beside 8-bit AdamW on the device, with the bytes it moves against the
// 32-bit optimizer's.
// On a CPU build the "device" is host memory, so the cpu figure shows the cost of the separate
// master copy and the swapper figures the cost of the disk; on an accelerator the first also
// carries the host link.
//
//   offload_step_bench [--dir DIR] [--steps N] [--layers L] [--embd E] [--sub-group ELEMENTS]
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/logging.h"
#include "core/memory_tracker.h"
#include "runtime/config/config.h"
#include "runtime/train/trainer.h"

namespace {

using hoist::runtime::Config;
using hoist::runtime::Trainer;
using hoist::runtime::TrainerOptions;

struct Flags {
  std::string dir;
  int steps = 4;
  int layers = 4;
  int embd = 512;
  int64_t sub_group = 4000000;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  auto to_int = [](int* out) {
    return [out](const std::string& v) { *out = std::atoi(v.c_str()); };
  };
  hoist::bench::ParseFlags(
      argc, argv,
      {{"--dir", [&](const std::string& v) { flags.dir = v; }},
       {"--steps", to_int(&flags.steps)},
       {"--layers", to_int(&flags.layers)},
       {"--embd", to_int(&flags.embd)},
       {"--sub-group", [&](const std::string& v) { flags.sub_group = std::atoll(v.c_str()); }}},
      "offload_step_bench [--dir DIR] [--steps N] [--layers L] [--embd E] [--sub-group ELEMENTS]");
  if (flags.steps < 2 || flags.layers < 1 || flags.embd < 64 || flags.sub_group < 1) {
    std::fprintf(stderr, "need --steps >= 2, --layers >= 1, --embd >= 64, --sub-group >= 1\n");
    std::exit(2);
  }
  return flags;
}

struct Result {
  double step_s = 0;       // median over the timed steps
  double nvme_wait_s = 0;  // per step
  double update_s = 0;     // per step: the CPU AdamW over offloaded states
  int64_t nvme_bytes = 0;  // moved per step
};

// Trains `steps` steps (the first one untimed) with `extra` overrides.
Result Measure(const Flags& flags, const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {
      "model.n_layer=" + std::to_string(flags.layers),
      "model.n_head=8",
      "model.n_embd=" + std::to_string(flags.embd),
      "model.seq_len=64",
      "model.vocab_size=50257",
      "train_batch_size=4",
      "train_micro_batch_size_per_gpu=4",
      "train.steps=" + std::to_string(flags.steps),
      "train.eval_interval=0",
      "data.val=\"\"",
      "monitor.jsonl.path=\"\"",
      "steps_per_print=0",
      "checkpoint.dir=\"\"",
      "checkpoint.interval_steps=0",
      "zero_optimization.sub_group_size=" + std::to_string(flags.sub_group)};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  hoist::StatusOr<Config> config = hoist::runtime::LoadConfig("", overrides, 1);
  if (!config.ok()) {
    std::fprintf(stderr, "config: %s\n", config.status().ToString().c_str());
    std::exit(1);
  }
  hoist::MemoryTracker tracker;
  TrainerOptions options;
  options.tracker = &tracker;
  auto trainer = Trainer::Create(*config, options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "start: %s\n", trainer.status().ToString().c_str());
    std::exit(1);
  }
  std::vector<double> times;
  hoist::zero::OffloadStats before;
  for (int s = 0; s < flags.steps; ++s) {
    if (s == 1) before = (*trainer)->engine().offload_stats();
    auto record = (*trainer)->Step();
    if (!record.ok()) {
      std::fprintf(stderr, "step: %s\n", record.status().ToString().c_str());
      std::exit(1);
    }
    if (s > 0) times.push_back(record->step_s);
  }
  const hoist::zero::OffloadStats after = (*trainer)->engine().offload_stats();
  std::sort(times.begin(), times.end());
  const double timed = flags.steps - 1;
  Result result;
  result.step_s = times[times.size() / 2];
  result.nvme_wait_s = (after.nvme_wait_s - before.nvme_wait_s) / timed;
  result.update_s = (after.update_s - before.update_s) / timed;
  result.nvme_bytes =
      static_cast<int64_t>(double(after.nvme_read_bytes - before.nvme_read_bytes +
                                  after.nvme_write_bytes - before.nvme_write_bytes) /
                           timed);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  namespace fs = std::filesystem;
  bool own_dir = false;
  if (flags.dir.empty()) {
    std::string pattern = hoist::bench::ScratchParent() + "/hoist-offload-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    flags.dir = pattern;
    own_dir = true;
  }
  const std::string nvme = "\"" + flags.dir + "\"";
  const std::vector<std::string> stage2 = {"zero_optimization.stage=2", "bf16.enabled=true"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), stage2.begin(), stage2.end());
    return more;
  };
  const std::vector<std::string> cpu = with({"zero_optimization.offload_optimizer.device=\"cpu\""});
  auto on_nvme = [&](int buffers) {
    return with({"zero_optimization.offload_optimizer.device=\"nvme\"",
                 "zero_optimization.offload_optimizer.nvme_path=" + nvme,
                 "zero_optimization.offload_optimizer.buffer_count=" + std::to_string(buffers)});
  };
  const std::vector<std::string> stage3 = {"zero_optimization.stage=3",
                                           "bf16.enabled=true",
                                           "zero_optimization.offload_optimizer.device=\"nvme\"",
                                           "zero_optimization.offload_optimizer.nvme_path=" + nvme,
                                           "zero_optimization.offload_param.device=\"nvme\"",
                                           "zero_optimization.offload_param.nvme_path=" + nvme,
                                           "zero_optimization.offload_param.max_in_cpu=0"};

  std::printf(
      "offload_step_bench: GPT-2 shape, %d layers, n_embd %d, B=4, T=64, bf16, 1 rank, "
      "sub_group_size %lld, NVMe dir %s\n",
      flags.layers, flags.embd, static_cast<long long>(flags.sub_group), flags.dir.c_str());
  const Result none = Measure(flags, with({}));
  const Result host = Measure(flags, cpu);
  const Result overlapped = Measure(flags, on_nvme(3));
  const Result serial = Measure(flags, on_nvme(1));
  const Result infinity = Measure(flags, stage3);
  const Result none3 = Measure(flags, {"zero_optimization.stage=3", "bf16.enabled=true"});
  // 8-bit AdamW: the swapper's file holds codes and absmaxes beside the fp32 master.
  const std::string adamw8bit = "optimizer.type=\"AdamW8bit\"";
  const Result none8 = Measure(flags, with({adamw8bit}));
  std::vector<std::string> nvme8 = on_nvme(3);
  nvme8.push_back(adamw8bit);
  const Result overlapped8 = Measure(flags, nvme8);

  std::printf("\n%-44s %10s %8s %10s %10s %9s\n", "placement", "s/step", "ratio", "I/O wait",
              "update", "GB/step");
  auto row = [&](const char* name, const Result& r, const Result& anchor) {
    std::printf("%-44s %10.3f %8.3f %10.3f %10.3f %9.2f\n", name, r.step_s,
                r.step_s / anchor.step_s, r.nvme_wait_s, r.update_s, double(r.nvme_bytes) / 1e9);
  };
  row("stage 2, optimizer on device (anchor)", none, none);
  row("stage 2, optimizer in pinned host memory", host, none);
  row("stage 2, optimizer on NVMe, buffer_count 3", overlapped, none);
  row("stage 2, optimizer on NVMe, buffer_count 1", serial, none);
  row("stage 3, nothing offloaded (anchor)", none3, none3);
  row("stage 3, params and optimizer on NVMe", infinity, none3);
  row("stage 2, 8-bit AdamW on device (anchor)", none8, none8);
  row("stage 2, 8-bit AdamW on NVMe, buffer_count 3", overlapped8, none8);
  if (overlapped.nvme_bytes > 0) {
    std::printf("\n8-bit AdamW on NVMe moves %.2f of the 32-bit states' bytes per step\n",
                double(overlapped8.nvme_bytes) / double(overlapped.nvme_bytes));
  }
  if (serial.nvme_wait_s > 0) {
    std::printf(
        "\nNVMe I/O hidden behind the update with buffer_count 3: %.0f%% "
        "(1 - %.3f s / %.3f s of waiting per step)\n",
        100.0 * (1.0 - overlapped.nvme_wait_s / serial.nvme_wait_s), overlapped.nvme_wait_s,
        serial.nvme_wait_s);
  }
  if (own_dir) fs::remove_all(flags.dir);
  return 0;
}
