// Optimizer offload against the run that keeps the states on the device: the same toy model on
// 1 and 2 thread ranks, stages 1-3, fp32 and bf16, with the states in pinned host memory, in
// pageable host memory, or on "NVMe" (a scratch file, streamed in sub-groups). The CPU step is the
// same fused AdamW wherever the states live, so the weights must match bit for bit. Memory must
// move from the device to the offload place in the amounts of the ZeRO formula, and every fault
// of the storage must stop every rank with the storage's message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "core/live_memory.h"
#include "offload/fault_injecting_storage.h"
#include "offload/open_storage.h"
#include "tests/zero/offload_test_util.h"
#include "zero/memory_estimate.h"

namespace hoist::zero {
namespace {

using namespace zero_test;  // NOLINT(google-build-using-namespace): the shared harness

namespace fs = std::filesystem;

class OffloadMatchesDevice
    : public ::testing::TestWithParam<std::tuple<int, int, DType, Placement>> {};

TEST_P(OffloadMatchesDevice, BitForBit) {
  const auto [stage, world, type, place] = GetParam();
  ScratchDir dir;
  const RunOptions device = Base(stage, world, type);
  const std::vector<RankResult> want = Train(device);
  const std::vector<RankResult> got = Train(Offloaded(device, place, dir));
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(want[r].status.ok()) << want[r].status.ToString();
    ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
    // The step is the same fused AdamW over the same values, only elsewhere: the same bits.
    EXPECT_EQ(got[r].params, want[r].params) << "rank " << r;
    EXPECT_EQ(got[r].overflow, want[r].overflow);
  }
  // Every scratch file is gone with its engine.
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

INSTANTIATE_TEST_SUITE_P(StagesRanksTypesPlaces, OffloadMatchesDevice,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 2),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(Placement::kHost, Placement::kNvme)));

TEST(ZeroOffload, Bf16OffloadStaysNearTheFp32Run) {
  // The bf16 run offloaded is the bf16 run on the device (above); here it is also held to the
  // fp32 run within bf16's rounding, as the device bf16 run is.
  ScratchDir dir;
  const std::vector<RankResult> fp32 = Train(Base(2, 2, DType::kFloat32));
  const std::vector<RankResult> bf16 =
      Train(Offloaded(Base(2, 2, DType::kBFloat16), Placement::kNvme, dir));
  ASSERT_TRUE(bf16[0].status.ok()) << bf16[0].status.ToString();
  double num = 0, den = 0;
  for (size_t i = 0; i < fp32[0].params.size(); ++i) {
    const double d = double(bf16[0].params[i]) - fp32[0].params[i];
    num += d * d;
    den += double(fp32[0].params[i]) * fp32[0].params[i];
  }
  // The same bound as the device bf16 run's (zero_engine_test): errors of a few 2^-8.
  EXPECT_LT(std::sqrt(num / den), 5e-2);
  EXPECT_GT(std::sqrt(num / den), 0.0);
}

TEST(ZeroOffload, SubGroupsAndBufferCountsDoNotChangeTheResult) {
  ScratchDir dir;
  const RunOptions device = Base(3, 2, DType::kBFloat16);
  const std::vector<RankResult> want = Train(device);
  // Sub-groups that cut units and padding at odd places, and every pipeline shape.
  for (int64_t sub_group : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}}) {
    for (int buffers : {1, 2, 3, 5}) {
      const std::vector<RankResult> got =
          Train(Offloaded(device, Placement::kNvme, dir, sub_group, buffers));
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
        EXPECT_EQ(got[r].params, want[r].params)
            << "sub_group_size " << sub_group << " buffer_count " << buffers << " rank " << r;
      }
    }
  }
}

TEST(ZeroOffload, AnOverflowSkipsTheStepWithOffloadToo) {
  ScratchDir dir;
  RunOptions clean = Offloaded(Base(2, 2, DType::kFloat32), Placement::kNvme, dir, 16, 3);
  clean.steps = 3;
  RunOptions poisoned = clean;
  poisoned.steps = 4;
  poisoned.poison = [](int step, int rank) { return step == 3 && rank == 0; };
  const std::vector<RankResult> a = Train(clean), b = Train(poisoned);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(b[r].status.ok()) << b[r].status.ToString();
    EXPECT_EQ(b[r].overflow, (std::vector<bool>{false, false, false, true}));
    EXPECT_EQ(b[r].params, a[r].params);
  }
}

