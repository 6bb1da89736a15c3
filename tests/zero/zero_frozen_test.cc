// Frozen weights (ZeroOptions::frozen, a LoRA fine-tune's base): the engine keeps the
// compute-type weights alone, partitioned as the stage says, refuses gradients and steps, and the
// estimate of a frozen engine beside a trained one (JoinedParamStore, as the trainer builds them)
// equals their trackers byte for byte, phase by phase.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/memory_tracker.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"
#include "offload/memory_storage.h"
#include "tests/zero/zero_test_util.h"
#include "zero/memory_estimate.h"
#include "zero/param_store.h"
#include "zero/zero_engine.h"

namespace hoist::zero {
namespace {

using Table = MemorySnapshot::Table;

offload::StorageFactory MemoryFiles() {
  return [](const std::string& path,
            int64_t bytes) -> StatusOr<std::unique_ptr<offload::BlockStorage>> {
    return std::unique_ptr<offload::BlockStorage>(new offload::MemoryStorage(path, bytes, 4096));
  };
}

// Small adapters beside the toy model's blocks: one per base unit but the first and last.
std::vector<UnitSpec> AdapterUnits() {
  return {{"lora0", 24, {{0, 24, true}}}, {"lora1", 24, {{0, 24, true}}}};
}

// A LoRA model's calls on the joined store: base units 0..3 (embed, block0, block1, norm), the
// adapters 4 and 5 beside blocks 1 and 2; no gradient of a base unit is asked for.
ModelPasses LoraPasses() {
  using Op = StoreCall::Op;
  ModelPasses passes;
  auto& f = passes.forward;
  for (int u = 0; u < 4; ++u) {
    f.push_back({Op::kAcquireParams, u});
    if (u == 1 || u == 2) f.push_back({Op::kAcquireParams, 3 + u});
    if (u < 3) f.push_back({Op::kPrefetch, u + 1});
    if (u == 1 || u == 2) f.push_back({Op::kReleaseParams, 3 + u});
    f.push_back({Op::kReleaseParams, u});
  }
  auto& b = passes.backward;
  for (int u = 3; u >= 0; --u) {
    b.push_back({Op::kAcquireParams, u});
    if (u > 0) b.push_back({Op::kPrefetch, u - 1});
    if (u == 1 || u == 2) {
      b.push_back({Op::kAcquireParams, 3 + u});
      b.push_back({Op::kAcquireGrads, 3 + u});
      b.push_back({Op::kReleaseGrads, 3 + u});
      b.push_back({Op::kReleaseParams, 3 + u});
    }
    b.push_back({Op::kReleaseParams, u});
  }
  return passes;
}

ZeroOptions BaseOptions(int stage, DType type, bool params_on_nvme) {
  ZeroOptions options;
  options.stage = stage;
  options.compute_type = type;
  options.comm_type = type;
  options.stage3_param_persistence_threshold = 10;
  options.frozen = true;
  if (params_on_nvme) {
    options.offload_param.place = Placement::kNvme;
    options.offload_param.max_in_cpu = 30;
    options.offload_param.buffer_count = 2;
    options.offload_param.open_storage = MemoryFiles();
  }
  return options;
}

ZeroOptions AdapterOptions(int stage, DType type, bool optimizer_on_host) {
  ZeroOptions options;
  options.stage = stage;
  options.compute_type = type;
  options.comm_type = type;
  options.stage3_param_persistence_threshold = 10;
  if (optimizer_on_host) options.offload_optimizer.place = Placement::kHost;
  return options;
}

TEST(FrozenEngine, KeepsTheWeightsAloneAndRefusesGradientsAndSteps) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType type : {DType::kFloat32, DType::kBFloat16}) {
      for (int world : {1, 2}) {
        SCOPED_TRACE("stage " + std::to_string(stage) + " " + DTypeName(type) + " on " +
                     std::to_string(world));
        const std::vector<UnitSpec> units = zero_test::ToyUnits();
        auto group = comm::ThreadGroup::Create(world, 30.0);
        ASSERT_TRUE(group.ok());
        std::vector<std::thread> threads;
        std::vector<std::string> failures(static_cast<size_t>(world));
        for (int r = 0; r < world; ++r) {
          threads.emplace_back([&, r] {
            std::string& failure = failures[static_cast<size_t>(r)];
            MemoryTracker tracker;
            CpuDevice device(Place::kDevice, &tracker);
            kernels::CpuBackend backend(&device);
            auto engine = ZeroEngine::Create(units, BaseOptions(stage, type, false),
                                             &(*group)->comm(r), &backend);
            if (!engine.ok()) {
              failure = engine.status().ToString();
              return;
            }
            ZeroEngine& e = **engine;
            Status init = e.Initialize([&](int u, float* values) {
              for (int64_t i = 0; i < units[u].size; ++i) {
                values[i] = zero_test::InitialValue(u, i);
              }
            });
            if (!init.ok()) {
              failure = init.ToString();
              return;
            }
            const MemorySnapshot memory = tracker.Snapshot();
            for (int p = 0; p < kNumPlaces; ++p) {
              if (memory.current[p][int(Category::kGrad)] != 0 ||
                  memory.current[p][int(Category::kOptimizer)] != 0) {
                failure += std::string("gradient or optimizer bytes in ") + PlaceName(Place(p));
              }
            }
            const ModelStateBytes states = e.model_state_bytes();
            if (states.grads != 0 || states.optimizer != 0 || states.params <= 0) {
              failure += " model_state_bytes counts more than the weights";
            }
            if (e.state_elements() != 0) failure += " state_elements of frozen weights";
            // Every unit comes back as it went in, rounded to the compute type.
            for (int u = 0; u < static_cast<int>(units.size()); ++u) {
              std::vector<float> got(static_cast<size_t>(units[u].size));
              kernels::cpu::ToFloat(e.AcquireParams(u).value(), e.param_type(), got.data(),
                                    units[u].size);
              for (int64_t i = 0; i < units[u].size; ++i) {
                // The value rounded to the compute type and widened back.
                const float value = zero_test::InitialValue(u, i);
                uint16_t half[2];
                kernels::cpu::FromFloat(&value, half, type, 1);
                float want = value;
                if (type != DType::kFloat32) kernels::cpu::ToFloat(half, type, &want, 1);
                if (got[static_cast<size_t>(i)] != want) {
                  failure += " unit " + std::to_string(u) + " element " + std::to_string(i);
                  break;
                }
              }
              e.ReleaseParams(u);
            }
            if (e.Step(0.1f, 1.0f, 0.0f).status().code() != StatusCode::kFailedPrecondition) {
              failure += " Step on frozen weights did not fail";
            }
            if (e.ZeroGrads().code() != StatusCode::kFailedPrecondition) {
              failure += " ZeroGrads on frozen weights did not fail";
            }
            if (e.AcquireGrads(1).ok() || e.status().code() != StatusCode::kFailedPrecondition ||
                e.status().message().find("block0") == std::string::npos) {
              failure += " AcquireGrads: " + e.status().ToString();
            }
          });
        }
        for (auto& t : threads) t.join();
        for (int r = 0; r < world; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << r;
      }
    }
  }
}

