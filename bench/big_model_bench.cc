// A model far larger than this machine's memory trains a few steps: a GPT-2-shaped decoder of
// about 2.6 billion parameters (32 layers, n_embd 2560) whose mixed-precision model states take
// 16 bytes a parameter, about 42 GB, on one rank with ZeRO stage 3, its parameters and optimizer
// states on NVMe, bf16, micro-batch 1 of 64 tokens so that activations stay small. It prints the
// parameter count, the process's peak resident memory, the bytes on NVMe and the seconds per
// step, and checks free disk space first.
//
//   big_model_bench [--dir DIR] [--steps N] [--layers L] [--embd E] [--seq T]
//                   [--sub-group ELEMENTS] [--checkpoint DIR] [--dry-run]
// --dry-run prints what the run needs and stops. --checkpoint saves the states after the last step
// (12 bytes a parameter more on that disk), streamed from NVMe a sub-group at a time.
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/memory_tracker.h"
#include "runtime/config/config.h"
#include "runtime/train/trainer.h"

namespace {

struct Flags {
  std::string dir;
  int steps = 3;
  int layers = 32;
  int embd = 2560;
  int seq = 64;
  int64_t sub_group = 50000000;
  bool dry_run = false;
  std::string checkpoint;  // non-empty: save a checkpoint there after the last step
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
       {"--seq", to_int(&flags.seq)},
       {"--sub-group", [&](const std::string& v) { flags.sub_group = std::atoll(v.c_str()); }},
       {"--checkpoint", [&](const std::string& v) { flags.checkpoint = v; }},
       {"--dry-run", nullptr, &flags.dry_run}},
      "big_model_bench [--dir DIR] [--steps N] [--layers L] [--embd E] [--seq T] "
      "[--sub-group ELEMENTS] [--checkpoint DIR] [--dry-run]");
  if (flags.steps < 1 || flags.layers < 1 || flags.embd < 128 || flags.embd % 128 != 0 ||
      flags.seq < 1 || flags.sub_group < 1) {
    std::fprintf(stderr,
                 "need --steps >= 1, --layers >= 1, --embd a multiple of 128, --seq >= 1, "
                 "--sub-group >= 1\n");
    std::exit(2);
  }
  return flags;
}

// Peak resident set of this process so far (VmHWM), in bytes.
int64_t PeakRss() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    std::getline(status, key);
  }
  return -1;
}