TEST(ZeroOffload, TheStatesMoveFromTheDeviceToTheOffloadPlace) {
  for (Placement place : {Placement::kHost, Placement::kNvme}) {
    for (bool pinned : {true, false}) {
      for (DType type : {DType::kFloat32, DType::kBFloat16}) {
        ScratchDir dir;
        RunOptions run = Offloaded(Base(2, 2, type), place, dir, 50, 3);
        run.zero.offload_optimizer.pin_memory = pinned;
        run.steps = 1;
        const std::vector<RankResult> results = Train(run);
        for (const RankResult& r : results) {
          ASSERT_TRUE(r.status.ok()) << r.status.ToString();
          const auto& memory = r.memory;
          const int64_t shard = r.plan.total_shard();
          const auto opt = int(Category::kOptimizer);
          // fp32 master, m and v of the shard (12 bytes an element: ZeRO's K for the shard; in
          // fp32 the master copy is now separate from the model's), none left on the device.
          EXPECT_EQ(memory.current[int(Place::kDevice)][opt], 0);
          EXPECT_EQ(r.states.optimizer, 12 * shard);
          if (place == Placement::kHost) {
            // Pinned buffers are whole pages, one per state.
            const int64_t page = offload::PinnedHostPool::kPageBytes;
            const int64_t pinned_bytes = 3 * ((4 * shard + page - 1) / page * page);
            EXPECT_EQ(memory.current[int(Place::kHostPinned)][opt], pinned ? pinned_bytes : 0);
            EXPECT_EQ(memory.current[int(Place::kHost)][opt], pinned ? 0 : 12 * shard);
            EXPECT_EQ(memory.current[int(Place::kNvme)][opt], 0);
          } else {
            // The file holds three 4 KiB-aligned arrays per sub-group of 50 elements; the host
            // keeps three sub-group slots of the same shape, page-aligned.
            const int64_t groups = (shard + 49) / 50;
            EXPECT_EQ(memory.current[int(Place::kNvme)][opt], groups * 3 * 4096);
            EXPECT_EQ(memory.current[int(Place::kHostPinned)][opt],
                      std::min<int64_t>(groups, 3) * 3 * 4096);
            EXPECT_GT(r.offload.nvme_read_bytes, 0);
            EXPECT_GT(r.offload.nvme_write_bytes, 0);
          }
          // The model keeps its compute-type weights and gradients on the device.
          EXPECT_EQ(memory.current[int(Place::kDevice)][int(Category::kParam)], r.states.params);
        }
      }
    }
  }
}

TEST(ZeroOffload, StageZeroIsRefused) {
  ScratchDir dir;
  const std::vector<RankResult> results =
      Train(Offloaded(Base(0, 1, DType::kFloat32), Placement::kHost, dir));
  ASSERT_FALSE(results[0].status.ok());
  EXPECT_NE(results[0].status.message().find("stage 1, 2 or 3"), std::string::npos)
      << results[0].status.ToString();
}

TEST(ZeroOffload, CheckpointStateRoundTripsThroughNvme) {
  // ReadState from an NVMe-offloaded engine equals the device engine's, and RestoreState into an
  // NVMe engine continues on the same trajectory.
  ScratchDir dir;
  auto group = comm::ThreadGroup::Create(1, 30.0);
  ASSERT_TRUE(group.ok());
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  auto run_steps = [&](ZeroEngine& e, int first, int count) {
    for (int step = first; step < first + count; ++step) {
      ASSERT_TRUE(e.ZeroGrads().ok());
      MicroBatch(e, ToyUnits(), step, 0, 1.0f, false);
      ASSERT_TRUE(e.Step(0.05f, 1.0f, 1.0f).ok());
    }
  };
  auto init = [](int u, float* values) {
    for (int64_t i = 0; i < ToyUnits()[u].size; ++i) values[i] = InitialValue(u, i);
  };
  ZeroOptions on_device;
  on_device.stage = 1;
  on_device.compute_type = DType::kBFloat16;
  on_device.comm_type = DType::kBFloat16;
  ZeroOptions on_nvme = on_device;
  on_nvme.offload_optimizer.place = Placement::kNvme;
  on_nvme.offload_optimizer.sub_group_size = 20;
  on_nvme.offload_optimizer.nvme_file = dir.File(0);

  auto a = ZeroEngine::Create(ToyUnits(), on_device, &(*group)->comm(0), &backend);
  auto b = ZeroEngine::Create(ToyUnits(), on_nvme, &(*group)->comm(0), &backend);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Initialize(init).ok());
  ASSERT_TRUE((*b)->Initialize(init).ok());
  run_steps(**a, 0, 3);
  run_steps(**b, 0, 3);
  const auto n = static_cast<size_t>((*a)->state_elements());
  std::vector<float> am(n), av(n), aw(n), bm(n), bv(n), bw(n);
  ASSERT_TRUE((*a)->ReadState(aw.data(), am.data(), av.data()).ok());
  ASSERT_TRUE((*b)->ReadState(bw.data(), bm.data(), bv.data()).ok());
  EXPECT_EQ(aw, bw);
  EXPECT_EQ(am, bm);
  EXPECT_EQ(av, bv);

  // A fresh NVMe engine restored from the device engine's state continues identically.
  on_nvme.offload_optimizer.nvme_file = dir.File(1);
  auto c = ZeroEngine::Create(ToyUnits(), on_nvme, &(*group)->comm(0), &backend);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->RestoreState(aw.data(), am.data(), av.data(), (*a)->step_count()).ok());
  run_steps(**a, 3, 2);
  run_steps(**c, 3, 2);
  EXPECT_EQ(*(*a)->GatherFullParams(), *(*c)->GatherFullParams());
}

