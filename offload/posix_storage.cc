#include "offload/posix_storage.h"

#include <unistd.h>

namespace hoist::offload {

StatusOr<std::unique_ptr<PosixStorage>> PosixStorage::Open(const std::string& path,
                                                           int64_t size_bytes,
                                                           const PosixStorageOptions& options) {
  HOIST_ASSIGN_OR_RETURN(ScratchFile file, ScratchFile::Open(path, size_bytes, options));
  return std::unique_ptr<PosixStorage>(new PosixStorage(std::move(file)));
}

PosixStorage::~PosixStorage() = default;

Status PosixStorage::Write(int64_t offset, const void* data, int64_t bytes) {
  HOIST_RETURN_IF_ERROR(CheckRequest(IoOp::kWrite, offset, data, bytes));
  return TransferFully(IoOp::kWrite, path(), offset, const_cast<void*>(data), bytes,
                       [fd = file_.fd()](int64_t off, void* p, int64_t n) {
                         return ::pwrite(fd, p, static_cast<size_t>(n), off);
                       });
}

Status PosixStorage::Read(int64_t offset, void* data, int64_t bytes) {
  HOIST_RETURN_IF_ERROR(CheckRequest(IoOp::kRead, offset, data, bytes));
  return TransferFully(IoOp::kRead, path(), offset, data, bytes,
                       [fd = file_.fd()](int64_t off, void* p, int64_t n) {
                         return ::pread(fd, p, static_cast<size_t>(n), off);
                       });
}

}  // namespace hoist::offload
