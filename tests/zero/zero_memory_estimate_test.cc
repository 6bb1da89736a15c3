// EstimateEngineMemory against the engine's own tracker. Each rank (a thread) runs the real
// ZeroEngine through the same ParamStore calls the estimate replays, two steps of forward,
// backward and Step, and records its tracker: what Create and Initialize leave allocated, and the
// peaks of each phase (peaks reset at every phase boundary, so the whole run's peaks are the
// largest of these and of Create's). Every number must equal the estimate exactly: the engine's
// allocations are deterministic (no allocation depends on timing; the scratch files live in
// MemoryStorage), and estimate and engine size their buffers with the same functions, so any
// difference is a term the estimate gets wrong. The closed forms (the ZeRO paper's model states;
// stage 3's largest pair of gathered units) hold the estimate to numbers computed another way.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "comm/thread_communicator.h"
#include "core/live_memory.h"
#include "core/memory_tracker.h"
#include "kernels/cpu/convert.h"
#include "offload/memory_storage.h"
#include "tests/zero/zero_test_util.h"
#include "zero/memory_estimate.h"

namespace hoist::zero {
namespace {

using Table = MemorySnapshot::Table;
using Totals = std::array<int64_t, kNumPlaces>;

std::vector<UnitSpec> Units(std::initializer_list<int64_t> sizes) {
  std::vector<UnitSpec> units;
  for (int64_t size : sizes) {
    std::string name = "u";  // appended, not "u" + ...: GCC 12 warns wrongly on that
    name += std::to_string(units.size());
    units.push_back({name, size, {{0, size, true}}});
  }
  return units;
}

// Sizes that pad differently on 1, 2 and 4 ranks, with units smaller than the world (kept whole
// in stage 3 below a threshold of 10), two large neighbours (the largest gathered pair, which
// the prefetch limits can break up) and smaller pairs elsewhere.
std::vector<UnitSpec> UnevenUnits() { return Units({5, 300, 261, 1, 64, 129, 3}); }

// The toy model's units, the uneven ones, and a single unit.
std::vector<std::vector<UnitSpec>> UnitPatterns() {
  return {zero_test::ToyUnits(), UnevenUnits(), Units({7})};
}

// GPT-2's order: the tied embedding (unit 0) is acquired again for the head at the end of the
// forward pass and held into the backward pass, whose gradient it keeps from the head's
// backward (first) to the token embedding's (last).
ModelPasses TiedEmbeddingPasses(int num_units) {
  using Op = StoreCall::Op;
  const int last = num_units - 1;
  ModelPasses passes;
  auto& f = passes.forward;
  for (int u = 0; u < num_units; ++u) {
    f.push_back({Op::kAcquireParams, u});
    f.push_back({Op::kPrefetch, u < last ? u + 1 : 0});
    f.push_back({Op::kReleaseParams, u});
  }
  f.push_back({Op::kAcquireParams, 0});
  auto& b = passes.backward;
  b.push_back({Op::kAcquireGrads, 0});
  b.push_back({Op::kAcquireParams, 0});
  b.push_back({Op::kPrefetch, last});
  b.push_back({Op::kReleaseParams, 0});
  b.push_back({Op::kReleaseParams, 0});
  for (int u = last; u >= 1; --u) {
    b.push_back({Op::kAcquireParams, u});
    if (u > 1) b.push_back({Op::kPrefetch, u - 1});
    b.push_back({Op::kAcquireGrads, u});
    b.push_back({Op::kReleaseGrads, u});
    b.push_back({Op::kReleaseParams, u});
  }
  b.push_back({Op::kReleaseGrads, 0});
  return passes;
}

// Scratch files in memory, aligned as O_DIRECT files are.
offload::StorageFactory MemoryFiles() {
  return [](const std::string& path,
            int64_t bytes) -> StatusOr<std::unique_ptr<offload::BlockStorage>> {
    return std::unique_ptr<offload::BlockStorage>(new offload::MemoryStorage(path, bytes, 4096));
  };
}

// One rank's tracker through a run.
struct Measured {
  Status status;
  MemorySnapshot created;                      // after Create and Initialize
  std::array<Table, kNumPhases> phase_peak{};  // per phase: the largest per-phase peaks
  std::array<Totals, kNumPhases> phase_peak_total{};
  Table end{};  // current at the end of the run
  ModelStateBytes states;
};

struct EngineRun {
  std::vector<UnitSpec> units;
  ZeroOptions options;
  int world = 1;
  ModelPasses passes;
  int micro_batches = 1;
  // The engine's backend stands for an accelerator's (live_memory on: it operates on device
  // memory alone), and the estimate is asked for one.
  bool accelerator = false;
};

// Makes `calls` on the engine as a model would: reads the weights, adds a gradient.
void Drive(ZeroEngine& engine, const std::vector<UnitSpec>& units,
           const std::vector<StoreCall>& calls, std::vector<std::vector<float>>& weights,
           int step) {
  for (const StoreCall& call : calls) {
    const int u = call.unit;
    switch (call.op) {
      case StoreCall::Op::kAcquireParams:
        weights[u].resize(static_cast<size_t>(units[u].size));
        kernels::cpu::ToFloat(engine.AcquireParams(u).value(), engine.param_type(),
                              weights[u].data(), units[u].size);
        break;
      case StoreCall::Op::kReleaseParams: engine.ReleaseParams(u); break;
      case StoreCall::Op::kPrefetch: engine.Prefetch(u); break;
      case StoreCall::Op::kAcquireGrads: {
        float* g = engine.AcquireGrads(u).value();
        for (int64_t i = 0; i < units[u].size; ++i) {
          g[i] += 0.5f * (weights[u][i] - zero_test::Target(step, 0, u, i));
        }
        break;
      }
      case StoreCall::Op::kReleaseGrads: engine.ReleaseGrads(u); break;
    }
  }
}

// Runs two steps on every rank, the peaks restarted at each phase boundary.
std::vector<Measured> Measure(const EngineRun& run) {
  std::unique_ptr<live_memory::ScopedEnable> device_memory;
  if (run.accelerator) device_memory = std::make_unique<live_memory::ScopedEnable>();
  auto group = comm::ThreadGroup::Create(run.world, 30.0);
  EXPECT_TRUE(group.ok());
  std::vector<Measured> out(static_cast<size_t>(run.world));
  std::vector<std::thread> threads;
  for (int r = 0; r < run.world; ++r) {
    threads.emplace_back([&, r] {
      Measured& m = out[static_cast<size_t>(r)];
      MemoryTracker tracker;
      CpuDevice device(Place::kDevice, &tracker);
      kernels::CpuBackend backend(&device);
      ZeroOptions options = run.options;
      options.offload_optimizer.nvme_file = "optimizer-rank" + std::to_string(r);
      options.offload_optimizer.open_storage = MemoryFiles();
      options.offload_param.nvme_file = "params-rank" + std::to_string(r);
      options.offload_param.open_storage = MemoryFiles();
      auto engine = ZeroEngine::Create(run.units, options, &(*group)->comm(r), &backend);
      if (!engine.ok()) {
        m.status = engine.status();
        return;
      }
      ZeroEngine& e = **engine;
      m.status = e.Initialize([&](int u, float* values) {
        for (int64_t i = 0; i < run.units[u].size; ++i) values[i] = zero_test::InitialValue(u, i);
      });
      m.created = tracker.Snapshot();
      std::vector<std::vector<float>> weights(run.units.size());
      auto phase = [&](Phase which, const std::function<void()>& body) {
        tracker.ResetPeaks();
        body();
        const MemorySnapshot seen = tracker.Snapshot();
        for (int p = 0; p < kNumPlaces; ++p) {
          for (int c = 0; c < kNumCategories; ++c) {
            int64_t& most = m.phase_peak[int(which)][p][c];
            most = std::max(most, seen.peak[p][c]);
          }
          int64_t& most = m.phase_peak_total[int(which)][p];
          most = std::max(most, seen.peak_total[p]);
        }
      };
      for (int step = 0; step < 2 && m.status.ok(); ++step) {
        for (int micro = 0; micro < run.micro_batches; ++micro) {
          phase(Phase::kForward, [&] {
            if (micro == 0) m.status = e.ZeroGrads();
            Drive(e, run.units, run.passes.forward, weights, step);
          });
          phase(Phase::kBackward, [&] { Drive(e, run.units, run.passes.backward, weights, step); });
        }
        phase(Phase::kOptimizer, [&] {
          auto result = e.Step(0.01f, 1.0f, 1.0f);
          if (m.status.ok()) m.status = result.status();
        });
      }
      m.end = tracker.Snapshot().current;
      m.states = e.model_state_bytes();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::string Cell(int p, int c) {
  return std::string(PlaceName(Place(p))) + "/" + CategoryName(Category(c));
}

// Every (place, category) and every place's total where `got` differs from `want`, or "".
std::string Differences(const char* what, const Table& got, const Table& want, const Totals* got_t,
                        const Totals* want_t) {
  std::ostringstream out;
  for (int p = 0; p < kNumPlaces; ++p) {
    for (int c = 0; c < kNumCategories; ++c) {
      if (got[p][c] != want[p][c]) {
        out << "\n  " << what << " " << Cell(p, c) << ": measured " << got[p][c] << ", estimated "
            << want[p][c];
      }
    }
    if (got_t != nullptr && (*got_t)[p] != (*want_t)[p]) {
      out << "\n  " << what << " " << PlaceName(Place(p)) << " total: measured " << (*got_t)[p]
          << ", estimated " << (*want_t)[p];
    }
  }
  return out.str();
}

// Runs `run` on the engine and expects every rank's tracker to hold exactly what
// EstimateEngineMemory predicts for that rank: after Create, in each phase, over the whole run.
void ExpectEstimateIsExact(const EngineRun& run, const std::string& label) {
  SCOPED_TRACE(label);
  const std::vector<Measured> measured = Measure(run);
  for (int r = 0; r < run.world; ++r) {
    const Measured& m = measured[static_cast<size_t>(r)];
    ASSERT_TRUE(m.status.ok()) << "rank " << r << ": " << m.status.ToString();
    auto estimated = EstimateEngineMemory(run.units, run.options, run.world, r, run.passes,
                                          run.micro_batches, run.accelerator);
    ASSERT_TRUE(estimated.ok()) << estimated.status().ToString();
    const EngineMemoryEstimate& est = *estimated;

    Totals resident_total{};
    for (int p = 0; p < kNumPlaces; ++p) resident_total[p] = est.ResidentTotal(Place(p));
    // Create only adds, and Initialize allocates nothing that it frees: the peaks are the bytes.
    std::string diff = Differences("resident", m.created.current, est.resident,
                                   &m.created.peak_total, &resident_total);
    diff += Differences("peak after Create", m.created.peak, est.resident, nullptr, nullptr);
    Table whole_peak = m.created.peak;
    Totals whole_peak_total = m.created.peak_total;
    for (Phase phase : kEstimatePhases) {
      const int ph = int(phase);
      Table want{};
      Totals want_total{};
      for (int p = 0; p < kNumPlaces; ++p) {
        for (int c = 0; c < kNumCategories; ++c) {
          want[p][c] = est.resident[p][c] + est.extra[ph][p][c];
          whole_peak[p][c] = std::max(whole_peak[p][c], m.phase_peak[ph][p][c]);
        }
        want_total[p] = resident_total[p] + est.extra_total[ph][p];
        whole_peak_total[p] = std::max(whole_peak_total[p], m.phase_peak_total[ph][p]);
      }
      diff += Differences(PhaseName(Phase(ph)), m.phase_peak[ph], want, &m.phase_peak_total[ph],
                          &want_total);
    }
    Totals peak_total{};
    for (int p = 0; p < kNumPlaces; ++p) peak_total[p] = est.PeakTotal(Place(p));
    diff +=
        Differences("whole-run peak", whole_peak, est.PeakTable(), &whole_peak_total, &peak_total);
    // Every transient is gone after Step.
    diff += Differences("after the run", m.end, est.resident, nullptr, nullptr);
    EXPECT_EQ(diff, "") << "rank " << r;
    EXPECT_EQ(m.states.params, est.model_states.params);
    EXPECT_EQ(m.states.grads, est.model_states.grads);
    EXPECT_EQ(m.states.optimizer, est.model_states.optimizer);
  }
}

enum class Offload { kNone, kOptimizerCpu, kOptimizerNvme, kParamCpu, kParamNvme };

const char* OffloadName(Offload offload) {
  static const char* kNames[] = {"no offload", "optimizer cpu", "optimizer nvme", "params cpu",
                                 "params nvme"};
  return kNames[int(offload)];
}

ZeroOptions Options(int stage, DType type, Offload offload) {
  ZeroOptions options;
  options.stage = stage;
  options.compute_type = type;
  options.comm_type = type;
  options.stage3_param_persistence_threshold = 10;
  switch (offload) {
    case Offload::kNone: break;
    case Offload::kOptimizerCpu: options.offload_optimizer.place = Placement::kHost; break;
    case Offload::kOptimizerNvme:
      options.offload_optimizer.place = Placement::kNvme;
      options.offload_optimizer.sub_group_size = 40;
      options.offload_optimizer.buffer_count = 3;
      break;
    case Offload::kParamCpu: options.offload_param.place = Placement::kHost; break;
    case Offload::kParamNvme:
      options.offload_param.place = Placement::kNvme;
      options.offload_param.max_in_cpu = 30;
      options.offload_param.buffer_count = 2;
      break;
  }
  return options;
}

std::vector<Offload> OffloadsFor(int stage) {
  if (stage == 0) return {Offload::kNone};
  if (stage < 3) return {Offload::kNone, Offload::kOptimizerCpu, Offload::kOptimizerNvme};
  return {Offload::kNone, Offload::kOptimizerCpu, Offload::kOptimizerNvme, Offload::kParamCpu,
          Offload::kParamNvme};
}

class EstimateMatchesTracker : public ::testing::TestWithParam<std::tuple<int, DType, int, int>> {};

TEST_P(EstimateMatchesTracker, ForEveryOffload) {
  const auto [stage, type, world, pattern] = GetParam();
  for (Offload offload : OffloadsFor(stage)) {
    EngineRun run;
    run.units = UnitPatterns()[static_cast<size_t>(pattern)];
    run.options = Options(stage, type, offload);
    run.world = world;
    run.passes = LayerwisePasses(static_cast<int>(run.units.size()));
    ExpectEstimateIsExact(run, OffloadName(offload));
  }
}

INSTANTIATE_TEST_SUITE_P(StagesTypesRanksUnits, EstimateMatchesTracker,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(1, 2, 4),
                                            ::testing::Values(0, 1, 2)));

// The settings that change the transients, each on its own, with two micro-batches per step
// (what overlapped reductions leave behind is alive in the next forward pass) and both orders
// of calls.
TEST(EngineMemoryEstimate, MatchesTheTrackerForEverySetting) {
  struct Setting {
    const char* name;
    std::function<void(ZeroOptions&)> apply;
    std::vector<UnitSpec> units = UnevenUnits();
  };
  const std::vector<Setting> settings = {
      {"defaults", [](ZeroOptions&) {}},
      {"overlap_comm, small bucket",
       [](ZeroOptions& o) {
         o.overlap_comm = true;
         o.reduce_bucket_size = 150;
       }},
      {"overlap_comm, everything in flight", [](ZeroOptions& o) { o.overlap_comm = true; }},
      {"all-reduce instead of reduce-scatter", [](ZeroOptions& o) { o.reduce_scatter = false; }},
      {"fp32 on the wire", [](ZeroOptions& o) { o.comm_type = DType::kFloat32; }},
      {"bf16 on the wire", [](ZeroOptions& o) { o.comm_type = DType::kBFloat16; }},
      {"small all-reduce bucket",
       [](ZeroOptions& o) {
         o.comm_type = DType::kBFloat16;
         o.reduce_bucket_size = 70;
       }},
      {"small prefetch bucket", [](ZeroOptions& o) { o.stage3_prefetch_bucket_size = 200; }},
      {"few live parameters", [](ZeroOptions& o) { o.stage3_max_live_parameters = 400; }},
      // Every pair of neighbours fits under the limit, but no more: each gathered unit must
      // stop counting when it is released, or backward's prefetches are refused.
      {"few live parameters, even units",
       [](ZeroOptions& o) { o.stage3_max_live_parameters = 250; },
       Units({100, 100, 100, 100, 100})},
      {"nothing persistent", [](ZeroOptions& o) { o.stage3_param_persistence_threshold = 0; }},
      {"everything persistent",
       [](ZeroOptions& o) { o.stage3_param_persistence_threshold = 1000000; }},
      {"optimizer in pageable memory",
       [](ZeroOptions& o) {
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.pin_memory = false;
       }},
      {"optimizer on nvme, one slot, sub-groups of 7",
       [](ZeroOptions& o) {
         o.offload_optimizer.place = Placement::kNvme;
         o.offload_optimizer.sub_group_size = 7;
         o.offload_optimizer.buffer_count = 1;
       }},
      {"optimizer on nvme, whole shard at once",
       [](ZeroOptions& o) { o.offload_optimizer.place = Placement::kNvme; }},
      // 8-bit AdamW: codes, absmaxes (per decay segment of the owned range) and the small units'
      // fp32 moments, on the device and offloaded; the toy units have three segments each.
      {"8-bit AdamW, every unit 8-bit",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 0;
       },
       zero_test::ToyUnits()},
      {"8-bit AdamW, small units in fp32",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 100;
       }},
      {"8-bit AdamW, optimizer in pinned memory",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 50;
         o.offload_optimizer.place = Placement::kHost;
       }},
      {"8-bit AdamW, optimizer in pageable memory, params on the host",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 0;
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.pin_memory = false;
         o.offload_param.place = Placement::kHost;
       },
       zero_test::ToyUnits()},
      // 8-bit moments on NVMe: the swapper's seven arrays, its sub-groups cut on block
      // boundaries (the uneven units' 300 and 261 span two blocks).
      {"8-bit AdamW, optimizer on nvme, sub-groups of 100",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 64;
         o.offload_optimizer.place = Placement::kNvme;
         o.offload_optimizer.sub_group_size = 100;
         o.offload_optimizer.buffer_count = 2;
       }},
      {"8-bit AdamW, optimizer and params on nvme, whole shard",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 0;
         o.offload_optimizer.place = Placement::kNvme;
         o.offload_param.place = Placement::kNvme;
       }},
      {"8-bit AdamW, half offloaded, pinned",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 64;
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.ratio = 0.5;
       }},
      {"8-bit AdamW, a quarter offloaded, pageable, params on the host",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 0;
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.pin_memory = false;
         o.offload_optimizer.ratio = 0.25;
         o.offload_param.place = Placement::kHost;
       },
       zero_test::ToyUnits()},
      // Partial offload: the leading units' states on the device, the rest offloaded; the
      // extremes leave one part empty.
      {"optimizer half offloaded, pinned",
       [](ZeroOptions& o) {
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.ratio = 0.5;
       }},
      {"optimizer a quarter offloaded, pageable",
       [](ZeroOptions& o) {
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.pin_memory = false;
         o.offload_optimizer.ratio = 0.25;
       }},
      {"optimizer three quarters offloaded, params on the host",
       [](ZeroOptions& o) {
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.ratio = 0.75;
         o.offload_param.place = Placement::kHost;
       }},
      {"optimizer offload ratio with an empty host part",
       [](ZeroOptions& o) {
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.ratio = 1e-6;
       }},
      {"optimizer offload ratio with an empty device part",
       [](ZeroOptions& o) {
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.ratio = 0.999;
       }},
      {"params in pageable memory",
       [](ZeroOptions& o) {
         o.offload_param.place = Placement::kHost;
         o.offload_param.pin_memory = false;
       }},
      {"params all on nvme, five buffers, optimizer on nvme",
       [](ZeroOptions& o) {
         o.offload_param.place = Placement::kNvme;
         o.offload_param.max_in_cpu = 0;
         o.offload_param.buffer_count = 5;
         o.offload_optimizer.place = Placement::kNvme;
         o.offload_optimizer.sub_group_size = 64;
       }},
  };
  for (const Setting& setting : settings) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType type : {DType::kFloat32, DType::kBFloat16}) {
        ZeroOptions options = Options(stage, type, Offload::kNone);
        setting.apply(options);
        if (!ValidateZeroOptions(options).ok()) continue;  // offload the stage cannot take
        // Two ranks in layer order, four in GPT-2's.
        for (const bool tied : {false, true}) {
          EngineRun run;
          run.units = setting.units;
          run.options = options;
          run.world = tied ? 4 : 2;
          const int n = static_cast<int>(run.units.size());
          run.passes = tied ? TiedEmbeddingPasses(n) : LayerwisePasses(n);
          run.micro_batches = 2;
          ExpectEstimateIsExact(
              run, std::string(setting.name) + ", stage " + std::to_string(stage) + ", " +
                       (type == DType::kFloat32 ? "fp32" : "bf16") +
                       (tied ? ", tied embedding, world 4" : ", layerwise, world 2"));
        }
      }
    }
  }
}

