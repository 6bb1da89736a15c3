// PosixStorage: a BlockStorage on one preallocated file through pread/pwrite, with O_DIRECT so
// that swapped tensors bypass the page cache (which would otherwise hold a second copy of what
// offload moved out of memory). A file system that refuses O_DIRECT gets buffered I/O and a
// one-line notice.
//
// The file is the job's scratch: Open creates it (a name that exists already, a symbolic link
// included, is refused) and the destructor removes it. Read and Write are thread-safe on disjoint
// ranges and block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "offload/block_storage.h"
#include "offload/scratch_file.h"

namespace hoist::offload {

// The options are those of the scratch file behind it.
using PosixStorageOptions = ScratchFileOptions;

class PosixStorage final : public BlockStorage {
 public:
  // Creates `path` with `size_bytes` usable bytes (ScratchFile::Open's errors).
  static StatusOr<std::unique_ptr<PosixStorage>> Open(const std::string& path, int64_t size_bytes,
                                                      const PosixStorageOptions& options = {});
  ~PosixStorage() override;
  PosixStorage(const PosixStorage&) = delete;
  PosixStorage& operator=(const PosixStorage&) = delete;

  Status Write(int64_t offset, const void* data, int64_t bytes) override;
  Status Read(int64_t offset, void* data, int64_t bytes) override;
  int64_t alignment() const override { return file_.alignment(); }
  int64_t size_bytes() const override { return file_.size_bytes(); }
  const std::string& path() const override { return file_.path(); }

  // Whether the file is open with O_DIRECT.
  bool direct_io() const { return file_.direct_io(); }

  static constexpr int64_t kDirectIoAlignment = ScratchFile::kDirectIoAlignment;

 private:
  explicit PosixStorage(ScratchFile file) : file_(std::move(file)) {}

  ScratchFile file_;
};

}  // namespace hoist::offload
