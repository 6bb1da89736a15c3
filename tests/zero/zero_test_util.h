// The toy-model harness the ZeRO engine tests share: units of awkward sizes trained on N thread
// ranks with a gradient known in closed form (loss 0.5 |w - t|^2 per element).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "comm/staged_communicator.h"
#include "comm/thread_communicator.h"
#include "core/memory_tracker.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"
#include "zero/zero_engine.h"

namespace hoist::zero::zero_test {

// Units of awkward sizes (padding on every world size) with mixed decay segments.
inline std::vector<UnitSpec> ToyUnits() {
  return {{"embed", 37, {{0, 30, true}, {30, 37, false}}},
          {"block0", 53, {{0, 3, false}, {3, 50, true}, {50, 53, false}}},
          {"block1", 53, {{0, 3, false}, {3, 50, true}, {50, 53, false}}},
          {"norm", 2, {{0, 2, false}}}};
}

// The value the micro-batch `k` of step `step` pulls element i of unit u towards.
inline float Target(int step, int k, int u, int64_t i) {
  uint64_t x = (uint64_t(step) * 1315423911u) ^ (uint64_t(k) * 2654435761u) ^
               (uint64_t(u) * 97u + uint64_t(i) * 7919u);
  x ^= x >> 13;
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<float>((x >> 40) % 2001) / 1000.0f - 1.0f;
}

inline float InitialValue(int u, int64_t i) { return 0.5f * Target(-1, 0, u, i); }

struct RunOptions {
  int world = 1;
  int global_micro = 4;  // micro-batches per optimizer step, over all ranks
  ZeroOptions zero;
  int steps = 5;
  float lr = 0.05f;
  float max_norm = 1.0f;
  // (step, rank) -> whether this rank's gradients get an inf in that step.
  std::function<bool(int, int)> poison;
  // Adjusts the options of one rank's engine (a per-rank scratch file, a faulty storage).
  std::function<void(int rank, ZeroOptions&)> per_rank;
  // kThreaded: the engine's backend runs its streams on worker threads (kernels/cpu_backend.h).
  HostStream::Mode streams = HostStream::Mode::kInline;
  // The collectives go through comm::StagedCommunicator (device -> host staging -> device).
  bool staged_comm = false;
  // The model's units; empty: ToyUnits().
  std::vector<UnitSpec> units;
  // Which micro-batches' backward the engine is told ends the step
  // (ZeroEngine::SetAccumulationBoundary): the last's, none, or every one's.
  enum class Boundary { kLast, kNone, kEvery };
  Boundary boundary = Boundary::kLast;
};

struct RankResult {
  std::vector<float> params;
  std::vector<bool> overflow;
  ModelStateBytes states;
  MemorySnapshot memory;
  PartitionPlan plan;
  Status status;
  OffloadStats offload;
  int64_t state_elements = 0;
};

// The toy model's backward for one micro-batch: loss 0.5 * |w - t|^2 per element, so the gradient
// w - t is added, weighted by dloss, into the store's buffer. It computes on the host: the weights
// are ordered before the store's compute stream's later work (ParamStore), so with `stream` (the
// store's, where its work may be queued) it waits for that stream before reading them, as any
// host reader must.
inline void MicroBatch(ParamStore& store, const std::vector<UnitSpec>& units, int step, int k,
                       float dloss, bool poison, const Stream* stream = nullptr) {
  std::vector<float> w;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    // The weights come in the store's type: widened here, as a model's op would read them.
    w.resize(static_cast<size_t>(units[u].size));
    // The next unit asked for before this one's weights are read, as a model asks before it
    // computes: the store may start on it while this unit's work is still queued.
    const void* weights = store.AcquireParams(u).value();
    if (u + 1 < static_cast<int>(units.size())) store.Prefetch(u + 1);
    if (stream != nullptr) {
      EXPECT_TRUE(stream->Synchronize().ok());
    }
    kernels::cpu::ToFloat(weights, store.param_type(), w.data(), units[u].size);
    float* g = store.AcquireGrads(u).value();
    for (int64_t i = 0; i < units[u].size; ++i) g[i] += dloss * (w[i] - Target(step, k, u, i));
    if (poison && u == 1) g[5] = std::numeric_limits<float>::infinity();
    store.ReleaseGrads(u);
    store.ReleaseParams(u);
  }
}

inline std::vector<RankResult> Train(const RunOptions& run) {
  auto group = comm::ThreadGroup::Create(run.world, 30.0);
  EXPECT_TRUE(group.ok());
  std::vector<RankResult> results(static_cast<size_t>(run.world));
  std::vector<std::thread> threads;
  const int accumulation = run.global_micro / run.world;
  for (int r = 0; r < run.world; ++r) {
    threads.emplace_back([&, r] {
      RankResult& out = results[static_cast<size_t>(r)];
      MemoryTracker tracker;
      CpuDevice device(Place::kDevice, &tracker);
      kernels::CpuBackend backend(&device, run.streams);
      CpuDevice staging(Place::kHostPinned, &tracker);
      comm::StagedCommunicator staged(&(*group)->comm(r), &backend, &staging);
      comm::Communicator* comm = run.staged_comm ? &staged : &(*group)->comm(r);
      ZeroOptions options = run.zero;
      if (run.per_rank) run.per_rank(r, options);
      const std::vector<UnitSpec> units = run.units.empty() ? ToyUnits() : run.units;
      auto engine = ZeroEngine::Create(units, options, comm, &backend);
      if (!engine.ok()) {
        out.status = engine.status();
        return;
      }
      ZeroEngine& e = **engine;
      out.status = e.Initialize([&](int u, float* values) {
        for (int64_t i = 0; i < units[static_cast<size_t>(u)].size; ++i) {
          values[i] = InitialValue(u, i);
        }
      });
      for (int step = 0; step < run.steps && out.status.ok(); ++step) {
        out.status = e.ZeroGrads();
        if (!out.status.ok()) break;
        const bool poison = run.poison && run.poison(step, r);
        for (int m = 0; m < accumulation; ++m) {
          // Rank r takes micro-batches r, r + world, ... of the global batch.
          e.SetAccumulationBoundary(
              run.boundary == RunOptions::Boundary::kEvery ||
              (run.boundary == RunOptions::Boundary::kLast && m + 1 == accumulation));
          MicroBatch(e, units, step, m * run.world + r, 1.0f / float(accumulation), poison,
                     &backend.compute_stream());
        }
        auto result = e.Step(run.lr, 1.0f, run.max_norm);
        if (!result.ok()) {
          out.status = result.status();
          break;
        }
        out.overflow.push_back(result->overflow);
      }
      auto params = e.GatherFullParams();
      if (params.ok()) out.params = *params;
      out.states = e.model_state_bytes();
      out.offload = e.offload_stats();
      out.state_elements = e.state_elements();
      out.memory = tracker.Snapshot();
      out.plan = e.plan();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

inline double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1e-3, std::abs(double(b[i]))));
  }
  return worst;
}

}  // namespace hoist::zero::zero_test