// On an accelerator the engine adds the host update's pinned staging (ZeRO-Offload) and, with
// parameter offload, the device buffer the shards go up and come down through: the estimate for
// an accelerator counts both, to the byte.
TEST(EngineMemoryEstimate, OnAnAcceleratorTheStagingIsCounted) {
  const std::vector<std::pair<const char*, std::function<void(ZeroOptions&)>>> settings = {
      {"params on the host", [](ZeroOptions& o) { o.offload_param.place = Placement::kHost; }},
      {"params on nvme, optimizer on the host",
       [](ZeroOptions& o) {
         o.offload_param.place = Placement::kNvme;
         o.offload_param.max_in_cpu = 0;
         o.offload_optimizer.place = Placement::kHost;
       }},
      {"params pageable, optimizer on nvme",
       [](ZeroOptions& o) {
         o.offload_param.place = Placement::kHost;
         o.offload_param.pin_memory = false;
         o.offload_optimizer.place = Placement::kNvme;
         o.offload_optimizer.sub_group_size = 100;
       }},
      {"8-bit AdamW half offloaded, params on the host",
       [](ZeroOptions& o) {
         o.adam.eight_bit = true;
         o.adam.min_8bit_size = 64;
         o.offload_optimizer.place = Placement::kHost;
         o.offload_optimizer.ratio = 0.5;
         o.offload_param.place = Placement::kHost;
       }},
      {"params partly in host memory, partly on nvme; optimizer on the host",
       [](ZeroOptions& o) {
         o.offload_param.place = Placement::kNvme;
         o.offload_param.max_in_cpu = 200;  // of the shards 3, 150, 131, 1, 32, 65, 2
         o.offload_optimizer.place = Placement::kHost;
       }},
      {"optimizer on the host",
       [](ZeroOptions& o) { o.offload_optimizer.place = Placement::kHost; }},
      {"optimizer on nvme",
       [](ZeroOptions& o) {
         o.offload_optimizer.place = Placement::kNvme;
         o.offload_optimizer.sub_group_size = 100;
       }},
  };
  for (const auto& [name, apply] : settings) {
    for (DType type : {DType::kFloat32, DType::kBFloat16}) {
      // Without, and with a prefetch at the end of the backward pass (of unit 1, sharded: unit 0
      // is persistent): the next micro-batch's forward, which starts on unit 0, leaves it for
      // later; the step drops the last one's.
      for (bool trailing : {false, true}) {
        EngineRun run;
        run.units = UnevenUnits();
        run.options = Options(3, type, Offload::kNone);
        apply(run.options);
        run.world = 2;
        run.passes = LayerwisePasses(static_cast<int>(run.units.size()));
        if (trailing) run.passes.backward.push_back({StoreCall::Op::kPrefetch, 1});
        run.micro_batches = 2;
        run.accelerator = true;
        ExpectEstimateIsExact(run, std::string(name) + ", " + DTypeName(type) +
                                       (trailing ? ", prefetch at the end" : ""));
      }
    }
  }
  // A frozen base at stage 3 with its parameters offloaded has the staging too (it is allocated
  // before anything a frozen engine leaves out).
  ZeroOptions frozen = Options(3, DType::kBFloat16, Offload::kParamNvme);
  frozen.frozen = true;
  const std::vector<UnitSpec> units = UnevenUnits();
  ModelPasses passes = LayerwisePasses(7);  // without gradients: the base's weights only
  std::erase_if(passes.backward, [](const StoreCall& call) {
    return call.op == StoreCall::Op::kAcquireGrads || call.op == StoreCall::Op::kReleaseGrads;
  });
  auto on_cpu = EstimateEngineMemory(units, frozen, 2, 0, passes, 1, false);
  auto on_gpu = EstimateEngineMemory(units, frozen, 2, 0, passes, 1, true);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().ToString();
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().ToString();
  auto plan = PartitionPlan::Build(units, 2, 0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(ParamStagingBytes(*plan, frozen), 150 * 2);  // the 300-element unit's shard
  EXPECT_EQ(on_gpu->Resident(Place::kDevice, Category::kParam) -
                on_cpu->Resident(Place::kDevice, Category::kParam),
            150 * 2);
}

TEST(EngineMemoryEstimate, PartialOffloadStagesOnlyTheHostPartsUnits) {
  // The host update's staging holds the largest owned range among the offloaded units: with
  // units of 10, 300, 20 and 40 elements on one rank, ratio 0.1 keeps the first three (330 of
  // 370) on the device and stages 40 elements; ratio 1 stages the 300-element unit.
  auto plan = PartitionPlan::Build(Units({10, 300, 20, 40}), 1, 0);
  ASSERT_TRUE(plan.ok());
  ZeroOptions options;
  options.stage = 1;
  options.compute_type = DType::kBFloat16;
  options.offload_optimizer.place = Placement::kHost;
  EXPECT_EQ(HostUpdateStagingBytes(*plan, options), 300 * 2);
  EXPECT_EQ(HostGradBytes(*plan, options), 370 * 2);  // every unit's gradients
  options.offload_optimizer.ratio = 0.1;
  EXPECT_EQ(DeviceStateElements(*plan, options), 330);
  EXPECT_EQ(HostUpdateStagingBytes(*plan, options), 40 * 2);
  EXPECT_EQ(HostGradBytes(*plan, options), 40 * 2);
  // bf16: master, m and v in both parts.
  const ModelStateBytes bytes = ModelStateBytesFor(*plan, *plan, options);
  EXPECT_EQ(bytes.optimizer, 12 * 370);
  options.compute_type = DType::kFloat32;
  // fp32: the device part's master is the model's copy.
  EXPECT_EQ(ModelStateBytesFor(*plan, *plan, options).optimizer, 8 * 330 + 12 * 40);
  // 8-bit moments (every unit): codes 2 bytes an element, absmaxes 8 bytes a block of 256 (the
  // 300-element unit has two blocks), and the master of the offloaded part alone in fp32.
  options.adam.eight_bit = true;
  options.adam.min_8bit_size = 0;
  EXPECT_EQ(ModelStateBytesFor(*plan, *plan, options).optimizer,
            2 * 370 + 8 * (1 + 2 + 1 + 1) + 4 * 40);
  options.compute_type = DType::kBFloat16;  // both parts keep a master
  EXPECT_EQ(ModelStateBytesFor(*plan, *plan, options).optimizer,
            2 * 370 + 8 * (1 + 2 + 1 + 1) + 4 * 370);
}

TEST(EngineMemoryEstimate, ModelStatesFollowTheZeroPaperWithoutPadding) {
  // Units that divide evenly on every world size and none kept whole: the formula exactly.
  const std::vector<UnitSpec> units = Units({64, 256, 32, 128});
  const int64_t psi = 480;
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    const bool mixed = type != DType::kFloat32;
    for (int stage = 0; stage <= 3; ++stage) {
      for (int world : {1, 2, 4}) {
        ZeroOptions options = Options(stage, type, Offload::kNone);
        options.stage3_param_persistence_threshold = 0;
        auto est = EstimateEngineMemory(units, options, world, 0);
        ASSERT_TRUE(est.ok()) << est.status().ToString();
        const int64_t formula = ZeroPaperModelStateBytes(psi, stage, world, mixed);
        const ModelStateBytes& s = est->model_states;
        EXPECT_EQ(s.params + s.grads + s.optimizer, formula)
            << "stage " << stage << " world " << world << " mixed " << mixed;
        int64_t device_states = 0;
        for (Category c : {Category::kParam, Category::kGrad, Category::kOptimizer}) {
          device_states += est->Resident(Place::kDevice, c);
        }
        EXPECT_EQ(device_states, formula);
      }
    }
  }
}

