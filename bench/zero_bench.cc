// ZeRO: what each rank holds and what each stage costs in time, on N ranks as threads of one
// process (each with its own memory tracker and trainer, talking through the in-process
// communicator).
//
// For each stage 0-3 and N = 1, 2, 4, 8 (8 oversubscribes a small machine; that changes times,
// not bytes) it trains a few steps and prints one rank's model-state bytes by category as the
// memory tracker counted them, next to the ZeRO paper's formula for the same Ψ and N (DESIGN.md:
// fp32 16Ψ / 8Ψ + 8Ψ/N / 4Ψ + 12Ψ/N / 16Ψ/N; mixed precision 16Ψ / 4Ψ + 12Ψ/N / 2Ψ + 14Ψ/N /
// 16Ψ/N), with the ratio. The difference is padding (each unit is padded to a multiple of N).
// Then the median step time of each stage relative to stage 0 at the same N, measured in the
// same run (absolute times on a shared machine are noise; the ratio is the figure).
//
//   OMP_NUM_THREADS=1 zero_bench [--steps K] [--precision fp32|bf16] [--layers L] [--embd C]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "comm/thread_communicator.h"
#include "core/memory_tracker.h"
#include "runtime/config/config.h"
#include "runtime/train/trainer.h"

namespace {

using hoist::Category;
using hoist::MemoryTracker;
using hoist::Place;
using hoist::runtime::Config;
using hoist::runtime::Trainer;
using hoist::runtime::TrainerOptions;

struct Args {
  int steps = 6;
  std::string precision = "fp32";
  int layers = 6;
  int embd = 256;
};

struct Measured {
  double param = 0, grad = 0, optimizer = 0;
  double step_s = 0;  // median over the timed steps, rank 0
  int64_t psi = 0;
};

Config Job(const Args& args, int stage, int world) {
  const int micro = 2, global = 16;
  std::vector<std::string> overrides = {"model.n_layer=" + std::to_string(args.layers),
                                        "model.n_head=8",
                                        "model.n_embd=" + std::to_string(args.embd),
                                        "model.seq_len=64",
                                        "train_batch_size=" + std::to_string(global),
                                        "train_micro_batch_size_per_gpu=" + std::to_string(micro),
                                        "gradient_accumulation_steps=null",
                                        "zero_optimization.stage=" + std::to_string(stage),
                                        "zero_optimization.stage3_param_persistence_threshold=0",
                                        "zero_optimization.overlap_comm=true"};
  for (std::string& quiet : hoist::bench::QuietRunOverrides(args.steps)) {
    overrides.push_back(std::move(quiet));
  }
  if (args.precision == "bf16") overrides.push_back("bf16.enabled=true");
  auto config = hoist::runtime::LoadConfig("", overrides, world);
  if (!config.ok()) {
    std::fprintf(stderr, "zero_bench: %s\n", config.status().ToString().c_str());
    std::exit(1);
  }
  return *config;
}

Measured Run(const Args& args, int stage, int world) {
  auto group = hoist::comm::ThreadGroup::Create(world, 600.0);
  if (!group.ok()) std::exit(1);
  std::vector<MemoryTracker> trackers(static_cast<size_t>(world));
  std::vector<Measured> results(static_cast<size_t>(world));
  const Config config = Job(args, stage, world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      TrainerOptions options;
      options.comm = &(*group)->comm(r);
      options.tracker = &trackers[static_cast<size_t>(r)];
      auto trainer = Trainer::Create(config, options);
      if (!trainer.ok()) {
        std::fprintf(stderr, "zero_bench: rank %d: %s\n", r, trainer.status().ToString().c_str());
        std::exit(1);
      }
      std::vector<double> times;
      for (int s = 0; s < args.steps; ++s) {
        auto record = (*trainer)->Step();
        if (!record.ok()) {
          std::fprintf(stderr, "zero_bench: %s\n", record.status().ToString().c_str());
          std::exit(1);
        }
        if (s > 0) times.push_back(record->step_s);  // the first step warms up
      }
      std::sort(times.begin(), times.end());
      const hoist::MemorySnapshot memory = trackers[static_cast<size_t>(r)].Snapshot();
      Measured& m = results[static_cast<size_t>(r)];
      m.param = double(memory.Current(Place::kDevice, Category::kParam));
      m.grad = double(memory.Current(Place::kDevice, Category::kGrad));
      m.optimizer = double(memory.Current(Place::kDevice, Category::kOptimizer));
      m.step_s = times.empty() ? 0 : times[times.size() / 2];
      m.psi = (*trainer)->model().num_parameters();
    });
  }
  for (auto& t : threads) t.join();
  // Ranks differ only by padding: report the largest.
  Measured worst = results[0];
  for (const Measured& m : results) {
    if (m.param + m.grad + m.optimizer > worst.param + worst.grad + worst.optimizer) {
      worst.param = m.param, worst.grad = m.grad, worst.optimizer = m.optimizer;
    }
  }
  return worst;
}

double Formula(bool mixed, int stage, double psi, double n) {
  if (mixed) {
    const double f[] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n};
    return f[stage];
  }
  const double f[] = {16 * psi, 8 * psi + 8 * psi / n, 4 * psi + 12 * psi / n, 16 * psi / n};
  return f[stage];
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "zero_bench: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--steps"))
      args.steps = std::max(2, std::atoi(next()));
    else if (!std::strcmp(argv[i], "--precision"))
      args.precision = next();
    else if (!std::strcmp(argv[i], "--layers"))
      args.layers = std::atoi(next());
    else if (!std::strcmp(argv[i], "--embd"))
      args.embd = std::atoi(next());
    else {
      std::fprintf(stderr,
                   "usage: zero_bench [--steps K] [--precision fp32|bf16] [--layers L] "
                   "[--embd C]\n");
      return 2;
    }
  }
  if (args.precision != "fp32" && args.precision != "bf16") {
    std::fprintf(stderr, "zero_bench: --precision is fp32 or bf16, not %s\n",
                 args.precision.c_str());
    return 2;
  }
  const bool mixed = args.precision == "bf16";
  std::printf(
      "ZeRO model states per rank (%s, %d layers x %d channels), bytes of the largest "
      "rank\n\n",
      args.precision.c_str(), args.layers, args.embd);
  std::printf("%5s %3s %12s %12s %12s %12s %12s %8s %10s\n", "stage", "N", "param", "grad",
              "optimizer", "measured", "formula", "ratio", "step/st0");
  for (int world : {1, 2, 4, 8}) {
    double stage0_s = 0;
    for (int stage = 0; stage <= 3; ++stage) {
      const Measured m = Run(args, stage, world);
      const double measured = m.param + m.grad + m.optimizer;
      const double formula = Formula(mixed, stage, double(m.psi), world);
      if (stage == 0) stage0_s = m.step_s;
      std::printf("%5d %3d %12.0f %12.0f %12.0f %12.0f %12.0f %8.4f %10.3f\n", stage, world,
                  m.param, m.grad, m.optimizer, measured, formula, measured / formula,
                  m.step_s / stage0_s);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nratio: measured / formula (padding to a multiple of N per unit makes it >= 1);\n"
      "step/st0: median step time over stage 0's at the same N, in this run.\n");
  return 0;
}
