// StateSwapper over an in-memory storage: every access mode, every pipeline shape and sub-group
// size keeps each sub-group's values where they belong, counts the bytes it moved, and leaves no
// slot in use after an error.
#include "offload/state_swapper.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "offload/fault_injecting_storage.h"
#include "offload/memory_storage.h"

namespace hoist::offload {
namespace {

// Opens MemoryStorages and remembers the last one, so a test can look inside or wrap it.
struct MemoryFactory {
  MemoryStorage* last = nullptr;
  std::unique_ptr<FaultInjectingStorage>* faulty = nullptr;

  StorageFactory Make() {
    return
        [this](const std::string& path, int64_t bytes) -> StatusOr<std::unique_ptr<BlockStorage>> {
          auto storage = std::make_unique<MemoryStorage>(path, bytes, 4096);
          last = storage.get();
          return std::unique_ptr<BlockStorage>(std::move(storage));
        };
  }
};

float Value(int array, int64_t i, int round) { return float(array * 100000 + i) + 0.5f * round; }

TEST(StateSwapper, EveryPipelineShapeKeepsEverySubGroupInPlace) {
  for (int64_t elements : {int64_t{1}, int64_t{1000}, int64_t{4097}}) {
    for (int64_t sub_group : {int64_t{1}, int64_t{333}, int64_t{1024}, int64_t{1} << 20}) {
      if (elements / sub_group > 200) continue;  // keeps the test quick
      for (int buffers : {1, 2, 3, 4}) {
        MemoryTracker tracker;
        PinnedHostPool pool(tracker, {.lock_pages = false});
        MemoryFactory factory;
        StateSwapperOptions options;
        options.path = "mem";
        options.elements = elements;
        options.sub_group_size = sub_group;
        options.buffer_count = buffers;
        auto swapper = StateSwapper::Create(options, factory.Make(), pool, tracker);
        ASSERT_TRUE(swapper.ok()) << swapper.status().ToString();
        StateSwapper& s = **swapper;
        EXPECT_EQ(tracker.Snapshot().current[int(Place::kNvme)][int(Category::kOptimizer)],
                  StateSwapper::LayoutFor(options).file_bytes);

        // Write round 0, then three read-modify-write rounds, then read and check.
        std::vector<int64_t> seen;
        ASSERT_TRUE(
            s.ForEachSubGroup(StateSwapper::Access::kWrite, [&](int64_t begin, int64_t count,
                                                                std::span<float* const> arrays) {
               seen.push_back(begin);
               for (int a = 0; a < 3; ++a) {
                 for (int64_t i = 0; i < count; ++i) {
                   arrays[a][i] = Value(a, begin + i, 0);
                 }
               }
               return Status::Ok();
             }).ok());
        ASSERT_EQ(static_cast<int64_t>(seen.size()), s.num_sub_groups());
        for (int round = 1; round <= 3; ++round) {
          ASSERT_TRUE(
              s.ForEachSubGroup(StateSwapper::Access::kReadWrite,
                                [&](int64_t begin, int64_t count, std::span<float* const> arrays) {
                                  for (int a = 0; a < 3; ++a) {
                                    for (int64_t i = 0; i < count; ++i) {
                                      if (arrays[a][i] != Value(a, begin + i, round - 1)) {
                                        return InternalError("stale value");
                                      }
                                      arrays[a][i] = Value(a, begin + i, round);
                                    }
                                  }
                                  return Status::Ok();
                                })
                  .ok())
              << "elements " << elements << " sub_group " << sub_group << " buffers " << buffers
              << " round " << round;
        }
        int64_t checked = 0;
        ASSERT_TRUE(
            s.ForEachSubGroup(StateSwapper::Access::kRead, [&](int64_t begin, int64_t count,
                                                               std::span<float* const> arrays) {
               for (int a = 0; a < 3; ++a) {
                 for (int64_t i = 0; i < count; ++i) {
                   EXPECT_EQ(arrays[a][i], Value(a, begin + i, 3));
                 }
               }
               checked += count;
               return Status::Ok();
             }).ok());
        EXPECT_EQ(checked, elements);
        // Each pass moves every sub-group once per array in its direction(s).
        const int64_t pass = StateSwapper::LayoutFor(options).file_bytes;
        EXPECT_EQ(s.bytes_written(), 4 * pass);  // write + three read-writes
        EXPECT_EQ(s.bytes_read(), 4 * pass);     // three read-writes + read
        EXPECT_EQ(s.buffer_count(), std::min<int64_t>({buffers, 3, s.num_sub_groups()}));
      }
    }
  }
}

TEST(StateSwapper, AnIoErrorIsReturnedWithTheRequestAndNothingIsLeftInFlight) {
  for (IoOp op : {IoOp::kRead, IoOp::kWrite}) {
    for (int buffers : {1, 2, 3}) {
      MemoryTracker tracker;
      PinnedHostPool pool(tracker, {.lock_pages = false});
      FaultInjectingStorage* faults = nullptr;
      std::unique_ptr<MemoryStorage> base;
      StorageFactory open = [&](const std::string& path,
                                int64_t bytes) -> StatusOr<std::unique_ptr<BlockStorage>> {
        base = std::make_unique<MemoryStorage>(path, bytes, 4096);
        auto wrapper = std::make_unique<FaultInjectingStorage>(*base);
        faults = wrapper.get();
        return std::unique_ptr<BlockStorage>(std::move(wrapper));
      };
      StateSwapperOptions options;
      options.path = "/nvme/rank0.swp";
      options.elements = 5000;
      options.sub_group_size = 1000;
      options.buffer_count = buffers;
      auto swapper = StateSwapper::Create(options, open, pool, tracker);
      ASSERT_TRUE(swapper.ok());
      faults->Inject(StorageFault::Error(op, EIO).Nth(7));
      int visits = 0;
      Status status = (*swapper)->ForEachSubGroup(StateSwapper::Access::kReadWrite,
                                                  [&](int64_t, int64_t, std::span<float* const>) {
                                                    ++visits;
                                                    return Status::Ok();
                                                  });
      ASSERT_FALSE(status.ok());
      EXPECT_EQ(status.code(), StatusCode::kIoError);
      EXPECT_NE(status.message().find("/nvme/rank0.swp"), std::string::npos) << status.ToString();
      EXPECT_NE(status.message().find("Input/output error (EIO)"), std::string::npos);
      EXPECT_LT(visits, 5);  // the walk stopped
      // The same swapper works again once the fault is gone.
      faults->Clear();
      EXPECT_TRUE((*swapper)
                      ->ForEachSubGroup(
                          StateSwapper::Access::kRead,
                          [](int64_t, int64_t, std::span<float* const>) { return Status::Ok(); })
                      .ok());
    }
  }
}

// An explicit layout: arrays of 4, 1 and 4 bytes an element, each cut into sub-groups of its own
// lengths (one sub-group holds none of array 1, the last none of array 2). Every pipeline shape
// keeps each array's bytes of each sub-group in place; the file holds each array's longest
// sub-group, rounded to 4 KiB, once per sub-group.
TEST(StateSwapper, AnExplicitLayoutKeepsEveryArraysPiecesInPlace) {
  StateSwapperOptions options;
  options.path = "mem";
  options.layout = {SwapArray{4, {0, 1500, 1600, 5000, 5001}},
                    SwapArray{1, {0, 1500, 1500, 9000, 9100}}, SwapArray{4, {0, 7, 12, 20, 20}}};
  const StateSwapper::Layout layout = StateSwapper::LayoutFor(options);
  EXPECT_EQ(layout.sub_groups, 4);
  EXPECT_EQ(layout.sub_group, 3400);
  EXPECT_EQ(layout.array_strides, (std::vector<int64_t>{16384, 8192, 4096}));
  EXPECT_EQ(layout.file_bytes, 4 * (16384 + 8192 + 4096));
  auto byte_at = [](int64_t array, int64_t i, int round) {
    return static_cast<std::byte>((array * 31 + i * 7 + round) & 0xff);
  };
  for (int buffers : {1, 2, 3}) {
    MemoryTracker tracker;
    PinnedHostPool pool(tracker, {.lock_pages = false});
    MemoryFactory factory;
    options.buffer_count = buffers;
    auto swapper = StateSwapper::Create(options, factory.Make(), pool, tracker);
    ASSERT_TRUE(swapper.ok()) << swapper.status().ToString();
    StateSwapper& s = **swapper;
    EXPECT_EQ(s.elements(), 5001);
    std::vector<int64_t> seen;
    for (int round = 0; round <= 2; ++round) {
      const auto access =
          round == 0 ? StateSwapper::Access::kWrite : StateSwapper::Access::kReadWrite;
      ASSERT_TRUE(s.ForEachSubGroupView(
                       access,
                       [&](int64_t group, std::span<const SwapPiece> pieces) {
                         if (round == 0) seen.push_back(group);
                         for (size_t a = 0; a < pieces.size(); ++a) {
                           const SwapArray& array = options.layout[a];
                           const auto g = static_cast<size_t>(group);
                           if (pieces[a].first != array.bounds[g] ||
                               pieces[a].count != array.bounds[g + 1] - array.bounds[g]) {
                             return InternalError("a piece out of place");
                           }
                           const int64_t bytes = pieces[a].bytes();
                           const int64_t first = pieces[a].first * array.element_bytes;
                           for (int64_t i = 0; i < bytes; ++i) {
                             if (round > 0 &&
                                 pieces[a].data[i] != byte_at(int64_t(a), first + i, round - 1)) {
                               return InternalError("stale byte");
                             }
                             pieces[a].data[i] = byte_at(int64_t(a), first + i, round);
                           }
                         }
                         return Status::Ok();
                       })
                      .ok())
          << "buffers " << buffers << " round " << round;
    }
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3}));
  }
}