TEST(EngineMemoryEstimate, ZeroPaperFormulaTerms) {
  const int64_t psi = 1000;
  // Mixed precision, K = 12.
  EXPECT_EQ(ZeroPaperModelStateBytes(psi, 0, 4, true), 16 * psi);
  EXPECT_EQ(ZeroPaperModelStateBytes(psi, 1, 4, true), 4 * psi + 12 * psi / 4);
  EXPECT_EQ(ZeroPaperModelStateBytes(psi, 2, 4, true), 2 * psi + 14 * psi / 4);
  EXPECT_EQ(ZeroPaperModelStateBytes(psi, 3, 4, true), 16 * psi / 4);
  // fp32, K = 8: the weights are the master copy.
  EXPECT_EQ(ZeroPaperModelStateBytes(psi, 0, 4, false), 16 * psi);
  EXPECT_EQ(ZeroPaperModelStateBytes(psi, 1, 4, false), 8 * psi + 8 * psi / 4);
  EXPECT_EQ(ZeroPaperModelStateBytes(psi, 2, 4, false), 4 * psi + 12 * psi / 4);
  EXPECT_EQ(ZeroPaperModelStateBytes(psi, 3, 4, false), 16 * psi / 4);
  // One rank: every stage holds everything.
  for (int stage = 0; stage <= 3; ++stage) {
    EXPECT_EQ(ZeroPaperModelStateBytes(psi, stage, 1, true), 16 * psi);
  }
  // Ψ/N rounds up to whole elements.
  EXPECT_EQ(ZeroPaperModelStateBytes(10, 3, 4, true), 16 * 3);
}

