// ScratchFile: the open file descriptor behind a file-backed BlockStorage (PosixStorage,
// UringStorage), opened the way offload wants it: O_DIRECT where the file system allows it
// (buffered I/O and a one-line notice where it refuses), all blocks reserved up front, and the
// file removed again when this object goes. Open always creates the file (O_CREAT|O_EXCL|
// O_NOFOLLOW, mode 0600): a name that exists already, a symbolic link included, is an error,
// so that a name planted in a shared directory never redirects offloaded state into another file.
// The open file holds an exclusive flock for as long as it lives: a process killed with SIGKILL
// cannot remove its file, but the kernel drops its lock, which is how SweepScratchFiles tells a
// file left behind from one in use. Where the file system has no flock (Lustre mounted noflock,
// some network file systems) the file goes unlocked, with a warning once per process: the lock
// is only a hint for the sweep, which then goes by the process id alone.
//
// Movable, not copyable; the owner closes the descriptor by destroying it. Not thread-safe to
// move or destroy while another thread uses fd(); Open blocks on the file system.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace hoist::offload {

struct ScratchFileOptions {
  // Open with O_DIRECT (offsets, sizes and buffers then align to 4096); falls back to buffered
  // I/O with a notice where the file system refuses.
  bool direct_io = true;
  // Reserve all blocks at open (fallocate), so a full disk fails here rather than mid-step.
  bool preallocate = true;
  // For tests: behave as though open(O_DIRECT) were refused (tmpfs accepts it on new kernels).
  bool simulate_direct_io_refused = false;
  // For tests: behave as though flock failed with this errno (0: call flock).
  int simulate_flock_errno = 0;
};

class ScratchFile {
 public:
  // Creates `path` with `size_bytes` usable bytes. FailedPrecondition naming the path when
  // something (a file, a link) is there already; ResourceExhausted when the file system lacks
  // the space, naming the bytes needed and the bytes free.
  static StatusOr<ScratchFile> Open(const std::string& path, int64_t size_bytes,
                                    const ScratchFileOptions& options);
  ~ScratchFile();
  ScratchFile(ScratchFile&& other) noexcept;
  ScratchFile& operator=(ScratchFile&& other) noexcept;
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  int64_t size_bytes() const { return size_bytes_; }
  // Whether the file is open with O_DIRECT.
  bool direct_io() const { return direct_io_; }
  // What offsets, sizes and addresses must be multiples of: 4096 under O_DIRECT, else 1.
  int64_t alignment() const { return direct_io_ ? kDirectIoAlignment : 1; }

  static constexpr int64_t kDirectIoAlignment = 4096;

 private:
  ScratchFile(std::string path, int fd, int64_t size_bytes, bool direct_io);
  void Close();

  std::string path_;
  int fd_ = -1;
  int64_t size_bytes_ = 0;
  bool direct_io_ = false;
};

// Where rank `rank` of this process keeps its `what` ("optimizer", "params") scratch file under
// `dir`: hoist-rank<rank>-<pid>.<what>.swp, unique per rank and per process, since two jobs may
// share a directory.
std::string ScratchFilePath(const std::string& dir, int rank, const std::string& what);

// A scratch file (a name ScratchFilePath gives) found in a directory.
struct FoundScratchFile {
  std::string path;
  int64_t size_bytes = 0;  // allocated on disk, what it takes from the free space
  int64_t pid = 0;         // the process that created it, from its name
  // Empty for a removed file; for one left, why: "process 123 still runs", ...
  std::string kept_because;
};

// Whether a flock that failed with `errno_value` failed because the file system has no locks
// (ENOSYS, ENOLCK, EOPNOTSUPP, EINVAL) rather than because someone holds the lock.
bool FlockUnsupported(int errno_value);

struct SweepOptions {
  // How long, in all, to wait on the locks of files whose process has ended: every local rank
  // sweeps the same directory at once, and the one that locked such a file first holds the lock
  // while it removes it. A lock still held after that is a process of another node's.
  std::chrono::milliseconds lock_wait{2000};
  // For tests: behave as though flock failed with this errno (0: call flock).
  int simulate_flock_errno = 0;
};

// Removes the scratch files under `dir` whose process has ended: those this user owns, whose pid
// runs no process on this node and whose lock nobody holds (a rank killed with SIGKILL leaves its
// whole offloaded state there, and restarts would pile such files up until the disk is full).
// Returns the ones removed; `*left` (when not null) gets those still there, each with why: in
// use by a live process, another user's, or not examinable. Best effort: nothing is removed that
// is not surely stale. Blocks on the file system; thread-safe, and several processes may sweep
// one directory at once: a file another sweep is removing is waited for (options.lock_wait) and
// then counts as neither removed nor left. On a file system without flock the process id alone
// decides.
std::vector<FoundScratchFile> SweepScratchFiles(const std::string& dir,
                                                std::vector<FoundScratchFile>* left = nullptr,
                                                const SweepOptions& options = {});

// The ResourceExhausted Status for a preallocation of `bytes_needed` on `path` that failed with
// `errno_value` where the file system had `bytes_free` free.
Status PreallocationFailure(const std::string& path, int64_t bytes_needed, int64_t bytes_free,
                            int errno_value);

}  // namespace hoist::offload