double Gb(int64_t bytes) { return double(bytes) / 1e9; }

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  namespace fs = std::filesystem;
  if (flags.dir.empty()) flags.dir = hoist::bench::ScratchParent();
  const int64_t E = flags.embd, L = flags.layers;
  const int64_t vocab = (50257 + 127) / 128 * 128;
  // Per layer: qkv 3E^2+3E, proj E^2+E, fc 4E^2+4E, fc proj 4E^2+E, two layernorms 4E.
  const int64_t params = L * (12 * E * E + 13 * E) + vocab * E + int64_t{flags.seq} * E + 2 * E;
  // What the disk must hold: the fp32 master, m and v (12 bytes a parameter) and the bf16
  // parameters (2), each unit's run rounded to 4 KiB (a small margin covers it).
  int64_t disk_needed = params * 14 + (int64_t{256} << 20);
  if (!flags.checkpoint.empty()) disk_needed += params * 12;  // same disk assumed
  struct statvfs fs_info {};
  if (statvfs(flags.dir.c_str(), &fs_info) != 0) {
    std::fprintf(stderr, "big_model_bench: cannot read the free space of %s; pass --dir DIR\n",
                 flags.dir.c_str());
    return 1;
  }
  const int64_t disk_free = static_cast<int64_t>(fs_info.f_bavail) * fs_info.f_frsize;
  std::printf(
      "big_model_bench: %lld layers, n_embd %lld, %.2f B parameters; model states "
      "(16 bytes a parameter) %.1f GB\n",
      static_cast<long long>(L), static_cast<long long>(E), double(params) / 1e9, Gb(params * 16));
  std::printf("NVMe dir %s: needs %.1f GB, %.1f GB free\n", flags.dir.c_str(), Gb(disk_needed),
              Gb(disk_free));
  if (disk_free < disk_needed) {
    std::fprintf(stderr,
                 "big_model_bench: not enough free space in %s (%.1f GB needed, %.1f GB free); "
                 "free space, pass --dir on a larger disk, or shrink the model with --layers\n",
                 flags.dir.c_str(), Gb(disk_needed), Gb(disk_free));
    return 1;
  }
  if (flags.dry_run) return 0;

  const std::string nvme = "\"" + flags.dir + "\"";
  const std::vector<std::string> overrides = {
      "model.n_layer=" + std::to_string(L),
      "model.n_head=" + std::to_string(E / 128),
      "model.n_embd=" + std::to_string(E),
      "model.seq_len=" + std::to_string(flags.seq),
      "model.vocab_size=50257",
      "train_batch_size=1",
      "train_micro_batch_size_per_gpu=1",
      "train.steps=" + std::to_string(flags.steps),
      "train.eval_interval=0",
      "data.val=\"\"",
      "monitor.jsonl.path=\"\"",
      "steps_per_print=0",
      "checkpoint.dir=\"" + flags.checkpoint + "\"",
      "checkpoint.interval_steps=0",
      "bf16.enabled=true",
      "zero_optimization.stage=3",
      "zero_optimization.sub_group_size=" + std::to_string(flags.sub_group),
      "zero_optimization.offload_optimizer.device=\"nvme\"",
      "zero_optimization.offload_optimizer.nvme_path=" + nvme,
      "zero_optimization.offload_optimizer.buffer_count=3",
      "zero_optimization.offload_param.device=\"nvme\"",
      "zero_optimization.offload_param.nvme_path=" + nvme,
      "zero_optimization.offload_param.max_in_cpu=0",
      "zero_optimization.offload_param.buffer_count=3",
      "zero_optimization.offload_param.buffer_size=200000000",
  };
  hoist::StatusOr<hoist::runtime::Config> config = hoist::runtime::LoadConfig("", overrides, 1);
  if (!config.ok()) {
    std::fprintf(stderr, "config: %s\n", config.status().ToString().c_str());
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  hoist::runtime::TrainerOptions options;
  auto trainer = hoist::runtime::Trainer::Create(*config, options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "start: %s\n", trainer.status().ToString().c_str());
    return 1;
  }
  const double setup_s = std::chrono::duration<double>(Clock::now() - started).count();
  std::printf("set up (initialising %.2f B parameters and writing them to NVMe): %.1f s\n",
              double((*trainer)->engine().plan().total_real()) / 1e9, setup_s);
  hoist::zero::OffloadStats before = (*trainer)->engine().offload_stats();
  for (int s = 0; s < flags.steps; ++s) {
    auto record = (*trainer)->Step();
    if (!record.ok()) {
      std::fprintf(stderr, "step %d: %s\n", s + 1, record.status().ToString().c_str());
      return 1;
    }
    const hoist::zero::OffloadStats stats = (*trainer)->engine().offload_stats();
    std::printf(
        "step %d: loss %.4f, %.1f s (optimizer step %.1f s, of it AdamW %.1f s); this "
        "step waited %.1f s on NVMe, read %.1f GB and wrote %.1f GB\n",
        s + 1, record->loss, record->step_s,
        record->phase_s[static_cast<int>(hoist::Phase::kOptimizer)],
        stats.update_s - before.update_s, stats.nvme_wait_s - before.nvme_wait_s,
        Gb(stats.nvme_read_bytes - before.nvme_read_bytes),
        Gb(stats.nvme_write_bytes - before.nvme_write_bytes));
    std::fflush(stdout);
    before = stats;
  }
  if (!flags.checkpoint.empty()) {
    const auto saving = Clock::now();
    const hoist::Status saved = (*trainer)->SaveCheckpoint();
    if (!saved.ok()) {
      std::fprintf(stderr, "checkpoint: %s\n", saved.ToString().c_str());
      return 1;
    }
    std::printf(
        "checkpoint of %.1f GB of optimizer states saved in %.1f s (peak RSS so far %.2f "
        "GB)\n",
        Gb((*trainer)->engine().state_elements() * 12),
        std::chrono::duration<double>(Clock::now() - saving).count(), Gb(PeakRss()));
  }
  const hoist::MemorySnapshot memory = hoist::MemoryTracker::Global().Snapshot();
  int64_t nvme_bytes = 0;
  for (int c = 0; c < hoist::kNumCategories; ++c) {
    nvme_bytes += memory.peak[static_cast<int>(hoist::Place::kNvme)][c];
  }
  std::printf(
      "\nparameters %.2f B | peak RSS %.2f GB (machine memory %.1f GB) | on NVMe %.1f GB "
      "| model states %.1f GB\n",
      double((*trainer)->engine().plan().total_real()) / 1e9, Gb(PeakRss()),
      Gb(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE)), Gb(nvme_bytes),
      Gb((*trainer)->engine().plan().total_real() * 16));
  return 0;
}
