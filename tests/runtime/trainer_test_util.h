// The trainer tests' multi-rank harness: N ranks as threads of one process, each with its own
// Trainer and MemoryTracker, training one config; what each rank ended with.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/memory_tracker.h"
#include "runtime/train/trainer.h"

namespace hoist::runtime::testing_util {

struct RankRun {
  Status status;
  std::vector<float> losses;
  std::vector<float> params;  // gathered fp32 weights at the end
  MemorySnapshot memory;
  zero::ModelStateBytes states;
  int64_t total_real = 0, total_shard = 0;
  zero::OffloadStats offload;
};

// Trains `config` on `world` ranks; options.resume/resume_from apply to every rank, then
// `per_rank` (when set) may change one rank's options (its own view of the files, say).
inline std::vector<RankRun> TrainOnRanks(
    const Config& config, int world, const TrainerOptions& base = {},
    const std::function<void(int rank, TrainerOptions* options)>& per_rank = nullptr) {
  auto group = comm::ThreadGroup::Create(world, 60.0);
  HOIST_CHECK(group.ok());
  std::vector<RankRun> runs(static_cast<size_t>(world));
  std::vector<MemoryTracker> trackers(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      RankRun& run = runs[static_cast<size_t>(r)];
      TrainerOptions options = base;
      options.comm = &(*group)->comm(r);
      options.tracker = &trackers[static_cast<size_t>(r)];
      if (per_rank) per_rank(r, &options);
      auto trainer = Trainer::Create(config, options);
      if (!trainer.ok()) {
        run.status = trainer.status();
        return;
      }
      run.status = (*trainer)->Run();
      run.losses = (*trainer)->losses();
      run.memory = trackers[static_cast<size_t>(r)].Snapshot();
      run.states = (*trainer)->engine().model_state_bytes();
      run.total_real = (*trainer)->engine().plan().total_real();
      run.total_shard = (*trainer)->engine().plan().total_shard();
      run.offload = (*trainer)->engine().offload_stats();
      if (run.status.ok()) {
        auto params = (*trainer)->engine().GatherFullParams();
        if (params.ok())
          run.params = *params;
        else
          run.status = params.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  return runs;
}

}  // namespace hoist::runtime::testing_util