// Every fault the injector has, at read and at write, on one rank of two (and on one rank
// alone): Step fails on every rank, each naming the file, the offset, the size and the errno of
// the failing request.
std::vector<FaultCase> FaultCases() {
  using offload::IoOp;
  using offload::StorageFault;
  // Initialize writes every sub-group once (15 writes on one rank, 9 on each of two), so the
  // write faults fire inside the first or second step, as the read faults do.
  return {
      {"read EIO", StorageFault::Error(IoOp::kRead, EIO).Nth(4), "Input/output error (EIO)"},
      {"write EIO", StorageFault::Error(IoOp::kWrite, EIO).Nth(20), "Input/output error (EIO)"},
      {"write ENOSPC", StorageFault::Error(IoOp::kWrite, ENOSPC).Nth(20), "(ENOSPC)"},
      {"short read", StorageFault::ShortTransfer(IoOp::kRead, 0).Nth(5), "the file ends there"},
      {"short write", StorageFault::ShortTransfer(IoOp::kWrite, 0).Nth(21), "(ENOSPC)"},
  };
}

TEST(ZeroOffload, EveryStorageFaultStopsEveryRankWithTheStorageMessage) {
  for (int world : {1, 2}) {
    for (const FaultCase& c : FaultCases()) {
      ScratchDir dir;
      RunOptions run = Offloaded(Base(2, world, DType::kFloat32), Placement::kNvme, dir, 30, 3);
      const int failing = world - 1;
      const std::string root = dir.path();
      const offload::StorageFault fault = c.fault;
      run.per_rank = [root, failing, fault](int rank, ZeroOptions& options) {
        options.offload_optimizer.nvme_file = root + "/rank" + std::to_string(rank) + ".swp";
        if (rank != failing) return;
        options.offload_optimizer.open_storage = offload::FaultyStorageFactory(fault);
      };
      const std::vector<RankResult> results = Train(run);
      for (int r = 0; r < world; ++r) {
        const Status& status = results[r].status;
        ASSERT_FALSE(status.ok()) << c.name << " world " << world << " rank " << r;
        const std::string message = status.ToString();
        EXPECT_NE(message.find(c.expect), std::string::npos) << c.name << ": " << message;
        EXPECT_NE(message.find(dir.File(failing)), std::string::npos) << message;
        EXPECT_NE(message.find("offset"), std::string::npos) << message;
        if (r != failing) {
          EXPECT_NE(message.find("rank " + std::to_string(failing) + " failed"), std::string::npos)
              << message;
        }
      }
    }
  }
}