TEST(EngineMemoryEstimate, Stage3ForwardHoldsTheLargestPairOfGatheredUnits) {
  // fp32, layer by layer: unit u gathered and unit u + 1 prefetched at once; no working copies.
  const std::vector<UnitSpec> units = UnevenUnits();
  ZeroOptions options = Options(3, DType::kFloat32, Offload::kNone);
  options.stage3_param_persistence_threshold = 0;
  for (int world : {1, 2, 4}) {
    auto plan = PartitionPlan::Build(units, world, 0);
    ASSERT_TRUE(plan.ok());
    int64_t largest_pair = 0;
    for (int u = 0; u + 1 < plan->num_units(); ++u) {
      largest_pair = std::max(largest_pair, plan->unit(u).padded + plan->unit(u + 1).padded);
    }
    auto est = EstimateEngineMemory(units, options, world, 0);
    ASSERT_TRUE(est.ok()) << est.status().ToString();
    EXPECT_EQ(est->Extra(Phase::kForward, Place::kDevice, Category::kParam), 4 * largest_pair)
        << "world " << world;
    EXPECT_EQ(est->ExtraTotal(Phase::kForward, Place::kDevice), 4 * largest_pair);
    // The step allocates nothing in stage 3 without offload.
    EXPECT_EQ(est->ExtraTotal(Phase::kOptimizer, Place::kDevice), 0);
  }
}

