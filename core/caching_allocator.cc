#include "core/caching_allocator.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace hoist {
namespace {

// Far below INT64_MAX, so that rounding a request up never overflows; no device comes close.
constexpr int64_t kMaxRequestBytes = int64_t{1} << 60;

int64_t RoundUp(int64_t bytes, int64_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

}  // namespace

CachingAllocator::CachingAllocator(SegmentSource* source) : source_(source) {
  HOIST_CHECK(source != nullptr);
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t live = 0;
  for (const auto& entry : blocks_) live += entry.second->allocated ? 1 : 0;
  HOIST_CHECK_EQ(live, 0) << "blocks still in use when the caching allocator is destroyed ("
                          << stats_.allocated_bytes
                          << " bytes): every Buffer must die before its Device";
  ReleaseFreeSegmentsLocked();
  HOIST_CHECK(blocks_.empty());
}

int64_t CachingAllocator::RoundSize(int64_t bytes) {
  HOIST_CHECK_GE(bytes, 0);
  HOIST_CHECK_LE(bytes, kMaxRequestBytes) << "request too large for any device";
  return std::max(kGranularityBytes, RoundUp(bytes, kGranularityBytes));
}

int64_t CachingAllocator::SegmentSizeFor(int64_t rounded) {
  if (rounded <= kSmallRequestBytes) return kSmallSegmentBytes;
  if (rounded < kMinOwnLargeSegmentBytes) return kLargeSegmentBytes;
  return RoundUp(rounded, kLargeRoundingBytes);
}

void* CachingAllocator::Allocate(int64_t bytes) {
  const int64_t rounded = RoundSize(bytes);
  const bool small = rounded <= kSmallRequestBytes;
  std::lock_guard<std::mutex> lock(mu_);
  FreePool& pool = small ? small_free_ : large_free_;
  Block* block = FindFreeBlockLocked(pool, rounded);
  if (block != nullptr) {
    ++stats_.num_cache_hits;
  } else {
    block = NewSegmentLocked(rounded, small);
    if (block == nullptr) {
      // Segments that are entirely free may be of the wrong size or pool for this request; given
      // back, their memory can make up the one that is needed.
      ++stats_.num_oom_retries;
      ReleaseFreeSegmentsLocked();
      block = NewSegmentLocked(rounded, small);
    }
    if (block == nullptr) {
      ++stats_.num_alloc_failures;
      return nullptr;
    }
  }

  const int64_t rest = block->size - rounded;
  // A large block keeps a tail of up to 1 MiB rather than leaving a sliver that only small
  // requests could use, and small requests never come to the large pool.
  const bool split = small ? rest >= kGranularityBytes : rest > kSmallRequestBytes;
  if (split) {
    auto tail = std::make_unique<Block>();
    tail->ptr = block->ptr + rounded;
    tail->size = rest;
    tail->small = small;
    tail->prev = block;
    tail->next = block->next;
    if (block->next != nullptr) block->next->prev = tail.get();
    block->next = tail.get();
    block->size = rounded;
    pool.insert(tail.get());
    blocks_.emplace(tail->ptr, std::move(tail));
  }
  block->allocated = true;
  block->requested = bytes;
  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += bytes;
  ++stats_.num_allocs;
  UpdatePeaksLocked();
  return block->ptr;
}

void CachingAllocator::Free(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(p);
  HOIST_CHECK(it != blocks_.end() && it->second->allocated)
      << "Free(" << p << "): not a live block of this caching allocator (double free?)";
  Block* block = it->second.get();
  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  block->allocated = false;
  block->requested = 0;

  FreePool& pool = PoolOf(*block);
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    blocks_.erase(next->ptr);
  }
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    blocks_.erase(block->ptr);
    block = prev;
  }
  pool.insert(block);
}

void CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseFreeSegmentsLocked();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

int64_t CachingAllocator::BlockSize(const void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(p);
  HOIST_CHECK(it != blocks_.end() && it->second->allocated)
      << "BlockSize(" << p << "): not a live block of this caching allocator";
  return it->second->size;
}

CachingAllocator::Block* CachingAllocator::FindFreeBlockLocked(FreePool& pool, int64_t rounded) {
  Block key;
  key.size = rounded;  // with ptr nullptr, the first block of this size or larger
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::NewSegmentLocked(int64_t rounded, bool small) {
  const int64_t segment_bytes = SegmentSizeFor(rounded);
  void* p = source_->Allocate(segment_bytes);
  if (p == nullptr) {
    ++stats_.num_source_failures;
    return nullptr;
  }
  auto block = std::make_unique<Block>();
  block->ptr = static_cast<char*>(p);
  block->size = segment_bytes;
  block->small = small;
  Block* raw = block.get();
  auto [it, inserted] = blocks_.emplace(p, std::move(block));
  HOIST_CHECK(inserted) << "the segment source returned " << p << " twice";
  stats_.reserved_bytes += segment_bytes;
  ++stats_.num_segments;
  UpdatePeaksLocked();
  return raw;
}

void CachingAllocator::ReleaseFreeSegmentsLocked() {
  for (FreePool* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      // A free block without neighbours spans its whole segment.
      if (block->prev != nullptr || block->next != nullptr) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      source_->Free(block->ptr);
      stats_.reserved_bytes -= block->size;
      --stats_.num_segments;
      ++stats_.num_segments_released;
      blocks_.erase(block->ptr);
    }
  }
}

void CachingAllocator::UpdatePeaksLocked() {
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

}  // namespace hoist
