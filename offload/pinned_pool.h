// PinnedHostPool: page-aligned host buffers for the transfers of offload (NVMe reads and writes
// under O_DIRECT, and host-device copies). On a CUDA build with a visible GPU the CUDA driver
// allocates and pins them (cudaHostAlloc), which asynchronous copies need; elsewhere pages are
// locked with mlock while RLIMIT_MEMLOCK allows, so the kernel neither swaps them out nor moves
// them during a transfer, and past the limit the pool hands out plain pages and says so once.
//
// Every buffer reports its bytes to a MemoryTracker as Place::kHostPinned under the caller's
// Category for as long as it lives. PinnedBuffer is the RAII owner (movable, not copyable); it
// must not outlive its pool. The pool is thread-safe; Allocate blocks only in the allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

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
  // Whether the pages are page-locked (mlock'd, or pinned by the CUDA driver).
  bool locked() const { return locked_; }
  // Whether the CUDA driver allocated and pinned them (cudaHostAlloc).
  bool cuda_pinned() const { return cuda_; }
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
  bool cuda_ = false;
};

struct PinnedHostPoolOptions {
  // Lock pages: on a CUDA build with a visible GPU through cudaHostAlloc (what asynchronous
  // copies to and from the GPU need), otherwise with mlock while RLIMIT_MEMLOCK allows; false
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

  // Whether this build and machine pin through the CUDA driver (a CUDA build with a visible GPU).
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
  static void FreePages(void* data, int64_t size, bool locked, bool cuda);
  // cudaHostAlloc'd memory, or nullptr where this build or machine has no GPU (or it refused).
  static void* CudaHostAlloc(int64_t size);
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
