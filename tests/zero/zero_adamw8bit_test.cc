// The ZeRO engine with 8-bit AdamW moments (ZeroOptions::adam.eight_bit) on the toy model: close
// to the 32-bit run, the same bits across stages where the quantization blocks are the same, the
// same bits with the states offloaded to the host or to NVMe, small units in fp32, and
// checkpoints that round-trip exactly and resume bit-identically.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "kernels/cpu/blockwise_quant.h"
#include "tests/zero/zero_test_util.h"
#include "zero/memory_estimate.h"

namespace hoist::zero {
namespace {

using namespace zero_test;  // NOLINT(google-build-using-namespace): the shared harness

RunOptions EightBit(int stage, int world, int64_t min_8bit_size = 0) {
  RunOptions run;
  run.world = world;
  run.steps = 8;
  run.zero.stage = stage;
  run.zero.adam.weight_decay = 0.1f;
  run.zero.adam.eight_bit = true;
  run.zero.adam.min_8bit_size = min_8bit_size;
  run.zero.stage3_param_persistence_threshold = 10;
  return run;
}

double MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  }
  return worst;
}

// Against the 32-bit run. Adam's step is at most lr * |m^| / (sqrt(v^) + eps) ~ lr per element
// (the toy's gradients are consistent in sign); the 8-bit moments change each step's size by the
// quantization's relative error, which over 8 steps must stay a small fraction of the distance
// moved (8 lr = 0.4): 0.02 is 5% of it. The runs must differ (the moments are quantized).
TEST(ZeroAdamW8bit, StaysCloseToTheThirtyTwoBitRun) {
  RunOptions run = EightBit(0, 1);
  const std::vector<RankResult> eight = Train(run);
  ASSERT_TRUE(eight[0].status.ok()) << eight[0].status.ToString();
  run.zero.adam.eight_bit = false;
  const std::vector<RankResult> full = Train(run);
  ASSERT_TRUE(full[0].status.ok()) << full[0].status.ToString();
  const double diff = MaxAbsDifference(eight[0].params, full[0].params);
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.02);
}

// Units below min_8bit_size keep fp32 moments and take the 32-bit AdamW: without clipping (which
// couples the units through the global norm) they follow the 32-bit run bit for bit.
TEST(ZeroAdamW8bit, UnitsBelowTheMinimumKeepThirtyTwoBitMoments) {
  RunOptions run = EightBit(0, 1, /*min_8bit_size=*/50);  // "embed" (37) and "norm" (2)
  run.max_norm = 0.0f;
  const std::vector<RankResult> eight = Train(run);
  run.zero.adam.eight_bit = false;
  const std::vector<RankResult> full = Train(run);
  ASSERT_TRUE(eight[0].status.ok() && full[0].status.ok());
  const std::vector<float>& a = eight[0].params;
  const std::vector<float>& b = full[0].params;
  // Units in order: embed [0, 37), block0, block1, norm (the last 2).
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 37, b.begin()));
  EXPECT_TRUE(std::equal(a.end() - 2, a.end(), b.end() - 2));
  EXPECT_FALSE(std::equal(a.begin() + 37, a.end() - 2, b.begin() + 37));
  // Optimizer bytes: fp32 m, v for 39 elements; codes and absmaxes (three segments of block0
  // and block1: 3 blocks each) for the 106 others. fp32 on the device: no separate master.
  EXPECT_EQ(eight[0].states.optimizer, 2 * 4 * 39 + 2 * 106 + 2 * 4 * 6);
}

// Stages 1-3 on one rank hold the same owned ranges, hence the same blocks, as stage 0: the same
// bits. With offload_optimizer on the host the CPU runs the same kernel: the same bits again.
TEST(ZeroAdamW8bit, StagesAndHostOffloadOnOneRankGiveStageZerosBits) {
  const std::vector<RankResult> reference = Train(EightBit(0, 1));
  ASSERT_TRUE(reference[0].status.ok());
  for (int stage = 1; stage <= 3; ++stage) {
    for (int offload = 0; offload < 3; ++offload) {
      RunOptions run = EightBit(stage, 1);
      if (offload > 0) run.zero.offload_optimizer.place = Placement::kHost;
      run.zero.offload_optimizer.pin_memory = offload == 1;
      const std::vector<RankResult> got = Train(run);
      ASSERT_TRUE(got[0].status.ok()) << got[0].status.ToString();
      EXPECT_EQ(got[0].params, reference[0].params) << "stage " << stage << " offload " << offload;
    }
  }
}