TEST(StateSwapper, RefusesABadExplicitLayout) {
  MemoryTracker tracker;
  PinnedHostPool pool(tracker, {.lock_pages = false});
  MemoryFactory factory;
  const std::vector<std::vector<SwapArray>> bad = {
      {SwapArray{4, {0, 10}}, SwapArray{1, {0, 5, 10}}},  // sub-group counts differ
      {SwapArray{4, {0, 10, 5}}},                         // goes backwards
      {SwapArray{0, {0, 10}}},                            // no element size
      {SwapArray{4, {1, 10}}},                            // does not start at 0
      {SwapArray{4, {0, 0}}, SwapArray{1, {0, 3}}},       // array 0 empty
  };
  for (const std::vector<SwapArray>& layout : bad) {
    StateSwapperOptions options;
    options.path = "mem";
    options.layout = layout;
    auto swapper = StateSwapper::Create(options, factory.Make(), pool, tracker);
    ASSERT_FALSE(swapper.ok());
    EXPECT_EQ(swapper.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(swapper.status().message().find("state swapper"), std::string::npos)
        << swapper.status().ToString();
  }
}

// A tracker, an unlocked pool and in-memory storage for one swapper.
struct InMemory {
  MemoryTracker tracker;
  PinnedHostPool pool{tracker, {.lock_pages = false}};
  MemoryFactory factory;

  StatusOr<std::unique_ptr<StateSwapper>> Create(int64_t elements, int64_t sub_group, int buffers) {
    StateSwapperOptions options;
    options.path = "mem";
    options.elements = elements;
    options.sub_group_size = sub_group;
    options.buffer_count = buffers;
    return StateSwapper::Create(options, factory.Make(), pool, tracker);
  }
};

TEST(StateSwapper, AVisitErrorStopsTheWalk) {
  InMemory memory;
  auto swapper = memory.Create(100, 10, 3);
  ASSERT_TRUE(swapper.ok());
  int visits = 0;
  Status status = (*swapper)->ForEachSubGroup(
      StateSwapper::Access::kReadWrite, [&](int64_t, int64_t, std::span<float* const>) {
        return ++visits == 3 ? InternalError("visit failed") : Status::Ok();
      });
  EXPECT_EQ(status.message(), "visit failed");
  EXPECT_EQ(visits, 3);
}

TEST(StateSwapper, RefusesBadOptions) {
  InMemory memory;
  auto swapper = memory.Create(100, 10, 0);
  ASSERT_FALSE(swapper.ok());
  EXPECT_EQ(swapper.status().code(), StatusCode::kInvalidArgument);
}

TEST(StateSwapper, TheSlotsAreCountedAsPinnedHostMemory) {
  InMemory memory;
  MemoryTracker& tracker = memory.tracker;
  {
    auto swapper = memory.Create(10000, 2048, 3);  // 8 KiB a state
    ASSERT_TRUE(swapper.ok());
    EXPECT_EQ((*swapper)->slot_bytes(), 3 * 3 * 8192);
    EXPECT_EQ(tracker.Snapshot().current[int(Place::kHostPinned)][int(Category::kOptimizer)],
              3 * 3 * 8192);
  }
  const MemorySnapshot after = tracker.Snapshot();
  EXPECT_EQ(after.current[int(Place::kHostPinned)][int(Category::kOptimizer)], 0);
  EXPECT_EQ(after.current[int(Place::kNvme)][int(Category::kOptimizer)], 0);
}

}  // namespace
}  // namespace hoist::offload
