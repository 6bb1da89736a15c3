#include "offload/memory_storage.h"

#include <cstring>

#include "core/check.h"

namespace hoist::offload {

MemoryStorage::MemoryStorage(std::string path, int64_t size_bytes, int64_t alignment)
    : path_(std::move(path)),
      size_bytes_(size_bytes),
      alignment_(alignment),
      bytes_(new std::byte[static_cast<size_t>(size_bytes)]()) {
  HOIST_CHECK_GE(size_bytes, 0);
  HOIST_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0) << "alignment " << alignment;
}

Status MemoryStorage::Write(int64_t offset, const void* data, int64_t bytes) {
  HOIST_RETURN_IF_ERROR(CheckRequest(IoOp::kWrite, offset, data, bytes));
  if (bytes > 0) std::memcpy(bytes_.get() + offset, data, static_cast<size_t>(bytes));
  return Status::Ok();
}

Status MemoryStorage::Read(int64_t offset, void* data, int64_t bytes) {
  HOIST_RETURN_IF_ERROR(CheckRequest(IoOp::kRead, offset, data, bytes));
  if (bytes > 0) std::memcpy(data, bytes_.get() + offset, static_cast<size_t>(bytes));
  return Status::Ok();
}

}  // namespace hoist::offload