// On two ranks an owned range can split a decay segment: each rank quantizes its part with its
// own absmax where one rank had one block, so 8-bit runs of different world sizes differ by the
// quantization error (the 32-bit bound above). Stage 0 on two ranks keeps whole states: one
// rank's blocks. Stage 1 averages gradients with an all-reduce, stages 2 and 3 with a
// reduce-scatter (their sums may round differently, as in 32 bits); stages 2 and 3 agree to the
// bit, and host offload changes no bit at any stage.
TEST(ZeroAdamW8bit, TwoRanksAgreeAcrossStagesAndOffload) {
  const std::vector<RankResult> single = Train(EightBit(0, 1));
  const std::vector<RankResult> stage0 = Train(EightBit(0, 2));
  ASSERT_TRUE(stage0[0].status.ok()) << stage0[0].status.ToString();
  EXPECT_LT(MaxAbsDifference(stage0[0].params, single[0].params), 1e-5);
  const std::vector<RankResult> stage1 = Train(EightBit(1, 2));
  const std::vector<RankResult> stage2 = Train(EightBit(2, 2));
  ASSERT_TRUE(stage1[0].status.ok() && stage2[0].status.ok());
  EXPECT_LT(MaxAbsDifference(stage1[0].params, single[0].params), 0.02);
  EXPECT_LT(MaxAbsDifference(stage2[0].params, stage1[0].params), 0.02);
  for (int stage = 1; stage <= 3; ++stage) {
    for (bool offload : {false, true}) {
      RunOptions run = EightBit(stage, 2);
      if (offload) run.zero.offload_optimizer.place = Placement::kHost;
      const std::vector<RankResult> got = Train(run);
      const std::vector<float>& want = stage == 1 ? stage1[0].params : stage2[0].params;
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
        EXPECT_EQ(got[r].params, want) << "stage " << stage << " rank " << r;
      }
    }
  }
}

// Units whose owned ranges hold weight-decay pieces longer than a block of 256 on one and two
// ranks (so that sub-groups of the NVMe swapper must be cut on block boundaries inside them), and
// two below min_8bit_size (fp32 moments) between and after them.
std::vector<UnitSpec> LongUnits() {
  return {{"embed", 700, {{0, 600, true}, {600, 700, false}}},
          {"tiny", 40, {{0, 40, true}}},
          {"block", 1100, {{0, 5, false}, {5, 1000, true}, {1000, 1100, false}}},
          {"norm", 3, {{0, 3, false}}}};
}

// A fresh directory for the scratch files of one test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hoist-8bit-XXXXXX").string();
    HOIST_CHECK(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string File(const std::string& name, int rank) const {
    return path_ + "/" + name + std::to_string(rank) + ".swp";
  }

 private:
  std::string path_;
};

RunOptions OnNvme(RunOptions run, const ScratchDir& dir, int64_t sub_group_size, int buffer_count) {
  run.zero.offload_optimizer.place = Placement::kNvme;
  run.zero.offload_optimizer.sub_group_size = sub_group_size;
  run.zero.offload_optimizer.buffer_count = buffer_count;
  run.per_rank = [&dir](int rank, ZeroOptions& options) {
    options.offload_optimizer.nvme_file = dir.File("optimizer", rank);
  };
  return run;
}

