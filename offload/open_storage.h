// Choosing the storage for offload scratch: io_uring where this build has it and the kernel
// allows it, else PosixStorage. io_uring can be refused at run time (kernel.io_uring_disabled,
// a container's seccomp profile), so the choice is made by probing, and a refusal falls back to
// POSIX with a one-line notice rather than failing the job. Free functions; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "offload/block_storage.h"

namespace hoist::offload {

enum class StorageBackend {
  kAuto,   // io_uring when built in and allowed, else POSIX
  kPosix,  // PosixStorage
  kUring,  // io_uring, or an error when this build lacks it (a refusal still falls back)
};

struct BlockStorageOptions {
  StorageBackend backend = StorageBackend::kAuto;
  bool direct_io = true;
  bool preallocate = true;
  // DeepSpeed's aio.block_size and aio.queue_depth: the size of one queued request and how many
  // may be in flight, for the queue-based backend.
  int64_t block_size_bytes = 1048576;
  int queue_depth = 8;
  // For tests: behave as though the kernel refused io_uring_setup, or open(O_DIRECT).
  bool simulate_uring_refused = false;
  bool simulate_direct_io_refused = false;
};

// Whether the kernel lets this process set up an io_uring: true if io_uring_setup succeeds,
// false where it is absent or refused (ENOSYS, EPERM, EACCES), an error for anything else
// (e.g. EMFILE). Independent of whether this build links liburing.
StatusOr<bool> ProbeIoUring();

// Whether this build has an io_uring BlockStorage.
bool UringStorageBuilt();

// Opens the scratch file `path` of `size_bytes` with the backend `options` ask for.
StatusOr<std::unique_ptr<BlockStorage>> OpenBlockStorage(const std::string& path,
                                                         int64_t size_bytes,
                                                         const BlockStorageOptions& options = {});

}  // namespace hoist::offload
