#include "core/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hoist {
namespace {

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;

// Segments from malloc, at most `cap_bytes` held at once, with counters. Called under the
// allocator's lock, so it needs none of its own.
class MallocSource final : public SegmentSource {
 public:
  explicit MallocSource(int64_t cap_bytes) : cap_bytes_(cap_bytes) {}
  ~MallocSource() override {
    for (auto& entry : held_) std::free(entry.first);
  }

  void* Allocate(int64_t bytes) override {
    ++allocate_calls_;
    EXPECT_EQ(bytes % (2 * kMiB), 0) << "segments are multiples of 2 MiB";
    if (held_bytes_ + bytes > cap_bytes_) return nullptr;
    void* p = std::aligned_alloc(512, static_cast<size_t>(bytes));
    if (p == nullptr) return nullptr;
    held_.emplace(p, bytes);
    held_bytes_ += bytes;
    return p;
  }

  void Free(void* p) override {
    ++free_calls_;
    auto it = held_.find(p);
    ASSERT_NE(it, held_.end()) << "the allocator freed a pointer the source never gave";
    held_bytes_ -= it->second;
    held_.erase(it);
    std::free(p);
  }

  int64_t held_bytes() const { return held_bytes_; }
  int64_t held_segments() const { return static_cast<int64_t>(held_.size()); }
  int64_t allocate_calls() const { return allocate_calls_; }
  int64_t free_calls() const { return free_calls_; }

 private:
  int64_t cap_bytes_;
  std::unordered_map<void*, int64_t> held_;
  int64_t held_bytes_ = 0;
  int64_t allocate_calls_ = 0;
  int64_t free_calls_ = 0;
};

// Passes calls through to `base`, except that the Allocate calls numbered in `failing_calls`
// (1-based) return nullptr as if the device were full.
class FaultInjectingSource final : public SegmentSource {
 public:
  FaultInjectingSource(SegmentSource* base, std::set<int64_t> failing_calls)
      : base_(base), failing_calls_(std::move(failing_calls)) {}

  void* Allocate(int64_t bytes) override {
    if (failing_calls_.count(++calls_) > 0) return nullptr;
    return base_->Allocate(bytes);
  }
  void Free(void* p) override { base_->Free(p); }

 private:
  SegmentSource* base_;
  std::set<int64_t> failing_calls_;
  int64_t calls_ = 0;
};

char* AsBytes(void* p) { return static_cast<char*>(p); }

TEST(CachingAllocator, RoundsRequestsTo512Bytes) {
  EXPECT_EQ(CachingAllocator::RoundSize(0), 512);
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512);
  EXPECT_EQ(CachingAllocator::RoundSize(512), 512);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024);
  EXPECT_EQ(CachingAllocator::RoundSize(3 * kMiB + 1), 3 * kMiB + 512);

  MallocSource source(64 * kMiB);
  CachingAllocator allocator(&source);
  void* p = allocator.Allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
  EXPECT_EQ(allocator.BlockSize(p), 1024);
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes, 1024);
  EXPECT_EQ(stats.requested_bytes, 1000);
  EXPECT_EQ(stats.reserved_bytes, 2 * kMiB);
  allocator.Free(p);
}