// The 8-bit states on NVMe are updated a sub-group at a time by the same kernel, block by block,
// as on the device: the same bits at every stage, world size, precision, sub-group size (cut
// inside pieces, at their ends, in the fp32 units) and pipeline shape.
TEST(ZeroAdamW8bit, NvmeOffloadGivesTheDeviceRunsBits) {
  ScratchDir dir;
  for (int stage = 1; stage <= 3; ++stage) {
    for (int world : {1, 2}) {
      for (DType type : {DType::kFloat32, DType::kBFloat16}) {
        RunOptions device = EightBit(stage, world, /*min_8bit_size=*/50);
        device.units = LongUnits();
        device.zero.compute_type = type;
        device.zero.comm_type = type;
        const std::vector<RankResult> want = Train(device);
        ASSERT_TRUE(want[0].status.ok()) << want[0].status.ToString();
        const bool sweep = stage == 2 && world == 2 && type == DType::kBFloat16;
        for (int64_t sub_group :
             sweep ? std::vector<int64_t>{1, 100, 300, 5000} : std::vector<int64_t>{300}) {
          for (int buffers : sweep ? std::vector<int>{1, 2, 3} : std::vector<int>{3}) {
            const std::vector<RankResult> got = Train(OnNvme(device, dir, sub_group, buffers));
            const std::string where = "stage " + std::to_string(stage) + " world " +
                                      std::to_string(world) + " " + DTypeName(type) +
                                      " sub_group_size " + std::to_string(sub_group) +
                                      " buffer_count " + std::to_string(buffers);
            for (int r = 0; r < world; ++r) {
              ASSERT_TRUE(got[r].status.ok()) << where << ": " << got[r].status.ToString();
              EXPECT_EQ(got[r].params, want[r].params) << where << " rank " << r;
              EXPECT_GT(got[r].offload.nvme_read_bytes, 0);
            }
          }
        }
      }
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(std::filesystem::path(dir.File("", 0)).parent_path()));
}

// A partial offload keeps the leading units' 8-bit moments on the device and the rest on the
// host, each part updated by the same kernel: every ratio (the extremes leave one part empty)
// gives the bits of no offload and of full offload, at every stage, on one and two ranks.
TEST(ZeroAdamW8bit, PartialOffloadGivesTheBitsOfNoOffloadAtEveryRatio) {
  for (int stage = 1; stage <= 3; ++stage) {
    for (int world : {1, 2}) {
      for (DType type : {DType::kFloat32, DType::kBFloat16}) {
        RunOptions device = EightBit(stage, world, /*min_8bit_size=*/50);
        device.units = LongUnits();
        device.zero.compute_type = type;
        device.zero.comm_type = type;
        const std::vector<RankResult> want = Train(device);
        ASSERT_TRUE(want[0].status.ok()) << want[0].status.ToString();
        for (double ratio : {1e-6, 0.5, 0.7, 1.0}) {
          for (bool pinned : {true, false}) {
            if (!pinned && ratio != 0.5) continue;  // keeps the test quick
            RunOptions run = device;
            run.zero.offload_optimizer.place = Placement::kHost;
            run.zero.offload_optimizer.ratio = ratio;
            run.zero.offload_optimizer.pin_memory = pinned;
            const std::vector<RankResult> got = Train(run);
            for (int r = 0; r < world; ++r) {
              const std::string where = "stage " + std::to_string(stage) + " world " +
                                        std::to_string(world) + " " + DTypeName(type) + " ratio " +
                                        std::to_string(ratio) + " rank " + std::to_string(r);
              ASSERT_TRUE(got[r].status.ok()) << where << ": " << got[r].status.ToString();
              EXPECT_EQ(got[r].params, want[r].params) << where;
              if (ratio == 0.5) {  // both parts hold moments
                const MemorySnapshot& memory = got[r].memory;
                const int opt = int(Category::kOptimizer);
                EXPECT_GT(memory.peak[int(Place::kDevice)][opt], 0) << where;
                EXPECT_GT(memory.peak[int(pinned ? Place::kHostPinned : Place::kHost)][opt], 0)
                    << where;
              }
            }
          }
        }
      }
    }
  }
}

// The file holds the master (4 bytes a parameter), the codes (2) and the absmaxes: about half
// the bytes of the 32-bit optimizer's file (12), on a model big enough that the 4 KiB alignment
// of each array does not dominate.
TEST(ZeroAdamW8bit, TheNvmeFileHoldsAboutHalfTheThirtyTwoBitOnesBytes) {
  ScratchDir dir;
  RunOptions run = EightBit(2, 1);
  run.units = {{"big", 60000, {{0, 50000, true}, {50000, 60000, false}}}};
  run.steps = 1;
  run = OnNvme(run, dir, int64_t{1} << 30, 3);
  const std::vector<RankResult> eight = Train(run);
  run.zero.adam.eight_bit = false;
  const std::vector<RankResult> full = Train(run);
  ASSERT_TRUE(eight[0].status.ok() && full[0].status.ok());
  const int opt = int(Category::kOptimizer), nvme = int(Place::kNvme);
  const int64_t eight_file = eight[0].memory.peak[nvme][opt];
  const int64_t full_file = full[0].memory.peak[nvme][opt];
  EXPECT_EQ(full_file, 3 * ((240000 + 4095) / 4096 * 4096));  // three arrays of 240,000 bytes
  EXPECT_LT(double(eight_file), 0.52 * double(full_file));
  EXPECT_GT(double(eight_file), 0.5 * double(full_file));
  // Each step reads and writes the whole file once.
  EXPECT_EQ(eight[0].offload.nvme_read_bytes, eight_file);
}

// Checkpoints: on each rank, train, save (ReadState), restore into a fresh engine, save again:
// the same bytes; then both engines go on training with the same bits.
struct Saved {
  std::vector<float> master, m, v;
};

void CheckpointRoundTrip(int stage, int world, Placement place, double ratio = 1.0) {
  ScratchDir dir;
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
      ZeroOptions options = EightBit(stage, world).zero;
      options.compute_type = DType::kBFloat16;
      options.comm_type = DType::kFloat32;
      options.offload_optimizer.place = place;
      options.offload_optimizer.ratio = ratio;
      options.offload_optimizer.sub_group_size = 300;  // cuts inside the long units' pieces
      const bool long_units = place == Placement::kNvme || ratio < 1.0;
      const std::vector<UnitSpec> units = long_units ? LongUnits() : ToyUnits();
      if (long_units) options.adam.min_8bit_size = 50;
      int engines = 0;
      auto make = [&]() {
        options.offload_optimizer.nvme_file = dir.File("engine" + std::to_string(engines++), r);
        auto engine = ZeroEngine::Create(units, options, &(*group)->comm(r), &backend);
        EXPECT_TRUE(engine.ok()) << engine.status().ToString();
        EXPECT_TRUE((*engine)
                        ->Initialize([&](int u, float* values) {
                          for (int64_t i = 0; i < units[u].size; ++i) {
                            values[i] = InitialValue(u, i);
                          }
                        })
                        .ok());
        return std::move(*engine);
      };
      auto train = [&](ZeroEngine& e, int from, int to) {
        for (int step = from; step < to; ++step) {
          EXPECT_TRUE(e.ZeroGrads().ok());
          MicroBatch(e, units, step, r, 1.0f, false);
          EXPECT_TRUE(e.Step(0.05f, 1.0f, 1.0f).ok());
        }
      };
      auto save = [&](const ZeroEngine& e) {
        const auto n = static_cast<size_t>(e.state_elements());
        Saved s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
        EXPECT_TRUE(e.ReadState(s.master.data(), s.m.data(), s.v.data()).ok());
        return s;
      };
      std::unique_ptr<ZeroEngine> a = make();
      train(*a, 0, 4);
      const Saved first = save(*a);
      std::unique_ptr<ZeroEngine> b = make();
      Status restored =
          b->RestoreState(first.master.data(), first.m.data(), first.v.data(), a->step_count());
      if (!restored.ok()) {
        failure = restored.ToString();
        return;
      }
      const Saved second = save(*b);
      auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
        return x.size() == y.size() &&
               std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
      };
      if (!same(first.master, second.master) || !same(first.m, second.m) ||
          !same(first.v, second.v)) {
        failure += "save -> restore -> save changed the bytes; ";
      }
      // Some block's extreme is negative (the case RequantizeBlockwise searches for).
      train(*a, 4, 8);
      train(*b, 4, 8);
      const Saved end_a = save(*a), end_b = save(*b);
      if (!same(end_a.master, end_b.master) || !same(end_a.m, end_b.m) || !same(end_a.v, end_b.v)) {
        failure += "the resumed run diverged; ";
      }
      auto pa = a->GatherFullParams(), pb = b->GatherFullParams();
      if (!pa.ok() || !pb.ok() || *pa != *pb) failure += "the weights differ; ";
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(failures[static_cast<size_t>(r)], "")
        << "stage " << stage << " world " << world << " rank " << r;
  }
}

