#include "offload/open_storage.h"

#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "core/logging.h"
#include "offload/posix_storage.h"
#ifdef HOIST_HAVE_URING
#include "offload/uring_storage.h"
#endif

namespace hoist::offload {

StatusOr<bool> ProbeIoUring() {
  // The raw system call rather than liburing, so that the probe (and the notice it leads to)
  // works the same in builds without liburing.
  io_uring_params params{};
  const long fd = ::syscall(__NR_io_uring_setup, 1, &params);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return true;
  }
  const int err = errno;
  if (err == ENOSYS || err == EPERM || err == EACCES) return false;
  return IoError("offload: probing io_uring (io_uring_setup with 1 entry) failed: " +
                 ErrnoText(err));
}

bool UringStorageBuilt() {
#ifdef HOIST_HAVE_URING
  return true;
#else
  return false;
#endif
}

StatusOr<std::unique_ptr<BlockStorage>> OpenBlockStorage(const std::string& path,
                                                         int64_t size_bytes,
                                                         const BlockStorageOptions& options) {
  if (options.block_size_bytes <= 0 || options.queue_depth <= 0) {
    return InvalidArgumentError(
        "offload: aio.block_size (" + std::to_string(options.block_size_bytes) +
        ") and aio.queue_depth (" + std::to_string(options.queue_depth) + ") must be positive");
  }
  ScratchFileOptions file;
  file.direct_io = options.direct_io;
  file.preallocate = options.preallocate;
  file.simulate_direct_io_refused = options.simulate_direct_io_refused;
  if (options.backend != StorageBackend::kPosix) {
    bool allowed = false;
    if (!options.simulate_uring_refused) {
      HOIST_ASSIGN_OR_RETURN(allowed, ProbeIoUring());
    }
    if (!allowed) {
      HOIST_LOG(WARN) << "offload: the kernel refused io_uring for " << path
                      << " (kernel.io_uring_disabled or a seccomp profile?); using pread/pwrite";
    } else if (!UringStorageBuilt()) {
      if (options.backend == StorageBackend::kUring) {
        return UnimplementedError(
            "offload: io_uring storage for " + path +
            " was asked for, but this build has none (liburing was not found at configure); "
            "rebuild with -DHOIST_WITH_URING=ON or ask for the posix backend");
      }
    } else {
#ifdef HOIST_HAVE_URING
      UringStorageOptions uring;
      uring.file = file;
      uring.block_size_bytes = options.block_size_bytes;
      uring.queue_depth = options.queue_depth;
      HOIST_ASSIGN_OR_RETURN(std::unique_ptr<UringStorage> storage,
                             UringStorage::Open(path, size_bytes, uring));
      return std::unique_ptr<BlockStorage>(std::move(storage));
#endif
    }
  }
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<PosixStorage> storage,
                         PosixStorage::Open(path, size_bytes, file));
  return std::unique_ptr<BlockStorage>(std::move(storage));
}

}  // namespace hoist::offload
