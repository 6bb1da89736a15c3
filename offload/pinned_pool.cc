#include "offload/pinned_pool.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>

#include "core/live_memory.h"
#include "core/logging.h"
#include "offload/block_storage.h"

namespace hoist::offload {

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = other.pool_;
    data_ = other.data_;
    size_bytes_ = other.size_bytes_;
    category_ = other.category_;
    locked_ = other.locked_;
    pinner_ = other.pinner_;
    other.pool_ = nullptr;
    other.data_ = nullptr;
    other.size_bytes_ = 0;
    other.locked_ = false;
    other.pinner_ = nullptr;
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { Reset(); }

void PinnedBuffer::Reset() {
  if (data_ == nullptr) return;
  pool_->Release(*this);
  pool_ = nullptr;
  data_ = nullptr;
  size_bytes_ = 0;
  locked_ = false;
  pinner_ = nullptr;
}

PinnedHostPool::PinnedHostPool(MemoryTracker& tracker, PinnedHostPoolOptions options)
    : tracker_(tracker), options_(options) {}

PinnedHostPool::~PinnedHostPool() {
  std::lock_guard<std::mutex> lock(mu_);
  HOIST_CHECK_EQ(bytes_in_use_, 0) << "a PinnedBuffer outlives its PinnedHostPool";
}

bool PinnedHostPool::MayLock(int64_t bytes) const {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return false;
  if (limit.rlim_cur == RLIM_INFINITY) return true;
  return bytes_mlocked_ + bytes <= static_cast<int64_t>(limit.rlim_cur);
}

StatusOr<void*> PinnedHostPool::AllocatePages(int64_t size, Category category) {
  void* data = nullptr;
  // Large buffers start on a huge-page boundary and ask for transparent huge pages: a transfer
  // then covers physically contiguous memory, so the block layer does not split a 1 MiB request
  // into pieces for want of scatter-gather segments (4 KiB pages need 256 for 1 MiB, one more
  // than some virtual disks take).
  const bool huge = size >= kHugePageBytes;
  const size_t alignment = huge ? kHugePageBytes : kPageBytes;
  if (int rc = ::posix_memalign(&data, alignment, static_cast<size_t>(size)); rc != 0) {
    return ResourceExhaustedError("offload: allocating " + std::to_string(size) + " bytes (" +
                                  FormatBytes(size) + ") of pinned host memory for " +
                                  CategoryName(category) + " failed: " + ErrnoText(rc) +
                                  "; lower offload buffer_count/buffer_size or free host memory");
  }
  // Advice only: where transparent huge pages are off this changes nothing.
  if (huge) (void)::madvise(data, static_cast<size_t>(size), MADV_HUGEPAGE);
  return data;
}

bool PinnedHostPool::LockPages(void* data, int64_t size) {
  int lock_errno = ENOMEM;
  if (MayLock(size)) {
    if (::mlock(data, static_cast<size_t>(size)) == 0) return true;
    lock_errno = errno;
  }
  if (!unlocked_noticed_) {
    unlocked_noticed_ = true;
    HOIST_LOG(WARN) << "offload: cannot lock " << FormatBytes(bytes_locked_ + size)
                    << " of host memory (RLIMIT_MEMLOCK, " << ErrnoText(lock_errno)
                    << "); using unlocked pages, which the kernel may swap out "
                       "(raise `ulimit -l` to lock them)";
  }
  return false;
}

bool PinnedHostPool::DriverPins() { return AvailableHostPinner() != nullptr; }

void PinnedHostPool::FreePages(void* data, int64_t size, bool locked, HostPinner* pinner) {
  if (pinner != nullptr) {
    pinner->Free(data);
    return;
  }
  if (locked) ::munlock(data, static_cast<size_t>(size));
  std::free(data);
}

StatusOr<PinnedBuffer> PinnedHostPool::Allocate(int64_t bytes, Category category) {
  HOIST_CHECK_GT(bytes, 0) << "PinnedHostPool::Allocate";
  const int64_t size = AllocationBytes(bytes);
  HostPinner* pinner = options_.lock_pages ? AvailableHostPinner() : nullptr;
  void* data = pinner != nullptr ? pinner->Allocate(size) : nullptr;
  // A driver that refuses leaves the pages to mlock, as where there is none.
  if (data == nullptr) pinner = nullptr;
  if (pinner == nullptr) {
    HOIST_ASSIGN_OR_RETURN(data, AllocatePages(size, category));
  }

  PinnedBuffer buffer;
  buffer.pool_ = this;
  buffer.data_ = data;
  buffer.size_bytes_ = size;
  buffer.category_ = category;
  buffer.pinner_ = pinner;

  std::lock_guard<std::mutex> lock(mu_);
  if (pinner != nullptr) {
    buffer.locked_ = true;
  } else if (options_.lock_pages) {
    buffer.locked_ = LockPages(data, size);
    if (buffer.locked_) bytes_mlocked_ += size;
  }
  bytes_in_use_ += size;
  if (buffer.locked_) bytes_locked_ += size;
  tracker_.Add(Place::kHostPinned, category, size);
  live_memory::Add(data, size, /*device=*/false);
  return buffer;
}

void PinnedHostPool::Release(PinnedBuffer& buffer) {
  live_memory::Remove(buffer.data_);
  FreePages(buffer.data_, buffer.size_bytes_, buffer.locked_, buffer.pinner_);
  std::lock_guard<std::mutex> lock(mu_);
  bytes_in_use_ -= buffer.size_bytes_;
  if (buffer.locked_) bytes_locked_ -= buffer.size_bytes_;
  if (buffer.locked_ && buffer.pinner_ == nullptr) bytes_mlocked_ -= buffer.size_bytes_;
  tracker_.Remove(Place::kHostPinned, buffer.category_, buffer.size_bytes_);
}

int64_t PinnedHostPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_in_use_;
}

int64_t PinnedHostPool::bytes_locked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_locked_;
}

}  // namespace hoist::offload