TEST(EngineMemoryEstimate, PeakTotalWithAddsActivationsToTheirPhase) {
  auto est =
      EstimateEngineMemory(UnevenUnits(), Options(3, DType::kBFloat16, Offload::kNone), 2, 0);
  ASSERT_TRUE(est.ok());
  const int64_t resident = est->ResidentTotal(Place::kDevice);
  const int64_t backward = est->ExtraTotal(Phase::kBackward, Place::kDevice);
  EngineMemoryEstimate::PhaseBytes in_backward{};
  in_backward[int(Phase::kBackward)] = 1000000;
  EXPECT_EQ(est->PeakTotalWith(Place::kDevice, in_backward), resident + backward + 1000000);
  EXPECT_EQ(est->PeakTotalWith(Place::kDevice, {}), est->PeakTotal(Place::kDevice));
  EXPECT_EQ(est->PeakTotalWith(Place::kHost, {}), 0);
}

TEST(EngineMemoryEstimate, RefusesWhatCreateRefuses) {
  const std::vector<UnitSpec> units = Units({5, 300});
  ZeroOptions stage4 = Options(0, DType::kFloat32, Offload::kNone);
  stage4.stage = 4;
  EXPECT_EQ(EstimateEngineMemory(units, stage4, 1, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(
      EstimateEngineMemory(units, Options(2, DType::kFloat32, Offload::kParamCpu), 2, 0).ok());
  EXPECT_FALSE(
      EstimateEngineMemory(units, Options(0, DType::kFloat32, Offload::kOptimizerCpu), 2, 0).ok());
  ZeroOptions small_buffers = Options(3, DType::kFloat32, Offload::kParamNvme);
  small_buffers.offload_param.buffer_size = 10;
  auto refused = EstimateEngineMemory(units, small_buffers, 1, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("offload_param.buffer_size"), std::string::npos);
  EXPECT_FALSE(EstimateEngineMemory({}, Options(0, DType::kFloat32, Offload::kNone), 1, 0).ok());
}

TEST(EngineMemoryEstimate, RefusesPassesThatBreakTheProtocol) {
  using Op = StoreCall::Op;
  const std::vector<UnitSpec> units = Units({5, 300});
  const ZeroOptions options = Options(3, DType::kFloat32, Offload::kNone);
  const std::vector<ModelPasses> broken = {
      {{{Op::kReleaseParams, 0}}, {}},
      {{{Op::kAcquireParams, 0}}, {}},  // never released
      {{{Op::kAcquireGrads, 0}}, {}},   // gradients in the forward pass
      {{}, {{Op::kAcquireGrads, 1}, {Op::kAcquireGrads, 1}}},
      {{}, {{Op::kReleaseGrads, 1}}},
      {{{Op::kPrefetch, 2}}, {}},
  };
  for (size_t i = 0; i < broken.size(); ++i) {
    auto est = EstimateEngineMemory(units, options, 2, 0, broken[i]);
    EXPECT_EQ(est.status().code(), StatusCode::kInvalidArgument) << "case " << i;
  }
}

}  // namespace
}  // namespace hoist::zero