TEST(ZeroAdamW8bit, CheckpointsRoundTripAndResumeBitIdentically) {
  CheckpointRoundTrip(0, 1, Placement::kDevice);
  for (int stage = 1; stage <= 3; ++stage) {
    CheckpointRoundTrip(stage, 2, Placement::kDevice);
    CheckpointRoundTrip(stage, 2, Placement::kHost);
    CheckpointRoundTrip(stage, 2, Placement::kNvme);
    CheckpointRoundTrip(stage, 2, Placement::kHost, /*ratio=*/0.5);
  }
  CheckpointRoundTrip(1, 1, Placement::kNvme);
}

// RestoreStateInPieces's fill from a whole saved state.
ZeroEngine::StatePiece FillFrom(const Saved& saved) {
  return [&saved](int64_t begin, int64_t count, float* master, float* m, float* v) {
    std::copy_n(saved.master.begin() + begin, count, master);
    std::copy_n(saved.m.begin() + begin, count, m);
    std::copy_n(saved.v.begin() + begin, count, v);
    return Status::Ok();
  };
}

// A one-rank engine over `units` with `options`, initialized to InitialValue.
std::unique_ptr<ZeroEngine> InitializedEngine(const std::vector<UnitSpec>& units,
                                              const ZeroOptions& options, comm::Communicator* comm,
                                              kernels::Backend* backend) {
  auto engine = ZeroEngine::Create(units, options, comm, backend);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return nullptr;
  EXPECT_TRUE((*engine)
                  ->Initialize([&](int u, float* values) {
                    for (int64_t i = 0; i < units[u].size; ++i) values[i] = InitialValue(u, i);
                  })
                  .ok());
  return std::move(*engine);
}

