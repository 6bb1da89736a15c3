// PosixStorage: a BlockStorage on one preallocated file through pread/pwrite, with O_DIRECT so
// that swapped tensors bypass the page cache (which would otherwise hold a second copy of what
// offload moved out of memory). A file system that refuses O_DIRECT gets buffered I/O and a
// one-line notice.
//
// The file is the job's scratch: if Open created it, the destructor removes it. An existing
// file is reused and left in place. Read and Write are thread-safe on disjoint ranges and block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "offload/block_storage.h"

namespace hoist::offload {

struct PosixStorageOptions {
  // Open with O_DIRECT (offsets, sizes and buffers then align to 4096); falls back to buffered
  // I/O with a notice where the file system refuses.
  bool direct_io = true;
  // Reserve all blocks at open (fallocate), so a full disk fails here rather than mid-step.
  bool preallocate = true;
  // For tests: behave as though open(O_DIRECT) were refused (tmpfs accepts it on new kernels).
  bool simulate_direct_io_refused = false;
};

class PosixStorage final : public BlockStorage {
 public:
  // Opens or creates `path` with `size_bytes` usable bytes. ResourceExhausted when the file
  // system lacks the space, naming the bytes needed and the bytes free.
  static StatusOr<std::unique_ptr<PosixStorage>> Open(const std::string& path, int64_t size_bytes,
                                                      const PosixStorageOptions& options = {});
  ~PosixStorage() override;
  PosixStorage(const PosixStorage&) = delete;
  PosixStorage& operator=(const PosixStorage&) = delete;

  Status Write(int64_t offset, const void* data, int64_t bytes) override;
  Status Read(int64_t offset, void* data, int64_t bytes) override;
  int64_t alignment() const override { return direct_io_ ? kDirectIoAlignment : 1; }
  int64_t size_bytes() const override { return size_bytes_; }
  const std::string& path() const override { return path_; }

  // Whether the file is open with O_DIRECT.
  bool direct_io() const { return direct_io_; }
  // Whether Open created the file (and the destructor will remove it).
  bool created_file() const { return created_file_; }

  static constexpr int64_t kDirectIoAlignment = 4096;

 private:
  PosixStorage(std::string path, int fd, int64_t size_bytes, bool direct_io, bool created_file);

  std::string path_;
  int fd_;
  int64_t size_bytes_;
  bool direct_io_;
  bool created_file_;
};

// The ResourceExhausted Status for a preallocation of `bytes_needed` on `path` that failed with
// `errno_value` where the file system had `bytes_free` free.
Status PreallocationFailure(const std::string& path, int64_t bytes_needed, int64_t bytes_free,
                            int errno_value);

}  // namespace hoist::offload