TEST(FrozenEngine, RefusesAnOffloadedOptimizer) {
  ZeroOptions options = BaseOptions(2, DType::kFloat32, false);
  options.offload_optimizer.place = Placement::kHost;
  const Status status = ValidateZeroOptions(options);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("frozen"), std::string::npos) << status.ToString();
}

// One rank's trackers through two steps of the joined engines, against the estimate.
struct Case {
  int stage;
  DType type;
  int world;
  bool params_on_nvme;
  bool optimizer_on_host;
};

void ExpectJoinedEstimateIsExact(const Case& c) {
  SCOPED_TRACE("stage " + std::to_string(c.stage) + " " + DTypeName(c.type) + " on " +
               std::to_string(c.world) + (c.params_on_nvme ? ", base on nvme" : "") +
               (c.optimizer_on_host ? ", adapters' optimizer on the host" : ""));
  const std::vector<UnitSpec> base = zero_test::ToyUnits(), adapters = AdapterUnits();
  const ModelPasses passes = LoraPasses();
  auto group = comm::ThreadGroup::Create(c.world, 30.0);
  ASSERT_TRUE(group.ok());
  struct Measured {
    Status status;
    Table created{}, end{};
    std::array<Table, kNumPhases> peak{};
    std::array<std::array<int64_t, kNumPlaces>, kNumPhases> peak_total{};
    ModelStateBytes states;
  };
  std::vector<Measured> measured(static_cast<size_t>(c.world));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world; ++r) {
    threads.emplace_back([&, r] {
      Measured& m = measured[static_cast<size_t>(r)];
      MemoryTracker tracker;
      CpuDevice device(Place::kDevice, &tracker);
      kernels::CpuBackend backend(&device);
      ZeroOptions base_options = BaseOptions(c.stage, c.type, c.params_on_nvme);
      base_options.offload_param.nvme_file = "params-rank" + std::to_string(r);
      auto frozen = ZeroEngine::Create(base, base_options, &(*group)->comm(r), &backend);
      auto trained =
          ZeroEngine::Create(adapters, AdapterOptions(c.stage, c.type, c.optimizer_on_host),
                             &(*group)->comm(r), &backend);
      if (!frozen.ok() || !trained.ok()) {
        m.status = frozen.ok() ? trained.status() : frozen.status();
        return;
      }
      auto fill = [](int u, float* values, int64_t size) {
        for (int64_t i = 0; i < size; ++i) values[i] = zero_test::InitialValue(u, i);
      };
      m.status = (*frozen)->Initialize([&](int u, float* v) { fill(u, v, base[u].size); });
      if (m.status.ok()) {
        m.status = (*trained)->Initialize([&](int u, float* v) { fill(u, v, adapters[u].size); });
      }
      m.created = tracker.Snapshot().current;
      JoinedParamStore store(frozen->get(), static_cast<int>(base.size()), trained->get());
      auto drive = [&](const std::vector<StoreCall>& calls, int step) {
        for (const StoreCall& call : calls) {
          switch (call.op) {
            case StoreCall::Op::kAcquireParams: (void)store.AcquireParams(call.unit).value(); break;
            case StoreCall::Op::kReleaseParams: store.ReleaseParams(call.unit); break;
            case StoreCall::Op::kPrefetch: store.Prefetch(call.unit); break;
            case StoreCall::Op::kAcquireGrads: {
              float* g = store.AcquireGrads(call.unit).value();
              const int u = call.unit - static_cast<int>(base.size());
              for (int64_t i = 0; g != nullptr && i < adapters[u].size; ++i) {
                g[i] += zero_test::Target(step, 0, u, i);
              }
              break;
            }
            case StoreCall::Op::kReleaseGrads: store.ReleaseGrads(call.unit); break;
          }
        }
      };
      auto phase = [&](Phase which, const std::function<void()>& body) {
        tracker.ResetPeaks();
        body();
        const MemorySnapshot seen = tracker.Snapshot();
        for (int p = 0; p < kNumPlaces; ++p) {
          for (int k = 0; k < kNumCategories; ++k) {
            m.peak[int(which)][p][k] = std::max(m.peak[int(which)][p][k], seen.peak[p][k]);
          }
          m.peak_total[int(which)][p] = std::max(m.peak_total[int(which)][p], seen.peak_total[p]);
        }
      };
      for (int step = 0; step < 2 && m.status.ok(); ++step) {
        phase(Phase::kForward, [&] {
          m.status = (*trained)->ZeroGrads();
          drive(passes.forward, step);
        });
        phase(Phase::kBackward, [&] { drive(passes.backward, step); });
        phase(Phase::kOptimizer, [&] {
          auto result = (*trained)->Step(0.01f, 1.0f, 1.0f);
          if (m.status.ok()) m.status = result.status();
        });
        if (m.status.ok()) m.status = store.status();
      }
      m.end = tracker.Snapshot().current;
      const ModelStateBytes a = (*frozen)->model_state_bytes(), b = (*trained)->model_state_bytes();
      m.states = {a.params + b.params, a.grads + b.grads, a.optimizer + b.optimizer};
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < c.world; ++r) {
    const Measured& m = measured[static_cast<size_t>(r)];
    ASSERT_TRUE(m.status.ok()) << "rank " << r << ": " << m.status.ToString();
    auto estimated = EstimateEngineMemory(
        {EngineUnits{base, BaseOptions(c.stage, c.type, c.params_on_nvme)},
         EngineUnits{adapters, AdapterOptions(c.stage, c.type, c.optimizer_on_host)}},
        c.world, r, passes);
    ASSERT_TRUE(estimated.ok()) << estimated.status().ToString();
    const EngineMemoryEstimate& est = *estimated;
    for (int p = 0; p < kNumPlaces; ++p) {
      for (int k = 0; k < kNumCategories; ++k) {
        const std::string cell = std::string(PlaceName(Place(p))) + "/" +
                                 CategoryName(Category(k)) + " rank " + std::to_string(r);
        EXPECT_EQ(m.created[p][k], est.resident[p][k]) << "resident " << cell;
        EXPECT_EQ(m.end[p][k], est.resident[p][k]) << "after the run " << cell;
        for (Phase phase : kEstimatePhases) {
          const int ph = int(phase);
          EXPECT_EQ(m.peak[ph][p][k], est.resident[p][k] + est.extra[ph][p][k])
              << PhaseName(Phase(ph)) << " " << cell;
        }
      }
      for (Phase phase : kEstimatePhases) {
        const int ph = int(phase);
        EXPECT_EQ(m.peak_total[ph][p], est.ResidentTotal(Place(p)) + est.extra_total[ph][p])
            << PhaseName(Phase(ph)) << " total " << PlaceName(Place(p));
      }
    }
    // Gradients and optimizer states are the adapters' alone.
    auto adapters_alone = EstimateEngineMemory(
        {EngineUnits{adapters, AdapterOptions(c.stage, c.type, c.optimizer_on_host)}}, c.world, r,
        LayerwisePasses(static_cast<int>(adapters.size())));
    ASSERT_TRUE(adapters_alone.ok());
    EXPECT_EQ(m.states.grads, adapters_alone->model_states.grads);
    EXPECT_EQ(m.states.optimizer, adapters_alone->model_states.optimizer);
    EXPECT_EQ(m.states.params, est.model_states.params);
  }
}

TEST(FrozenEngine, EstimateOfTheBaseBesideTheAdaptersMatchesTheTrackers) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType type : {DType::kFloat32, DType::kBFloat16}) {
      for (int world : {1, 2}) {
        ExpectJoinedEstimateIsExact({stage, type, world, false, false});
        if (stage > 0) ExpectJoinedEstimateIsExact({stage, type, world, false, true});
        if (stage == 3) ExpectJoinedEstimateIsExact({stage, type, world, true, true});
      }
    }
  }
}

TEST(FrozenEngine, EstimateRefusesGradientsOfAFrozenUnit) {
  ModelPasses passes = LoraPasses();
  passes.backward.insert(passes.backward.begin(), {StoreCall::Op::kAcquireGrads, 1});
  auto estimated = EstimateEngineMemory(
      {EngineUnits{zero_test::ToyUnits(), BaseOptions(1, DType::kFloat32, false)},
       EngineUnits{AdapterUnits(), AdapterOptions(1, DType::kFloat32, false)}},
      1, 0, passes);
  EXPECT_EQ(estimated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(estimated.status().message().find("frozen"), std::string::npos);
}

}  // namespace
}  // namespace hoist::zero