// The engine on the test backend whose streams are worker threads: every hand-off between the
// stream and the host (the model, the collectives, the NVMe swapper, the parameter store's
// writer) must be ordered by a synchronisation, or the weights differ from the inline run's (and
// the ThreadSanitizer lane of the suite reports the race). Stages 0-3, fp32 and bf16, 1 and 2
// ranks, the states on the device, in host memory and on NVMe, the parameters on NVMe.
TEST(ZeroThreadedStreams, GiveTheInlineBits) {
  // And no backend op is handed pageable host memory where device memory belongs.
  live_memory::ScopedEnable checked;
  ScratchDir dir;
  std::vector<RunOptions> runs;
  for (int world : {1, 2}) {
    for (DType type : {DType::kFloat32, DType::kBFloat16}) {
      for (int stage = 0; stage <= 3; ++stage) runs.push_back(Base(stage, world, type));
      runs.push_back(Offloaded(Base(2, world, type), Placement::kHost, dir));
      runs.push_back(Offloaded(Base(1, world, type), Placement::kNvme, dir, 30, 3));
      runs.push_back(
          ParamsOffloaded(Base(3, world, type), Placement::kNvme, Placement::kNvme, dir, 0, 2));
      // Reductions in flight while the model goes on (overlap_comm, a bucket of about one unit):
      // the collectives wait for the gradients on the comm worker and the accumulation for the
      // collectives on the stream; the host waits for neither.
      for (int stage : {2, 3}) {
        RunOptions overlapped = Base(stage, world, type);
        overlapped.zero.overlap_comm = true;
        overlapped.zero.reduce_bucket_size = 60;
        overlapped.zero.reduce_scatter = stage == 2;
        runs.push_back(overlapped);
      }
    }
  }
  for (RunOptions run : runs) {
    const std::string what =
        "stage " + std::to_string(run.zero.stage) + ", " + std::to_string(run.world) + " ranks, " +
        DTypeName(run.zero.compute_type) + ", optimizer offload " +
        std::to_string(int(run.zero.offload_optimizer.place)) + ", parameter offload " +
        std::to_string(int(run.zero.offload_param.place)) +
        (run.zero.overlap_comm ? ", overlap_comm" : "");
    run.steps = 3;
    const std::vector<RankResult> inline_run = Train(run);
    run.streams = HostStream::Mode::kThreaded;
    const std::vector<RankResult> threaded = Train(run);
    for (size_t r = 0; r < inline_run.size(); ++r) {
      ASSERT_TRUE(inline_run[r].status.ok()) << what << ": " << inline_run[r].status.ToString();
      ASSERT_TRUE(threaded[r].status.ok()) << what << ": " << threaded[r].status.ToString();
      EXPECT_EQ(threaded[r].params, inline_run[r].params) << what << ", rank " << r;
      EXPECT_EQ(threaded[r].memory.peak, inline_run[r].memory.peak) << what << ", rank " << r;
    }
  }
}