// Steps [from, to) of one micro-batch each.
void TrainSteps(ZeroEngine& e, const std::vector<UnitSpec>& units, int from, int to) {
  for (int step = from; step < to; ++step) {
    ASSERT_TRUE(e.ZeroGrads().ok());
    MicroBatch(e, units, step, 0, 1.0f, false);
    ASSERT_TRUE(e.Step(0.05f, 1.0f, 1.0f).ok());
  }
}

// States on NVMe go to a checkpoint and come back a sub-group at a time: the pieces read equal
// the device engine's whole state (the same trajectory, above), and an NVMe engine restored from
// the device engine's state piece by piece goes on with the same bits.
TEST(ZeroAdamW8bit, NvmeStatesInPiecesEqualTheDeviceEnginesState) {
  ScratchDir dir;
  auto group = comm::ThreadGroup::Create(1, 30.0);
  ASSERT_TRUE(group.ok());
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  const std::vector<UnitSpec> units = LongUnits();
  ZeroOptions on_device = EightBit(2, 1, /*min_8bit_size=*/50).zero;
  on_device.compute_type = DType::kBFloat16;
  on_device.comm_type = DType::kBFloat16;
  ZeroOptions on_nvme = on_device;
  on_nvme.offload_optimizer.place = Placement::kNvme;
  on_nvme.offload_optimizer.sub_group_size = 333;
  auto create = [&](const ZeroOptions& options) {
    return InitializedEngine(units, options, &(*group)->comm(0), &backend);
  };
  auto train = [&](ZeroEngine& e, int from, int to) { TrainSteps(e, units, from, to); };
  std::unique_ptr<ZeroEngine> a = create(on_device);
  on_nvme.offload_optimizer.nvme_file = dir.File("b", 0);
  std::unique_ptr<ZeroEngine> b = create(on_nvme);
  train(*a, 0, 4);
  train(*b, 0, 4);
  const auto n = static_cast<size_t>(a->state_elements());
  Saved want{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  ASSERT_TRUE(a->ReadState(want.master.data(), want.m.data(), want.v.data()).ok());
  Saved pieces{std::vector<float>(n, -1.0f), std::vector<float>(n, -1.0f),
               std::vector<float>(n, -1.0f)};
  int visits = 0;
  ASSERT_TRUE(
      b->ReadStateInPieces([&](int64_t begin, int64_t count, float* master, float* m, float* v) {
         ++visits;
         std::copy(master, master + count, pieces.master.begin() + begin);
         std::copy(m, m + count, pieces.m.begin() + begin);
         std::copy(v, v + count, pieces.v.begin() + begin);
         return Status::Ok();
       }).ok());
  EXPECT_GT(visits, 3);
  EXPECT_EQ(pieces.master, want.master);
  EXPECT_EQ(pieces.m, want.m);
  EXPECT_EQ(pieces.v, want.v);

  on_nvme.offload_optimizer.nvme_file = dir.File("c", 0);
  std::unique_ptr<ZeroEngine> c = create(on_nvme);
  ASSERT_TRUE(c->RestoreStateInPieces(FillFrom(want), a->step_count()).ok());
  train(*a, 4, 8);
  train(*c, 4, 8);
  EXPECT_EQ(*a->GatherFullParams(), *c->GatherFullParams());
}

// Resident states go to and from a checkpoint in pieces too, in one piece: the same values as
// the whole forms, a run restored from them goes on with the same bits, and a piece that cannot
// be filled stops the restore with its error.
TEST(ZeroAdamW8bit, ResidentStatesInPiecesAreTheWholeState) {
  auto group = comm::ThreadGroup::Create(1, 30.0);
  ASSERT_TRUE(group.ok());
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  const std::vector<UnitSpec> units = LongUnits();
  for (Placement place : {Placement::kDevice, Placement::kHost}) {
    ZeroOptions options = EightBit(2, 1, /*min_8bit_size=*/50).zero;
    options.compute_type = DType::kBFloat16;
    options.comm_type = DType::kBFloat16;
    options.offload_optimizer.place = place;
    auto create = [&] { return InitializedEngine(units, options, &(*group)->comm(0), &backend); };
    auto train = [&](ZeroEngine& e, int from, int to) { TrainSteps(e, units, from, to); };
    std::unique_ptr<ZeroEngine> a = create();
    train(*a, 0, 3);
    const auto n = static_cast<size_t>(a->state_elements());
    Saved want{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
    ASSERT_TRUE(a->ReadState(want.master.data(), want.m.data(), want.v.data()).ok());
    int visits = 0;
    ASSERT_TRUE(
        a->ReadStateInPieces([&](int64_t begin, int64_t count, float* master, float* m, float* v) {
           ++visits;
           EXPECT_EQ(begin, 0);
           EXPECT_EQ(count, a->state_elements());
           EXPECT_TRUE(std::equal(master, master + count, want.master.begin()));
           EXPECT_TRUE(std::equal(m, m + count, want.m.begin()));
           EXPECT_TRUE(std::equal(v, v + count, want.v.begin()));
           return Status::Ok();
         }).ok());
    EXPECT_EQ(visits, 1);

    std::unique_ptr<ZeroEngine> b = create();
    const Status refused = b->RestoreStateInPieces(
        [](int64_t, int64_t, float*, float*, float*) { return DataLossError("blob adam_m"); },
        a->step_count());
    EXPECT_EQ(refused.code(), StatusCode::kDataLoss);
    EXPECT_NE(refused.message().find("adam_m"), std::string::npos) << refused.ToString();
    ASSERT_TRUE(b->RestoreStateInPieces(FillFrom(want), a->step_count()).ok());
    train(*a, 3, 5);
    train(*b, 3, 5);
    EXPECT_EQ(*a->GatherFullParams(), *b->GatherFullParams()) << OffloadDeviceName(place);
  }
}

}  // namespace
}  // namespace hoist::zero