TEST(CachingAllocator, SegmentSizesFollowPyTorch) {
  EXPECT_EQ(CachingAllocator::SegmentSizeFor(512), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSizeFor(1 * kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSizeFor(1 * kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSizeFor(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSizeFor(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSizeFor(11 * kMiB), 12 * kMiB);
  EXPECT_EQ(CachingAllocator::SegmentSizeFor(12 * kMiB + 512), 14 * kMiB);
}

TEST(CachingAllocator, ReusesAFreedBlockWithoutANewSegment) {
  MallocSource source(64 * kMiB);
  CachingAllocator allocator(&source);
  void* first = allocator.Allocate(4096);
  ASSERT_NE(first, nullptr);
  allocator.Free(first);
  void* second = allocator.Allocate(4096);
  EXPECT_EQ(second, first);
  EXPECT_EQ(source.allocate_calls(), 1);
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_segments, 1);
  EXPECT_EQ(stats.num_allocs, 2);
  EXPECT_EQ(stats.num_cache_hits, 1);
  EXPECT_EQ(stats.reserved_bytes, 2 * kMiB);
  allocator.Free(second);
}

TEST(CachingAllocator, BestFitTakesTheSmallestFreeBlockThatFits) {
  MallocSource source(64 * kMiB);
  CachingAllocator allocator(&source);
  // Holes of 8 KiB and 4 KiB, kept apart by live blocks.
  void* a = allocator.Allocate(8 * kKiB);
  void* keep1 = allocator.Allocate(512);
  void* b = allocator.Allocate(4 * kKiB);
  void* keep2 = allocator.Allocate(512);
  allocator.Free(a);
  allocator.Free(b);
  EXPECT_EQ(allocator.Allocate(3 * kKiB), b);
  EXPECT_EQ(allocator.Allocate(8 * kKiB), a);
  EXPECT_EQ(allocator.stats().num_segments, 1);
  for (void* p : {a, b, keep1, keep2}) allocator.Free(p);
}

// Three adjacent blocks freed in every order end as one free block: the segment's full size then
// fits again at the first block's address without a new segment.
TEST(CachingAllocator, ThreeAdjacentBlocksMergeInAnyOrder) {
  struct Case {
    int64_t block_bytes;
    int64_t full_bytes;  // the largest request the merged space must serve
  };
  // Small pool: 2 MiB segments, requests up to 1 MiB. Large pool: a 20 MiB segment.
  for (Case c : {Case{256 * kKiB, 1 * kMiB}, Case{6 * kMiB, 20 * kMiB}}) {
    std::vector<int> order = {0, 1, 2};
    do {
      SCOPED_TRACE(::testing::Message() << c.block_bytes << " bytes, freed in order " << order[0]
                                        << order[1] << order[2]);
      MallocSource source(64 * kMiB);
      CachingAllocator allocator(&source);
      std::vector<void*> blocks;
      for (int i = 0; i < 3; ++i) blocks.push_back(allocator.Allocate(c.block_bytes));
      ASSERT_EQ(AsBytes(blocks[1]), AsBytes(blocks[0]) + c.block_bytes);
      ASSERT_EQ(AsBytes(blocks[2]), AsBytes(blocks[1]) + c.block_bytes);
      const int64_t reserved = allocator.stats().reserved_bytes;

      for (int i : order) allocator.Free(blocks[i]);
      CachingAllocatorStats stats = allocator.stats();
      EXPECT_EQ(stats.reserved_bytes, reserved);
      EXPECT_EQ(stats.allocated_bytes, 0);

      void* full = allocator.Allocate(c.full_bytes);
      EXPECT_EQ(full, blocks[0]);
      EXPECT_EQ(allocator.stats().num_segments, 1);
      EXPECT_EQ(source.allocate_calls(), 1);
      allocator.Free(full);
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

TEST(CachingAllocator, SplitsSmallBlocksDownTo512Bytes) {
  MallocSource source(64 * kMiB);
  CachingAllocator allocator(&source);
  void* a = allocator.Allocate(2 * kMiB - 1 * kMiB - 512);  // leaves 1 MiB + 512 in the segment
  void* b = allocator.Allocate(1 * kMiB);
  EXPECT_EQ(AsBytes(b), AsBytes(a) + 1 * kMiB - 512);
  void* c = allocator.Allocate(512);  // the last 512 bytes
  EXPECT_EQ(AsBytes(c), AsBytes(b) + 1 * kMiB);
  EXPECT_EQ(allocator.stats().num_segments, 1);
  for (void* p : {a, b, c}) allocator.Free(p);
}

TEST(CachingAllocator, LargeBlocksKeepATailOfAtMostOneMiB) {
  MallocSource source(64 * kMiB);
  CachingAllocator allocator(&source);
  // 20 MiB segment: 19 MiB leaves 1 MiB, not split off; 18 MiB leaves 2 MiB, split off.
  void* a = allocator.Allocate(19 * kMiB);
  EXPECT_EQ(allocator.BlockSize(a), 20 * kMiB);
  EXPECT_EQ(allocator.stats().allocated_bytes, 20 * kMiB);
  EXPECT_EQ(allocator.stats().requested_bytes, 19 * kMiB);
  allocator.Free(a);
  void* b = allocator.Allocate(18 * kMiB);
  EXPECT_EQ(allocator.BlockSize(b), 18 * kMiB);
  void* c = allocator.Allocate(2 * kMiB);
  EXPECT_EQ(AsBytes(c), AsBytes(b) + 18 * kMiB);
  EXPECT_EQ(allocator.stats().num_segments, 1);
  allocator.Free(b);
  allocator.Free(c);
}

TEST(CachingAllocator, SmallAndLargePoolsAreSeparate) {
  MallocSource source(64 * kMiB);
  CachingAllocator allocator(&source);
  void* large = allocator.Allocate(4 * kMiB);  // a 20 MiB segment, 16 MiB of it free
  void* small = allocator.Allocate(4 * kKiB);  // not from the large segment's free 16 MiB
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_segments, 2);
  EXPECT_EQ(stats.reserved_bytes, 22 * kMiB);
  EXPECT_EQ(stats.num_cache_hits, 0);
  allocator.Free(large);
  allocator.Free(small);
  // Each pool has a free segment now; a request of the other kind still takes its own.
  void* small_again = allocator.Allocate(1 * kMiB);
  void* large_again = allocator.Allocate(1 * kMiB + 512);
  EXPECT_EQ(small_again, small);
  EXPECT_EQ(large_again, large);
  EXPECT_EQ(allocator.stats().num_segments, 2);
  allocator.Free(small_again);
  allocator.Free(large_again);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  MallocSource source(20 * kMiB);
  CachingAllocator allocator(&source);
  allocator.Free(allocator.Allocate(4 * kKiB));  // a free 2 MiB segment stays cached
  ASSERT_EQ(source.held_bytes(), 2 * kMiB);
  // A 4 MiB request needs a 20 MiB segment: only once the cached 2 MiB are given back.
  void* p = allocator.Allocate(4 * kMiB);
  ASSERT_NE(p, nullptr);
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_source_failures, 1);
  EXPECT_EQ(stats.num_oom_retries, 1);
  EXPECT_EQ(stats.num_segments_released, 1);
  EXPECT_EQ(stats.num_alloc_failures, 0);
  EXPECT_EQ(stats.reserved_bytes, 20 * kMiB);
  EXPECT_EQ(stats.num_segments, 1);
  EXPECT_EQ(source.held_bytes(), 20 * kMiB);
  allocator.Free(p);
}

TEST(CachingAllocator, ReturnsNullWhenEvenTheEmptiedCacheDoesNotSuffice) {
  MallocSource source(20 * kMiB);
  CachingAllocator allocator(&source);
  void* live = allocator.Allocate(4 * kKiB);  // pins its 2 MiB segment
  EXPECT_EQ(allocator.Allocate(4 * kMiB), nullptr);
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_alloc_failures, 1);
  EXPECT_EQ(stats.num_oom_retries, 1);
  EXPECT_EQ(stats.num_source_failures, 2);
  EXPECT_EQ(stats.num_segments_released, 0);
  EXPECT_EQ(stats.num_allocs, 1);
  EXPECT_EQ(stats.allocated_bytes, 4 * kKiB);
  EXPECT_EQ(stats.reserved_bytes, 2 * kMiB);
  // With the live block gone the same request fits.
  allocator.Free(live);
  void* p = allocator.Allocate(4 * kMiB);
  EXPECT_NE(p, nullptr);
  allocator.Free(p);
}

TEST(CachingAllocator, ATransientSourceFailureIsRetriedOnce) {
  MallocSource base(64 * kMiB);
  FaultInjectingSource source(&base, {1});
  CachingAllocator allocator(&source);
  void* p = allocator.Allocate(4 * kKiB);
  ASSERT_NE(p, nullptr);
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_source_failures, 1);
  EXPECT_EQ(stats.num_oom_retries, 1);
  EXPECT_EQ(stats.num_alloc_failures, 0);
  allocator.Free(p);
}

TEST(CachingAllocator, TwoFailuresInARowReturnNullAndLeaveTheAllocatorUsable) {
  MallocSource base(64 * kMiB);
  FaultInjectingSource source(&base, {2, 3});
  CachingAllocator allocator(&source);
  void* first = allocator.Allocate(4 * kMiB);  // call 1
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(allocator.Allocate(4 * kKiB), nullptr);  // calls 2 and 3
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_source_failures, 2);
  EXPECT_EQ(stats.num_alloc_failures, 1);
  EXPECT_EQ(stats.allocated_bytes, 4 * kMiB);
  EXPECT_EQ(stats.reserved_bytes, 20 * kMiB);   // the live large segment was not released
  void* second = allocator.Allocate(4 * kKiB);  // call 4
  EXPECT_NE(second, nullptr);
  allocator.Free(first);
  allocator.Free(second);
}

TEST(CachingAllocator, EmptyCacheGivesFreeSegmentsBackAndKeepsLiveOnes) {
  MallocSource source(256 * kMiB);
  CachingAllocator allocator(&source);
  void* small_live = allocator.Allocate(4 * kKiB);
  void* small_free = allocator.Allocate(2 * kMiB - 4 * kKiB);  // fills the segment
  void* other_small = allocator.Allocate(8 * kKiB);            // a second small segment
  void* large = allocator.Allocate(30 * kMiB);
  ASSERT_EQ(allocator.stats().num_segments, 3);
  allocator.Free(small_free);
  allocator.Free(other_small);
  allocator.Free(large);
  allocator.EmptyCache();
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_segments, 1);
  EXPECT_EQ(stats.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(stats.num_segments_released, 2);
  EXPECT_EQ(source.held_bytes(), 2 * kMiB);
  allocator.Free(small_live);
  allocator.EmptyCache();
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
  EXPECT_EQ(source.held_bytes(), 0);
  EXPECT_EQ(source.free_calls(), source.allocate_calls());
}

TEST(CachingAllocator, DestructionGivesEverySegmentBack) {
  MallocSource source(256 * kMiB);
  {
    CachingAllocator allocator(&source);
    allocator.Free(allocator.Allocate(4 * kKiB));
    allocator.Free(allocator.Allocate(40 * kMiB));
    EXPECT_EQ(source.held_segments(), 2);
  }
  EXPECT_EQ(source.held_bytes(), 0);
}

TEST(CachingAllocator, PeaksFollowTheHighestFiguresUntilReset) {
  MallocSource source(256 * kMiB);
  CachingAllocator allocator(&source);
  void* a = allocator.Allocate(12 * kMiB);
  void* b = allocator.Allocate(12 * kMiB);
  allocator.Free(a);
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.peak_allocated_bytes, 24 * kMiB);
  EXPECT_EQ(stats.allocated_bytes, 12 * kMiB);
  EXPECT_EQ(stats.peak_reserved_bytes, 24 * kMiB);
  allocator.EmptyCache();
  EXPECT_EQ(allocator.stats().peak_reserved_bytes, 24 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes, 12 * kMiB);

  allocator.ResetPeaks();
  stats = allocator.stats();
  EXPECT_EQ(stats.peak_allocated_bytes, 12 * kMiB);
  EXPECT_EQ(stats.peak_reserved_bytes, 12 * kMiB);
  void* c = allocator.Allocate(512);
  stats = allocator.stats();
  EXPECT_EQ(stats.peak_allocated_bytes, 12 * kMiB + 512);
  EXPECT_EQ(stats.peak_reserved_bytes, 14 * kMiB);
  allocator.Free(b);
  allocator.Free(c);
}

