// Training-step time at each share of the optimizer offloaded (zero_optimization.offload_optimizer
// .ratio), over the same step without offload, measured in the same run: one trainer per ratio,
// all alive at once, stepped in turn round after round (the machines are shared and noisy: only
// ratios mean something, and interleaving spreads the noise over every ratio alike).
//
// Ratio 0 is the run without offload; 0.25, 0.5 and 0.75 keep the leading units' states on the
// device (the split falls on a unit boundary: the "on host" column gives the share it makes);
// 1 is the full offload to pinned host memory. On a CPU build the "device" is host memory too,
// so the figures show the cost of the offloaded part's separate master copy and staging; on an
// accelerator they also carry the host link, overlapped with the device part's update.
//
//   offload_ratio_bench [--rounds N] [--layers L] [--embd E] [--vocab V] [--stage S]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/memory_tracker.h"
#include "runtime/config/config.h"
#include "runtime/train/trainer.h"
#include "zero/memory_estimate.h"

namespace {

using hoist::runtime::Config;
using hoist::runtime::Trainer;
using hoist::runtime::TrainerOptions;

struct Flags {
  int rounds = 6;
  int layers = 8;
  int embd = 256;
  int vocab = 8192;
  int stage = 2;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  auto to_int = [](int* out) {
    return [out](const std::string& v) { *out = std::atoi(v.c_str()); };
  };
  hoist::bench::ParseFlags(argc, argv,
                           {{"--rounds", to_int(&flags.rounds)},
                            {"--layers", to_int(&flags.layers)},
                            {"--embd", to_int(&flags.embd)},
                            {"--vocab", to_int(&flags.vocab)},
                            {"--stage", to_int(&flags.stage)}},
                           "offload_ratio_bench [--rounds N] [--layers L] [--embd E] [--vocab V] "
                           "[--stage S]");
  if (flags.rounds < 2 || flags.layers < 1 || flags.embd < 64 || flags.vocab < 256 ||
      flags.stage < 1 || flags.stage > 3) {
    std::fprintf(stderr,
                 "need --rounds >= 2, --layers >= 1, --embd >= 64, --vocab >= 256, --stage 1-3\n");
    std::exit(2);
  }
  return flags;
}

struct Run {
  double ratio = 0;  // 0: no offload
  std::unique_ptr<hoist::MemoryTracker> tracker;
  std::unique_ptr<Trainer> trainer;
  std::vector<double> times;
  double host_share = 0;  // of the owned shard's states, as split
};

Run Start(const Flags& flags, double ratio) {
  std::vector<std::string> overrides = {"model.n_layer=" + std::to_string(flags.layers),
                                        "model.n_head=4",
                                        "model.n_embd=" + std::to_string(flags.embd),
                                        "model.seq_len=64",
                                        "model.vocab_size=" + std::to_string(flags.vocab),
                                        "train_batch_size=4",
                                        "train_micro_batch_size_per_gpu=4",
                                        "train.steps=" + std::to_string(flags.rounds + 1),
                                        "train.eval_interval=0",
                                        "data.val=\"\"",
                                        "monitor.jsonl.path=\"\"",
                                        "steps_per_print=0",
                                        "checkpoint.dir=\"\"",
                                        "checkpoint.interval_steps=0",
                                        "bf16.enabled=true",
                                        "zero_optimization.stage=" + std::to_string(flags.stage)};
  if (ratio > 0) {
    overrides.push_back("zero_optimization.offload_optimizer.device=\"cpu\"");
    overrides.push_back("zero_optimization.offload_optimizer.ratio=" + std::to_string(ratio));
  }
  hoist::StatusOr<Config> config = hoist::runtime::LoadConfig("", overrides, 1);
  if (!config.ok()) {
    std::fprintf(stderr, "config: %s\n", config.status().ToString().c_str());
    std::exit(1);
  }
  Run run;
  run.ratio = ratio;
  run.tracker = std::make_unique<hoist::MemoryTracker>();
  TrainerOptions options;
  options.tracker = run.tracker.get();
  auto trainer = Trainer::Create(*config, options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "start: %s\n", trainer.status().ToString().c_str());
    std::exit(1);
  }
  run.trainer = std::move(trainer).value();
  const auto& engine = run.trainer->engine();
  const double total = static_cast<double>(engine.state_plan().total_shard());
  run.host_share =
      ratio > 0
          ? 1.0 - hoist::zero::DeviceStateElements(engine.state_plan(), engine.options()) / total
          : 0.0;
  return run;
}

void StepOnce(Run& run, bool timed) {
  auto record = run.trainer->Step();
  if (!record.ok()) {
    std::fprintf(stderr, "step: %s\n", record.status().ToString().c_str());
    std::exit(1);
  }
  if (timed) run.times.push_back(record->step_s);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  std::printf(
      "offload_ratio_bench: GPT-2 shape, %d layers, n_embd %d, vocab %d, B=4, T=64, bf16, "
      "stage %d, 1 rank, %d timed rounds\n",
      flags.layers, flags.embd, flags.vocab, flags.stage, flags.rounds);
  std::vector<Run> runs;
  for (double ratio : {0.0, 0.25, 0.5, 0.75, 1.0}) runs.push_back(Start(flags, ratio));
  // A first untimed step each, then the rounds, every ratio once per round.
  for (Run& run : runs) StepOnce(run, false);
  for (int round = 0; round < flags.rounds; ++round) {
    for (Run& run : runs) StepOnce(run, true);
  }
  const double anchor = Median(runs[0].times);
  std::printf("\n%-8s %10s %10s %12s\n", "ratio", "on host", "s/step", "vs ratio 0");
  for (const Run& run : runs) {
    const double s = Median(run.times);
    std::printf("%-8.2f %9.0f%% %10.4f %12.3f\n", run.ratio, 100.0 * run.host_share, s, s / anchor);
  }
  return 0;
}
