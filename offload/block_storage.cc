#include "offload/block_storage.h"

#include <cerrno>
#include <cstring>

namespace hoist::offload {

const char* IoOpVerb(IoOp op) { return op == IoOp::kRead ? "reading" : "writing"; }

std::string ErrnoText(int errno_value) {
  std::string text = std::strerror(errno_value);
  if (const char* name = strerrorname_np(errno_value)) {
    text += " (";
    text += name;
    text += ")";
  }
  return text;
}

namespace {

std::string Describe(IoOp op, const std::string& path, int64_t offset, int64_t bytes) {
  return "offload: " + std::string(IoOpVerb(op)) + " " + std::to_string(bytes) +
         " bytes at offset " + std::to_string(offset) + " of " + path;
}

std::string After(int64_t done_bytes) {
  return done_bytes > 0 ? " after " + std::to_string(done_bytes) + " bytes" : "";
}

}  // namespace

Status IoFailure(IoOp op, const std::string& path, int64_t offset, int64_t bytes, int errno_value,
                 int64_t done_bytes) {
  std::string message = Describe(op, path, offset, bytes) + " failed" + After(done_bytes) + ": " +
                        ErrnoText(errno_value);
  switch (errno_value) {
    case ENOSPC:
    case EDQUOT:
      return ResourceExhaustedError(
          message + "; free space on that file system or point nvme_path elsewhere");
    case EINVAL: return InvalidArgumentError(message);
    default: return IoError(message);
  }
}

Status UnexpectedEof(const std::string& path, int64_t offset, int64_t bytes, int64_t done_bytes) {
  return DataLossError(Describe(IoOp::kRead, path, offset, bytes) + " failed" + After(done_bytes) +
                       ": the file ends there (was it truncated or replaced?)");
}

Status TransferFully(IoOp op, const std::string& path, int64_t offset, void* data, int64_t bytes,
                     const TransferFn& transfer) {
  auto* bytes_at = static_cast<char*>(data);
  int64_t done = 0;
  while (done < bytes) {
    ssize_t n = transfer(offset + done, bytes_at + done, bytes - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoFailure(op, path, offset, bytes, errno, done);
    }
    if (n == 0) {
      // pwrite returning 0 for a non-empty request means the device will take no more.
      if (op == IoOp::kWrite) return IoFailure(op, path, offset, bytes, ENOSPC, done);
      return UnexpectedEof(path, offset, bytes, done);
    }
    done += n;
  }
  return Status::Ok();
}

Status BlockStorage::CheckRequest(IoOp op, int64_t offset, const void* data, int64_t bytes) const {
  if (offset < 0 || bytes < 0 || offset > size_bytes() || bytes > size_bytes() - offset) {
    return InvalidArgumentError(Describe(op, path(), offset, bytes) + ": outside the file's " +
                                std::to_string(size_bytes()) + " bytes");
  }
  const int64_t align = alignment();
  const auto address = reinterpret_cast<uintptr_t>(data);
  if (offset % align != 0 || bytes % align != 0 || address % static_cast<uintptr_t>(align) != 0) {
    return InvalidArgumentError(Describe(op, path(), offset, bytes) +
                                ": offset, size and buffer address must be multiples of " +
                                std::to_string(align) +
                                " (take buffers from PinnedHostPool and round sizes up)");
  }
  return Status::Ok();
}

Status BlockStorage::Submit(std::span<const IoRequest> requests) {
  for (const IoRequest& r : requests) {
    Status s =
        r.op == IoOp::kRead ? Read(r.offset, r.data, r.bytes) : Write(r.offset, r.data, r.bytes);
    if (!s.ok() && pending_.ok()) pending_ = std::move(s);
  }
  return Status::Ok();
}

Status BlockStorage::Wait() {
  Status result = std::move(pending_);
  pending_ = Status::Ok();
  return result;
}

}  // namespace hoist::offload