// Thousands of random allocations and frees against a model: live blocks never overlap (by
// address and by the tags written into them), the byte counts equal the model's sums, reserved
// covers allocated and equals what the source holds.
TEST(CachingAllocator, RandomAllocationsMatchAReferenceModel) {
  MallocSource source(160 * kMiB);  // tight enough that some requests hit the OOM path
  CachingAllocator allocator(&source);
  std::mt19937_64 rng(20240611);
  struct Live {
    int64_t block_bytes;
    int64_t requested;
    uint64_t tag;
  };
  std::map<char*, Live> live;  // by address
  int64_t sum_block = 0, sum_requested = 0, failures = 0;
  uint64_t next_tag = 1;

  auto free_one = [&](std::map<char*, Live>::iterator it) {
    uint64_t head = 0, tail = 0;
    std::memcpy(&head, it->first, sizeof head);
    std::memcpy(&tail, it->first + CachingAllocator::RoundSize(it->second.requested) - 8,
                sizeof tail);
    EXPECT_EQ(head, it->second.tag);
    EXPECT_EQ(tail, it->second.tag);
    sum_block -= it->second.block_bytes;
    sum_requested -= it->second.requested;
    allocator.Free(it->first);
    live.erase(it);
  };

  for (int step = 0; step < 6000; ++step) {
    const uint64_t action = rng() % 100;
    if (action < 50 || live.empty()) {
      int64_t bytes;
      const uint64_t kind = rng() % 10;
      if (kind < 6) {
        bytes = static_cast<int64_t>(rng() % (64 * kKiB));
      } else if (kind < 9) {
        bytes = static_cast<int64_t>(rng() % (2 * kMiB));
      } else {
        bytes = static_cast<int64_t>(rng() % (24 * kMiB));
      }
      char* p = AsBytes(allocator.Allocate(bytes));
      if (p == nullptr) {
        ++failures;
        continue;
      }
      const int64_t rounded = CachingAllocator::RoundSize(bytes);
      const int64_t block = allocator.BlockSize(p);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
      ASSERT_GE(block, rounded);
      ASSERT_LE(block - rounded, rounded <= CachingAllocator::kSmallRequestBytes ? 0 : 1 * kMiB);
      auto next = live.lower_bound(p);
      if (next != live.end()) {
        ASSERT_LE(p + block, next->first) << "overlaps the next block";
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second.block_bytes, p) << "overlaps the previous block";
      }
      const uint64_t tag = next_tag++;
      std::memcpy(p, &tag, sizeof tag);
      std::memcpy(p + rounded - 8, &tag, sizeof tag);
      live.emplace(p, Live{block, bytes, tag});
      sum_block += block;
      sum_requested += bytes;
    } else if (action < 99) {
      auto it = live.begin();
      std::advance(it, static_cast<int64_t>(rng() % live.size()));
      free_one(it);
    } else {
      allocator.EmptyCache();
    }
    const CachingAllocatorStats stats = allocator.stats();
    ASSERT_EQ(stats.allocated_bytes, sum_block);
    ASSERT_EQ(stats.requested_bytes, sum_requested);
    ASSERT_GE(stats.reserved_bytes, stats.allocated_bytes);
    ASSERT_EQ(stats.reserved_bytes, source.held_bytes());
    ASSERT_EQ(stats.num_segments, source.held_segments());
    ASSERT_GE(stats.peak_allocated_bytes, stats.allocated_bytes);
    ASSERT_GE(stats.peak_reserved_bytes, stats.reserved_bytes);
  }
  const CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_alloc_failures, failures);
  EXPECT_GT(stats.num_cache_hits, 0);
  // The seed and the cap are chosen so that every path runs: OOM retries that succeed and fail.
  EXPECT_GT(stats.num_oom_retries, stats.num_alloc_failures);
  EXPECT_GT(stats.num_alloc_failures, 0);
  EXPECT_GT(stats.num_segments_released, 0);

  while (!live.empty()) free_one(live.begin());
  EXPECT_EQ(allocator.stats().allocated_bytes, 0);
  EXPECT_EQ(allocator.stats().requested_bytes, 0);
  allocator.EmptyCache();
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
  EXPECT_EQ(source.held_bytes(), 0);
}