// ZeRO-Offload on an accelerator (the backend stands for one: live_memory on, threaded streams):
// told which micro-batch is the step's last, the engine brings each unit's owned gradients down
// on the copy stream as that backward reduces them, not at Step; untold, at Step; told on every
// micro-batch, again after each accumulation. With overlap_comm the reductions still in flight
// at the end of the pass (up to reduce_bucket_size elements) come down at Step. The weights are
// the device run's whichever, and a step that overflows leaves no download to race the next
// step's gradients.
TEST(ZeroOffload, OnAnAcceleratorTheLastBackwardBringsTheGradientsDown) {
  live_memory::ScopedEnable checked;
  ScratchDir dir;
  using Boundary = RunOptions::Boundary;
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    for (int stage : {1, 2, 3}) {
      for (int world : {1, 2}) {
        RunOptions device = Base(stage, world, type);
        device.steps = 3;
        device.poison = [](int step, int rank) { return step == 1 && rank == 0; };
        const std::vector<RankResult> want = Train(device);
        // The reductions kept in flight: none, a few units' worth, all of them.
        for (int64_t bucket : {int64_t{0}, int64_t{60}, int64_t{1} << 30}) {
          if (stage == 1 && bucket != 0) continue;  // stage 1 reduces at Step
          for (Placement place : {Placement::kHost, Placement::kNvme}) {
            for (Boundary boundary : {Boundary::kLast, Boundary::kNone, Boundary::kEvery}) {
              RunOptions run = Offloaded(device, place, dir, 50, 2);
              run.streams = HostStream::Mode::kThreaded;
              run.zero.overlap_comm = bucket > 0;
              if (bucket > 0) run.zero.reduce_bucket_size = bucket;
              run.boundary = boundary;
              const std::string what = "stage " + std::to_string(stage) + ", " +
                                       std::to_string(world) + " ranks, " + DTypeName(type) +
                                       (place == Placement::kHost ? ", host" : ", nvme") +
                                       ", boundary " + std::to_string(int(boundary)) +
                                       ", in flight " + std::to_string(bucket);
              const std::vector<RankResult> got = Train(run);
              for (int r = 0; r < world; ++r) {
                ASSERT_TRUE(got[r].status.ok()) << what << ": " << got[r].status.ToString();
                EXPECT_EQ(got[r].params, want[r].params) << what << ", rank " << r;
                EXPECT_EQ(got[r].overflow, (std::vector<bool>{false, true, false})) << what;
                int64_t owned = 0;  // bytes of this rank's owned gradients, padding aside
                for (int u = 0; u < got[r].plan.num_units(); ++u) {
                  owned += got[r].plan.unit(u).owned_real * int64_t(DTypeSize(type));
                }
                // Every step brought them down once, the one that overflowed too; told on every
                // micro-batch, once per micro-batch (stages 2 and 3).
                const int passes = stage >= 2 && boundary == Boundary::kEvery ? 4 / world : 1;
                EXPECT_EQ(got[r].offload.to_host_bytes, 3 * passes * owned)
                    << what << ", rank " << r;
                const int64_t early = got[r].offload.to_host_during_backward_bytes;
                if (stage == 1 || boundary == Boundary::kNone || bucket == int64_t{1} << 30) {
                  EXPECT_EQ(early, 0) << what << ", rank " << r;
                } else if (bucket == 0) {
                  EXPECT_EQ(early, 3 * owned) << what << ", rank " << r;
                } else {  // the last units' reductions still in flight
                  EXPECT_GT(early, 0) << what << ", rank " << r;
                  EXPECT_LT(early, 3 * owned) << what << ", rank " << r;
                }
              }
            }
          }
        }
      }
    }
  }
  // Pageable host memory would hold the host in each copy: the gradients wait for Step.
  for (int stage : {2, 3}) {
    RunOptions device = Base(stage, 2, DType::kBFloat16);
    const std::vector<RankResult> want = Train(device);
    RunOptions run = Offloaded(device, Placement::kHost, dir);
    run.streams = HostStream::Mode::kThreaded;
    run.zero.overlap_comm = false;
    run.zero.offload_optimizer.pin_memory = false;
    const std::vector<RankResult> got = Train(run);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(got[r].status.ok()) << "stage " << stage << ": " << got[r].status.ToString();
      EXPECT_EQ(got[r].params, want[r].params) << "stage " << stage << ", rank " << r;
      EXPECT_GT(got[r].offload.to_host_bytes, 0) << "stage " << stage << ", rank " << r;
      EXPECT_EQ(got[r].offload.to_host_during_backward_bytes, 0)
          << "stage " << stage << ", rank " << r;
    }
  }
}

// The engine's collectives through the host-staged communicator (how ranks sharing one GPU
// talk), with threaded streams: the same weights as talking directly. With the parameters
// offloaded too (to NVMe, and to host memory, where the next unit's gather starts ahead), on one
// rank as on two: alone, the staged gather is a copy on the compute stream and its handle is
// complete at once. (The staged communicator orders a gather after the copy stream's upload by
// a host wait, so the engine's own wait for the upload before the store takes the shard back
// matters only where the gather was never issued.)
TEST(ZeroStagedComm, GivesTheDirectBits) {
  live_memory::ScopedEnable checked;
  ScratchDir dir;
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    std::vector<RunOptions> runs;
    for (int stage = 0; stage <= 3; ++stage) runs.push_back(Base(stage, 2, type));
    for (int world : {1, 2}) {
      runs.push_back(
          ParamsOffloaded(Base(3, world, type), Placement::kNvme, Placement::kHost, dir, 0, 2));
      // In host memory: gathered ahead, each shard going up on the copy stream.
      runs.push_back(
          ParamsOffloaded(Base(3, world, type), Placement::kHost, Placement::kHost, dir, 0, 2));
    }
    for (RunOptions run : runs) {
      const int stage = run.zero.stage;
      run.steps = 3;
      run.streams = HostStream::Mode::kThreaded;
      const std::vector<RankResult> direct = Train(run);
      run.staged_comm = true;
      const std::vector<RankResult> staged = Train(run);
      for (size_t r = 0; r < direct.size(); ++r) {
        ASSERT_TRUE(direct[r].status.ok()) << direct[r].status.ToString();
        ASSERT_TRUE(staged[r].status.ok()) << staged[r].status.ToString();
        EXPECT_EQ(staged[r].params, direct[r].params)
            << "stage " << stage << ", " << DTypeName(type) << ", " << direct.size()
            << " ranks, rank " << r << ", parameters offloaded to "
            << int(run.zero.offload_param.place);
      }
    }
  }
}

}  // namespace
}  // namespace hoist::zero
