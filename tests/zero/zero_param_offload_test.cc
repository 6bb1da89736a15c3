// Parameter offload (stage 3) against the run that keeps the shards on the device: the toy model
// on 1 and 2 thread ranks with the parameter shards in host memory or on "NVMe" (a scratch file),
// the optimizer states on the device, in host memory or on NVMe. The weights must match bit for
// bit, the shards must leave the device, a gather started ahead must serve the current weights,
// and every storage fault must stop every rank at the step.
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/live_memory.h"
#include "offload/fault_injecting_storage.h"
#include "tests/zero/offload_test_util.h"
#include "zero/memory_estimate.h"

namespace hoist::zero {
namespace {

using namespace zero_test;  // NOLINT(google-build-using-namespace): the shared harness

namespace fs = std::filesystem;

TEST(ZeroParamOffload, MatchesTheDeviceRunBitForBit) {
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    for (int world : {1, 2}) {
      const RunOptions device = Base(3, world, type);
      const std::vector<RankResult> want = Train(device);
      for (Placement params : {Placement::kHost, Placement::kNvme}) {
        for (Placement states : {Placement::kDevice, Placement::kHost, Placement::kNvme}) {
          // max_in_cpu 0: every shard on NVMe; 30: the first unit's shard stays in memory.
          for (int64_t max_in_cpu : {int64_t{0}, int64_t{30}}) {
            for (int buffers : {1, 5}) {
              ScratchDir dir;
              const std::vector<RankResult> got =
                  Train(ParamsOffloaded(device, params, states, dir, max_in_cpu, buffers));
              for (int r = 0; r < world; ++r) {
                ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
                EXPECT_EQ(got[r].params, want[r].params)
                    << "type " << int(type) << " world " << world << " params " << int(params)
                    << " states " << int(states) << " max_in_cpu " << max_in_cpu << " buffers "
                    << buffers << " rank " << r;
              }
              EXPECT_TRUE(fs::is_empty(dir.path()));
            }
          }
        }
      }
    }
  }
}

TEST(ZeroParamOffload, TheShardsMoveOffTheDevice) {
  for (Placement params : {Placement::kHost, Placement::kNvme}) {
    ScratchDir dir;
    RunOptions run = ParamsOffloaded(Base(3, 2, DType::kBFloat16), params, Placement::kDevice, dir,
                                     /*max_in_cpu=*/0, 2);
    run.steps = 1;
    const std::vector<RankResult> results = Train(run);
    for (const RankResult& r : results) {
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      const auto param = int(Category::kParam);
      // Only the persistent unit ("norm", padded to 2) stays whole on the device.
      EXPECT_EQ(r.memory.current[int(Place::kDevice)][param], 2 * r.plan.unit(3).padded);
      int64_t shard_bytes = 0, file_bytes = 0;
      for (int u = 0; u < r.plan.num_units(); ++u) {
        shard_bytes += 2 * r.plan.unit(u).shard;
        file_bytes += (2 * r.plan.unit(u).shard + 4095) / 4096 * 4096;
      }
      EXPECT_EQ(r.states.params, shard_bytes + 2 * r.plan.unit(3).padded);
      if (params == Placement::kHost) {
        EXPECT_GE(r.memory.current[int(Place::kHostPinned)][param], shard_bytes);
        EXPECT_EQ(r.memory.current[int(Place::kNvme)][param], 0);
      } else {
        EXPECT_EQ(r.memory.current[int(Place::kNvme)][param], file_bytes);
        EXPECT_GT(r.offload.nvme_read_bytes, 0);
        EXPECT_GT(r.offload.nvme_write_bytes, 0);
      }
    }
  }
}

// A shard kept in host memory is gathered ahead, as on the device: Prefetch starts the next
// unit's gather (its buffer allocated at once). On an accelerator the shard goes up through the one
// device staging buffer, so a second prefetch waits until the first gather has been acquired; a
// shard on NVMe is only read ahead, and gathered at AcquireParams.
TEST(ZeroParamOffload, ShardsInHostMemoryAreGatheredAhead) {
  ScratchDir dir;
  for (bool accelerator : {false, true}) {
    std::unique_ptr<live_memory::ScopedEnable> checked;
    if (accelerator) checked = std::make_unique<live_memory::ScopedEnable>();
    for (Placement place : {Placement::kHost, Placement::kNvme}) {
      ParamOffloadedEngine run(place, dir);
      ASSERT_TRUE(run.status().ok()) << run.status().ToString();
      ZeroEngine& e = run.engine();
      ASSERT_TRUE(e.Initialize([](int, float* out) { out[0] = 1.0f; }).ok());
      auto gathered = [&] {
        return run.tracker().Snapshot().current[int(Place::kDevice)][int(Category::kParam)];
      };
      const int64_t resident = gathered();
      auto unit_bytes = [&](int u) { return GatheredUnitBytes(e.plan().unit(u), run.options()); };
      const std::string what = std::string(accelerator ? "accelerator" : "cpu") +
                               (place == Placement::kHost ? ", host" : ", nvme");
      const bool ahead = place == Placement::kHost;
      e.Prefetch(1);
      EXPECT_EQ(gathered(), resident + (ahead ? unit_bytes(1) : 0)) << what;
      e.Prefetch(2);
      EXPECT_EQ(gathered(), resident + (ahead ? unit_bytes(1) : 0) +
                                (ahead && !accelerator ? unit_bytes(2) : 0))
          << what;
      ASSERT_TRUE(e.AcquireParams(1).ok());
      e.Prefetch(2);  // the staging is free again
      EXPECT_EQ(gathered(), resident + unit_bytes(1) + (ahead ? unit_bytes(2) : 0)) << what;
      ASSERT_TRUE(e.AcquireParams(2).ok());
      e.ReleaseParams(2);
      e.ReleaseParams(1);
      EXPECT_EQ(gathered(), resident) << what;
      EXPECT_TRUE(e.status().ok()) << e.status().ToString();
    }
  }
}

// A gather started ahead serves the weights as they are when it is used: a step or a new
// Initialize between the prefetch and the use drops it (the same weights as an engine that
// never prefetched), and every unit's gather holds that unit's own values.
TEST(ZeroParamOffload, APrefetchedGatherNeverServesOldWeights) {
  ScratchDir dir;
  for (bool accelerator : {false, true}) {
    std::unique_ptr<live_memory::ScopedEnable> checked;
    if (accelerator) checked = std::make_unique<live_memory::ScopedEnable>();
    for (Placement place : {Placement::kHost, Placement::kNvme}) {
      const std::string what = std::string(accelerator ? "accelerator" : "cpu") +
                               (place == Placement::kHost ? ", host" : ", nvme");
      auto init = [](ZeroEngine& e, const std::vector<UnitSpec>& units, float offset) {
        return e.Initialize([&](int u, float* out) {
          for (int64_t i = 0; i < units[size_t(u)].size; ++i) out[i] = InitialValue(u, i) + offset;
        });
      };
      // What an engine that never prefetched serves after one step.
      std::vector<std::vector<float>> stepped;
      {
        ParamOffloadedEngine fresh(place, dir, /*file=*/1);
        ASSERT_TRUE(fresh.status().ok()) << fresh.status().ToString();
        ZeroEngine& f = fresh.engine();
        ASSERT_TRUE(init(f, fresh.units(), 0.0f).ok());
        ASSERT_TRUE(f.ZeroGrads().ok());
        MicroBatch(f, fresh.units(), 0, 0, 1.0f, false, &fresh.stream());
        ASSERT_TRUE(f.Step(0.1f, 1.0f, 0.0f).ok());
        for (int u = 0; u < int(fresh.units().size()); ++u) stepped.push_back(fresh.Weights(u));
      }
      ParamOffloadedEngine run(place, dir);
      ASSERT_TRUE(run.status().ok()) << run.status().ToString();
      ZeroEngine& e = run.engine();
      const std::vector<UnitSpec>& units = run.units();
      ASSERT_TRUE(init(e, units, 0.0f).ok());
      // Each unit's own values: with the shards in host memory two gathers in flight together
      // on the CPU; on an accelerator the second starts once the first has freed the staging.
      e.Prefetch(1);
      e.Prefetch(2);
      const std::vector<float> one = run.Weights(1);
      e.Prefetch(2);
      const std::vector<float> two = run.Weights(2);
      for (int64_t i = 0; i < units[1].size; ++i) {
        ASSERT_NEAR(one[size_t(i)], InitialValue(1, i), 1e-2 * std::abs(InitialValue(1, i)))
            << what << ", element " << i;
        ASSERT_NEAR(two[size_t(i)], InitialValue(2, i), 1e-2 * std::abs(InitialValue(2, i)))
            << what << ", element " << i;
      }
      // Prefetched before the step, used after it.
      ASSERT_TRUE(e.ZeroGrads().ok());
      MicroBatch(e, units, 0, 0, 1.0f, false, &run.stream());
      e.Prefetch(1);
      ASSERT_TRUE(e.Step(0.1f, 1.0f, 0.0f).ok()) << what;
      for (int u : {1, 0, 2, 3}) {
        EXPECT_EQ(run.Weights(u), stepped[size_t(u)]) << what << ", unit " << u;
      }
      // Prefetched before a new Initialize, used after it.
      e.Prefetch(1);
      ASSERT_TRUE(init(e, units, 1.0f).ok()) << what;
      const std::vector<float> again = run.Weights(1);
      for (int64_t i = 0; i < units[1].size; ++i) {
        ASSERT_NEAR(again[size_t(i)], InitialValue(1, i) + 1.0f,
                    1e-2 * std::abs(InitialValue(1, i) + 1.0f))
            << what << ", element " << i;
      }
      EXPECT_TRUE(e.status().ok()) << what << ": " << e.status().ToString();
    }
  }
}

TEST(ZeroParamOffload, ABufferSizeBelowTheLargestShardIsRefused) {
  ScratchDir dir;
  RunOptions run =
      ParamsOffloaded(Base(3, 1, DType::kFloat32), Placement::kNvme, Placement::kDevice, dir, 0, 2);
  run.zero.offload_param.buffer_size = 10;
  const std::vector<RankResult> results = Train(run);
  ASSERT_FALSE(results[0].status.ok());
  EXPECT_NE(results[0].status.message().find("offload_param.buffer_size"), std::string::npos)
      << results[0].status.ToString();
}

TEST(ZeroParamOffload, ParameterOffloadNeedsStage3) {
  ScratchDir dir;
  RunOptions run =
      ParamsOffloaded(Base(2, 1, DType::kFloat32), Placement::kHost, Placement::kDevice, dir, 0, 2);
  const std::vector<RankResult> results = Train(run);
  ASSERT_FALSE(results[0].status.ok());
  EXPECT_NE(results[0].status.message().find("stage 3"), std::string::npos);
}

TEST(ZeroParamOffload, AParameterReadOrWriteFaultStopsEveryRankAtTheStep) {
  using offload::IoOp;
  using offload::StorageFault;
  // Initialize writes each of the 4 units once; the first step reads 4 (forward) + 4
  // (backward) shards. Faults after that land in a step.
  const std::vector<FaultCase> cases = {
      {"read EIO", StorageFault::Error(IoOp::kRead, EIO).Nth(3), "Input/output error (EIO)"},
      {"read short", StorageFault::ShortTransfer(IoOp::kRead, 0).Nth(10), "the file ends there"},
      {"write EIO", StorageFault::Error(IoOp::kWrite, EIO).Nth(6), "Input/output error (EIO)"},
      {"write ENOSPC", StorageFault::Error(IoOp::kWrite, ENOSPC).Nth(7), "(ENOSPC)"},
  };
  for (int world : {1, 2}) {
    for (const FaultCase& c : cases) {
      ScratchDir dir;
      RunOptions run = ParamsOffloaded(Base(3, world, DType::kFloat32), Placement::kNvme,
                                       Placement::kDevice, dir, 0, 2);
      const int failing = world - 1;
      const std::string root = dir.path();
      const offload::StorageFault fault = c.fault;
      run.per_rank = [root, failing, fault](int rank, ZeroOptions& options) {
        options.offload_param.nvme_file = root + "/param" + std::to_string(rank) + ".swp";
        if (rank != failing) return;
        options.offload_param.open_storage = offload::FaultyStorageFactory(fault);
      };
      const std::vector<RankResult> results = Train(run);
      for (int r = 0; r < world; ++r) {
        const std::string message = results[r].status.ToString();
        ASSERT_FALSE(results[r].status.ok()) << c.name << " world " << world << " rank " << r;
        EXPECT_NE(message.find(c.expect), std::string::npos) << c.name << ": " << message;
        EXPECT_NE(message.find(root + "/param" + std::to_string(failing)), std::string::npos)
            << message;
        // Every rank stopped at the same step.
        EXPECT_EQ(results[r].overflow.size(), results[0].overflow.size()) << c.name;
      }
      EXPECT_LT(results[0].overflow.size(), 5u) << c.name;
    }
  }
}

TEST(ZeroParamOffload, AReadFaultInAPassWithoutAStepIsAgreedOnByEveryRank) {
  // An evaluation runs forward passes and no Step: the shard served as zeros must still stop
  // every rank when the caller agrees on deferred errors.
  ScratchDir dir;
  auto group = comm::ThreadGroup::Create(2, 30.0);
  ASSERT_TRUE(group.ok());
  std::vector<Status> agreed(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      MemoryTracker tracker;
      CpuDevice device(Place::kDevice, &tracker);
      kernels::CpuBackend backend(&device);
      ZeroOptions options = Base(3, 2, DType::kFloat32).zero;
      options.offload_param.place = Placement::kNvme;
      options.offload_param.max_in_cpu = 0;
      options.offload_param.nvme_file = dir.File(r);
      if (r == 1) {
        options.offload_param.open_storage = offload::FaultyStorageFactory(
            offload::StorageFault::Error(offload::IoOp::kRead, EIO).Nth(2));
      }
      auto engine = ZeroEngine::Create(ToyUnits(), options, &(*group)->comm(r), &backend);
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      ASSERT_TRUE((*engine)
                      ->Initialize([](int u, float* values) {
                        for (int64_t i = 0; i < ToyUnits()[u].size; ++i) {
                          values[i] = InitialValue(u, i);
                        }
                      })
                      .ok());
      for (int u = 0; u < 4; ++u) {
        (void)(*engine)->AcquireParams(u).value();
        (*engine)->ReleaseParams(u);
      }
      EXPECT_TRUE((*engine)->status().ok());  // the pass itself goes on
      agreed[r] = (*engine)->AgreeOnDeferredErrors();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(agreed[1].code(), StatusCode::kIoError) << agreed[1].ToString();
  EXPECT_EQ(agreed[0].code(), StatusCode::kUnavailable) << agreed[0].ToString();
  for (const Status& status : agreed) {
    EXPECT_NE(status.message().find(dir.File(1)), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find("(EIO)"), std::string::npos) << status.ToString();
  }
}

// With the parameters offloaded too, the CPU's update writes each new shard into the parameter
// store's host buffer: no shard goes up to the device and back down.
TEST(ZeroParamOffload, OnAnAcceleratorTheHostUpdateWritesTheShardInPlace) {
  live_memory::ScopedEnable checked;
  ScratchDir dir;
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    const RunOptions device = Base(3, 2, type);
    const std::vector<RankResult> want = Train(device);
    for (Placement states : {Placement::kDevice, Placement::kHost, Placement::kNvme}) {
      RunOptions run = ParamsOffloaded(device, Placement::kHost, states, dir, 0, 2);
      run.streams = HostStream::Mode::kThreaded;
      const std::vector<RankResult> got = Train(run);
      for (int r = 0; r < 2; ++r) {
        const std::string what = std::string(DTypeName(type)) + ", optimizer place " +
                                 std::to_string(int(states)) + ", rank " + std::to_string(r);
        ASSERT_TRUE(got[r].status.ok()) << what << ": " << got[r].status.ToString();
        EXPECT_EQ(got[r].params, want[r].params) << what;
        // Down: the owned gradients, and the updated shards where the device updated them; and
        // once, at Initialize, every shard (rounded on the host, staged through the device).
        const int64_t bytes = int64_t(DTypeSize(type));
        int64_t shards = 0, owned = 0;
        for (int u = 0; u < got[r].plan.num_units(); ++u) {
          shards += got[r].plan.unit(u).shard;
          owned += got[r].plan.unit(u).owned_real;
        }
        const int64_t grads = states == Placement::kDevice ? 0 : owned * bytes;
        const int64_t written = states == Placement::kDevice ? shards * bytes : 0;
        EXPECT_EQ(got[r].offload.to_host_bytes, run.steps * (grads + written) + shards * bytes)
            << what;
      }
    }
  }
}

}  // namespace
}  // namespace hoist::zero
