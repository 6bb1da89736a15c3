// PinnedHostPool: page-aligned host buffers for the transfers of offload (NVMe reads and writes
// under O_DIRECT, and host-device copies). Where a device library installed a host pinner that
// is available here (core/host_pinning.h: the CUDA driver's, with a visible GPU) its driver
// allocates and pins them, which asynchronous copies need; elsewhere, and where the driver
// refuses, pages are locked with mlock while RLIMIT_MEMLOCK allows, so the kernel neither swaps
// them out nor moves them during a transfer, and past the limit the pool hands out plain pages
// and says so once.
//
// Every buffer reports its bytes to a MemoryTracker as Place::kHostPinned under the caller's
// Category for as long as it lives. PinnedBuffer is the RAII owner (movable, not copyable); it
// must not outlive its pool. The pool is thread-safe; Allocate blocks only in the allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "core/host_pinning.h"
#include "core/memory_tracker.h"
#include "core/status.h"

namespace hoist::offload {

class PinnedHostPool;

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const { return data_; }
  std::byte* bytes() const { return static_cast<std::byte*>(data_); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // The bytes asked for, rounded up to whole pages (all usable).
  int64_t size_bytes() const { return size_bytes_; }
  Category category() const { return category_; }
  // Whether the pages are page-locked (mlock'd, or pinned by a driver).
  bool locked() const { return locked_; }
  // Whether the host pinner's driver allocated and pinned them (the CUDA driver's cudaHostAlloc
  // where the CUDA library installed it).
  bool driver_pinned() const { return pinner_ != nullptr; }
  explicit operator bool() const { return data_ != nullptr; }

  // Gives the memory back to the pool now; the buffer becomes empty.
  void Reset();

 private:
  friend class PinnedHostPool;

  PinnedHostPool* pool_ = nullptr;
  void* data_ = nullptr;
  int64_t size_bytes_ = 0;
  Category category_ = Category::kWorkspace;
  bool locked_ = false;
  HostPinner* pinner_ = nullptr;  // the driver's that pinned the pages; null for our own pages
};

struct PinnedHostPoolOptions {
  // Lock pages: through the host pinner's driver where one is available (what asynchronous
  // copies to and from a GPU need), otherwise with mlock while RLIMIT_MEMLOCK allows; false
  // hands out plain pages without a notice.
  bool lock_pages = true;
};

class PinnedHostPool {
 public:
  explicit PinnedHostPool(MemoryTracker& tracker = MemoryTracker::Global(),
                          PinnedHostPoolOptions options = {});
  // Every buffer must have been released (checked).
  ~PinnedHostPool();
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  // A buffer of at least `bytes` (> 0), aligned to kPageBytes. ResourceExhausted when the host
  // has no memory left.
  StatusOr<PinnedBuffer> Allocate(int64_t bytes, Category category);

  // Bytes of the live buffers, and how many of them are locked.
  int64_t bytes_in_use() const;
  int64_t bytes_locked() const;

  // Whether buffers are pinned through a driver here: a host pinner is installed (the CUDA
  // library's, in a binary that links it) and available on this machine (a visible GPU).
  static bool DriverPins();

  // The bytes a buffer asked for with `bytes` takes, and reports to the tracker: whole pages.
  static int64_t AllocationBytes(int64_t bytes) {
    return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  }

  static constexpr int64_t kPageBytes = 4096;
  // Buffers of at least this size are aligned to it and advised to use transparent huge pages.
  static constexpr int64_t kHugePageBytes = int64_t{2} << 20;

 private:
  friend class PinnedBuffer;
  void Release(PinnedBuffer& buffer);
  StatusOr<void*> AllocatePages(int64_t size, Category category);
  // mlock within RLIMIT_MEMLOCK; says once when it cannot. Holds mu_.
  bool LockPages(void* data, int64_t size);
  static void FreePages(void* data, int64_t size, bool locked, HostPinner* pinner);
  // Whether RLIMIT_MEMLOCK leaves room for `bytes` more locked bytes. Holds mu_.
  bool MayLock(int64_t bytes) const;

  MemoryTracker& tracker_;
  PinnedHostPoolOptions options_;
  mutable std::mutex mu_;
  int64_t bytes_in_use_ = 0;       // guarded by mu_
  int64_t bytes_locked_ = 0;       // guarded by mu_
  int64_t bytes_mlocked_ = 0;      // of them, through mlock (RLIMIT_MEMLOCK); guarded by mu_
  bool unlocked_noticed_ = false;  // guarded by mu_
};

}  // namespace hoist::offload
