// CachingAllocator: keeps memory that was freed for the next request instead of giving it back,
// in the spirit of PyTorch's CUDACachingAllocator. It carves blocks out of large *segments* that
// it takes from a SegmentSource (cudaMalloc on a GPU, malloc in tests), so that a training step
// that allocates and frees the same sizes every iteration reaches a steady state without calling
// the source (cudaMalloc and cudaFree synchronise the device).
//
// The rules, with PyTorch's constants:
//  - a request is rounded up to a multiple of 512 bytes (kGranularityBytes); 0 counts as 512;
//  - small requests (rounded <= 1 MiB) are served from 2 MiB segments, large ones from segments
//    of 20 MiB when the request is under 10 MiB, else the request rounded up to 2 MiB; the two
//    kinds never share a segment (pools), so small, short-lived blocks do not fragment the
//    segments that hold large ones;
//  - the free block of the request's pool with the smallest size that fits is used (best fit;
//    ties go to the lowest address); when it is larger than needed it is split, in the small pool
//    if the rest is at least 512 bytes, in the large pool if the rest is over 1 MiB (a smaller
//    tail stays with the block and counts as allocated);
//  - a freed block merges with its free neighbours in the same segment;
//  - when the source is out of memory, every fully free segment is given back to it and the
//    request is tried once more; failing that, Allocate returns nullptr.
// A block's address is its segment's address plus a multiple of 512, so blocks have their
// segment's alignment up to 512 bytes.
//
// Not stream-aware: a freed block may be handed out again at once. The caller orders reuse (the
// CUDA device serves one stream, core/cuda/cuda_caching_device.h).
//
// Thread-safe: one mutex guards all state. The source is called with that mutex held, so it needs
// no lock of its own but must not call back into the allocator. Allocate and EmptyCache block
// while the source allocates or frees.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

namespace hoist {

// Where segments come from. Implementations: cudaMalloc on one GPU (cuda_caching_device.cc), and
// malloc with a cap plus a fault injector in the tests. Called under the allocator's lock.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // `bytes` of memory (a multiple of 2 MiB), or nullptr when there is not enough. The pointer
  // stays owned by the source; it comes back through Free.
  virtual void* Allocate(int64_t bytes) = 0;
  // Gives back a pointer that Allocate returned.
  virtual void Free(void* p) = 0;
};

// Counters in the sense of torch.cuda.memory_stats(). Bytes are exact.
struct CachingAllocatorStats {
  int64_t allocated_bytes = 0;        // sizes of the live blocks (rounded; see BlockSize)
  int64_t requested_bytes = 0;        // what the callers of the live blocks asked for
  int64_t reserved_bytes = 0;         // sizes of the segments held from the source
  int64_t peak_allocated_bytes = 0;   // largest allocated_bytes since construction or ResetPeaks
  int64_t peak_reserved_bytes = 0;    // largest reserved_bytes since construction or ResetPeaks
  int64_t num_segments = 0;           // segments held now
  int64_t num_allocs = 0;             // Allocate calls that returned a block
  int64_t num_cache_hits = 0;         // ... of which were served without a new segment
  int64_t num_oom_retries = 0;        // times the cache was emptied to retry a failed request
  int64_t num_source_failures = 0;    // SegmentSource::Allocate calls that returned nullptr
  int64_t num_alloc_failures = 0;     // Allocate calls that returned nullptr
  int64_t num_segments_released = 0;  // segments given back (EmptyCache, OOM retries)

  // Cached: reserved but not handed out.
  int64_t cached_bytes() const { return reserved_bytes - allocated_bytes; }
};

class CachingAllocator {
 public:
  static constexpr int64_t kGranularityBytes = 512;
  static constexpr int64_t kSmallRequestBytes = int64_t{1} << 20;  // at most this: small pool
  static constexpr int64_t kSmallSegmentBytes = int64_t{2} << 20;
  static constexpr int64_t kLargeSegmentBytes = int64_t{20} << 20;  // for requests < 10 MiB
  static constexpr int64_t kMinOwnLargeSegmentBytes = int64_t{10} << 20;
  static constexpr int64_t kLargeRoundingBytes = int64_t{2} << 20;

  // `source` must outlive the allocator.
  explicit CachingAllocator(SegmentSource* source);
  // Gives every segment back to the source. A block still live here is a bug (a Buffer that
  // outlived its Device: its memory would be freed under it), checked with HOIST_CHECK.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (>= 0), or nullptr when the source cannot provide a segment even
  // after the cache was emptied. The block stays owned by the allocator; give it back with Free.
  // Its contents are whatever the previous user left.
  void* Allocate(int64_t bytes);
  // Returns a block from Allocate to the cache. Any other pointer, or a second Free, is a bug
  // (HOIST_CHECK).
  void Free(void* p);
  // Gives every fully free segment back to the source. Blocks in use stay where they are.
  void EmptyCache();

  CachingAllocatorStats stats() const;
  // Peaks restart from the current values.
  void ResetPeaks();
  // The size counted in allocated_bytes for the live block `p` (checked live): its request
  // rounded to 512, plus an unsplit tail of at most 1 MiB in the large pool.
  int64_t BlockSize(const void* p) const;

  // `bytes` rounded up to the 512-byte granularity (0 becomes 512).
  static int64_t RoundSize(int64_t bytes);
  // The segment a request of `rounded` bytes gets when no cached block fits.
  static int64_t SegmentSizeFor(int64_t rounded);

 private:
  struct Block {
    char* ptr = nullptr;
    int64_t size = 0;
    int64_t requested = 0;  // 0 while free
    bool allocated = false;
    bool small = false;     // which pool; every block of a segment is in the same one
    Block* prev = nullptr;  // address-order neighbours in the same segment
    Block* next = nullptr;
  };
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using FreePool = std::set<Block*, BySizeThenAddress>;

  Block* FindFreeBlockLocked(FreePool& pool, int64_t rounded);
  Block* NewSegmentLocked(int64_t rounded, bool small);
  void ReleaseFreeSegmentsLocked();
  void UpdatePeaksLocked();
  FreePool& PoolOf(const Block& block) { return block.small ? small_free_ : large_free_; }

  SegmentSource* const source_;

  mutable std::mutex mu_;
  // Every block, free or live, keyed by its address; the owner of the Block objects.
  std::unordered_map<const void*, std::unique_ptr<Block>> blocks_;  // GUARDED_BY(mu_)
  FreePool small_free_;                                             // GUARDED_BY(mu_)
  FreePool large_free_;                                             // GUARDED_BY(mu_)
  CachingAllocatorStats stats_;                                     // GUARDED_BY(mu_)
};

}  // namespace hoist