TEST(CachingAllocator, TwoThreadsAllocateAndFreeConcurrently) {
  MallocSource source(int64_t{1} << 30);
  CachingAllocator allocator(&source);
  auto work = [&allocator](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::pair<char*, uint64_t>> mine;
    for (int step = 0; step < 3000; ++step) {
      if (mine.empty() || rng() % 2 == 0) {
        const int64_t bytes = static_cast<int64_t>(rng() % (rng() % 8 == 0 ? 4 * kMiB : 16 * kKiB));
        char* p = static_cast<char*>(allocator.Allocate(bytes));
        if (p == nullptr) continue;
        // A block handed to both threads at once would lose one of the two tags.
        std::memcpy(p, &seed, sizeof seed);
        mine.emplace_back(p, seed);
      } else {
        const size_t i = rng() % mine.size();
        uint64_t tag = 0;
        std::memcpy(&tag, mine[i].first, sizeof tag);
        EXPECT_EQ(tag, mine[i].second);
        allocator.Free(mine[i].first);
        mine[i] = mine.back();
        mine.pop_back();
      }
    }
    for (auto& entry : mine) allocator.Free(entry.first);
  };
  std::thread first(work, 1);
  std::thread second(work, 2);
  first.join();
  second.join();
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes, 0);
  EXPECT_EQ(stats.requested_bytes, 0);
  EXPECT_EQ(stats.reserved_bytes, source.held_bytes());
  EXPECT_EQ(stats.num_alloc_failures, 0);
  allocator.EmptyCache();
  EXPECT_EQ(source.held_bytes(), 0);
}

TEST(CachingAllocatorDeathTest, FreeOfAnUnknownPointerIsABug) {
  MallocSource source(64 * kMiB);
  CachingAllocator allocator(&source);
  int not_a_block = 0;
  EXPECT_DEATH(allocator.Free(&not_a_block), "not a live block");
}

TEST(CachingAllocatorDeathTest, DoubleFreeIsABug) {
  MallocSource source(64 * kMiB);
  CachingAllocator allocator(&source);
  void* p = allocator.Allocate(4 * kKiB);
  void* keep = allocator.Allocate(4 * kKiB);  // keeps p's block from merging away
  allocator.Free(p);
  EXPECT_DEATH(allocator.Free(p), "double free");
  allocator.Free(keep);
}

TEST(CachingAllocatorDeathTest, DestroyingWithALiveBlockIsABug) {
  MallocSource source(64 * kMiB);
  EXPECT_DEATH(
      {
        CachingAllocator allocator(&source);
        (void)allocator.Allocate(4 * kKiB);
      },
      "every Buffer must die before its Device");
}

}  // namespace
}  // namespace hoist
