#include "offload/scratch_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <string_view>
#include <thread>
#include <utility>

#include "core/logging.h"
#include "core/memory_tracker.h"
#include "core/posix_error.h"
#include "offload/block_storage.h"

namespace hoist::offload {

namespace {

// Free bytes for an unprivileged writer on the file system holding `path`, or -1 if unknown.
int64_t FreeBytes(const std::string& path) {
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) != 0) return -1;
  return static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
}

// Creates `path`, which must not exist: O_EXCL fails on any name already there, a symbolic link
// included (O_NOFOLLOW says so once more), so a name planted in a shared nvme_path can never make
// this process write optimizer state into a file it did not create.
int CreateFile(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// The pid in a scratch file's name, "hoist-rank<rank>-<pid>.<what>.swp"; 0 for another name.
int64_t ScratchFilePid(std::string_view name) {
  constexpr std::string_view kPrefix = "hoist-rank", kSuffix = ".swp";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return 0;
  name.remove_prefix(kPrefix.size());
  // A decimal number at the front of `name`, taken off it.
  const auto take_number = [&name](int64_t* value) {
    const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), *value);
    if (error != std::errc() || end == name.data()) return false;
    name.remove_prefix(static_cast<size_t>(end - name.data()));
    return true;
  };
  int64_t rank = 0, pid = 0;
  if (!take_number(&rank) || !name.starts_with('-')) return 0;
  name.remove_prefix(1);
  if (!take_number(&pid) || pid <= 0 || !name.starts_with('.')) return 0;
  return pid;
}

// Whether a process `pid` runs on this node (EPERM: it does, as another user's).
bool ProcessRuns(int64_t pid) {
  return pid <= INT32_MAX && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

bool FlockUnsupported(int errno_value) {
  return errno_value == ENOSYS || errno_value == ENOLCK || errno_value == EOPNOTSUPP ||
         errno_value == EINVAL;
}

std::string ScratchFilePath(const std::string& dir, int rank, const std::string& what) {
  return dir + "/hoist-rank" + std::to_string(rank) + "-" + std::to_string(::getpid()) + "." +
         what + ".swp";
}

namespace {

// Takes the lock of a scratch file whose process has ended: 0, or why not (an errno). Another
// sweep (a local rank's) may hold it while it removes the file, so a held lock is waited for
// until `deadline`, shared by the whole sweep, which bounds what locks of other nodes cost.
int LockEndedProcessFile(int fd, const SweepOptions& options,
                         std::chrono::steady_clock::time_point deadline) {
  if (options.simulate_flock_errno != 0) return options.simulate_flock_errno;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) return errno;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return 0;
}

// Whether `path` still names the file open as `info` (not removed nor replaced meanwhile).
bool StillNamed(const std::string& path, const struct stat& info) {
  struct stat now {};
  return ::lstat(path.c_str(), &now) == 0 && now.st_dev == info.st_dev && now.st_ino == info.st_ino;
}

}  // namespace

std::vector<FoundScratchFile> SweepScratchFiles(const std::string& dir,
                                                std::vector<FoundScratchFile>* left,
                                                const SweepOptions& options) {
  const auto deadline = std::chrono::steady_clock::now() + options.lock_wait;
  std::vector<FoundScratchFile> removed;
  std::vector<std::string> names;
  if (DIR* stream = ::opendir(dir.c_str()); stream != nullptr) {
    while (const dirent* entry = ::readdir(stream)) names.emplace_back(entry->d_name);
    ::closedir(stream);
  }
  for (const std::string& name : names) {
    FoundScratchFile found;
    found.pid = ScratchFilePid(name);
    if (found.pid == 0) continue;
    found.path = dir + "/" + name;
    // Not followed and not waited on: a link or a pipe planted under the name stays untouched.
    const int fd = ::open(found.path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    // Gone since the listing: another sweep removed it.
    if (fd < 0 && errno == ENOENT) continue;
    struct stat info {};
    if (fd < 0 || ::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      found.kept_because = "not a regular file this user can open";
    } else {
      found.size_bytes = static_cast<int64_t>(info.st_blocks) * 512;
      // A pid seen running keeps its files even when the lock is free: between its O_EXCL
      // create and its flock, a live process's new file is not yet locked. A lock held keeps
      // a file whose pid is not seen here: a process of another node (a shared directory) or of
      // another pid namespace.
      if (info.st_uid != ::geteuid()) {
        found.kept_because = "another user's";
      } else if (ProcessRuns(found.pid)) {
        found.kept_because = "process " + std::to_string(found.pid) + " still runs";
      } else if (const int lock_errno = LockEndedProcessFile(fd, options, deadline);
                 lock_errno != 0 && !FlockUnsupported(lock_errno)) {
        found.kept_because = "held by a process of another node or container";
      } else if (!StillNamed(found.path, info)) {
        // Another sweep held the lock while it removed the file.
        ::close(fd);
        continue;
      } else if (::unlink(found.path.c_str()) != 0 && errno != ENOENT) {
        found.kept_because = "cannot be removed: " + ErrnoText(errno);
      }
    }
    if (fd >= 0) ::close(fd);
    if (!found.kept_because.empty()) {
      if (left != nullptr) left->push_back(std::move(found));
    } else {
      removed.push_back(std::move(found));
    }
  }
  return removed;
}

Status PreallocationFailure(const std::string& path, int64_t bytes_needed, int64_t bytes_free,
                            int errno_value) {
  std::string message = "offload: preallocating " + std::to_string(bytes_needed) + " bytes (" +
                        FormatBytes(bytes_needed) + ") for " + path +
                        " failed: " + ErrnoText(errno_value);
  if (bytes_free >= 0) {
    message += "; the file system has " + std::to_string(bytes_free) + " bytes (" +
               FormatBytes(bytes_free) + ") free";
  }
  message += "; free space there or point nvme_path at a larger file system";
  return ResourceExhaustedError(message);
}

StatusOr<ScratchFile> ScratchFile::Open(const std::string& path, int64_t size_bytes,
                                        const ScratchFileOptions& options) {
  if (size_bytes < 0) {
    return InvalidArgumentError("offload: size of " + path + " is negative (" +
                                std::to_string(size_bytes) + " bytes)");
  }
  const int fd = CreateFile(path);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST || err == ELOOP) {
      return FailedPreconditionError(
          "offload: the scratch file " + path +
          " exists already (a file or a symbolic link); hoist only writes offloaded state into "
          "a file it creates itself. It may be left by a crashed run whose process id was "
          "reused, or placed there by someone else: check what it is, remove it, or point "
          "nvme_path at a directory only this job's user can write");
    }
    return PosixError("offload: open(O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW)", path, err);
  }
  // From here on the destructor closes the descriptor and removes the file.
  ScratchFile file(path, fd, size_bytes, false);
  // Held until the descriptor closes, by the kernel even when this process is killed: what tells
  // SweepScratchFiles that the file is in use.
  const int lock_errno = options.simulate_flock_errno != 0     ? options.simulate_flock_errno
                         : ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0
                                                               : errno;
  if (lock_errno != 0) {
    if (!FlockUnsupported(lock_errno)) return PosixError("offload: flock", path, lock_errno);
    // Offload works without the lock; only the sweep of files left by killed ranks loses a hint.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      HOIST_LOG(WARN) << "offload: the file system of " << path << " has no flock ("
                      << ErrnoText(lock_errno)
                      << "); scratch files go unlocked, and the sweep of files left by killed "
                         "ranks goes by process id alone";
    }
  }
  // O_DIRECT is switched on the open file rather than asked for at creation: a file system that
  // refuses it may have created the file before refusing, and a second O_EXCL open would fail.
  if (options.direct_io) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (!options.simulate_direct_io_refused && flags >= 0 &&
        ::fcntl(fd, F_SETFL, flags | O_DIRECT) == 0) {
      file.direct_io_ = true;
    } else if (options.simulate_direct_io_refused || errno == EINVAL) {
      HOIST_LOG(WARN) << "offload: the file system of " << path
                      << " refuses O_DIRECT; using buffered I/O (the page cache will hold a copy)";
    } else {
      return PosixError("offload: fcntl(F_SETFL, O_DIRECT)", path, errno);
    }
  }

  if (options.preallocate && size_bytes > 0) {
    int rc;
    do {
      rc = ::fallocate(fd, 0, 0, size_bytes);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int err = errno;
      if (err == ENOSPC || err == EDQUOT) {
        return PreallocationFailure(path, size_bytes, FreeBytes(path), err);
      }
      if (err != EOPNOTSUPP) return PosixError("offload: fallocate", path, err);
      HOIST_LOG(WARN) << "offload: the file system of " << path
                      << " cannot preallocate; the file is sparse, so a full disk will show as "
                         "ENOSPC during a write";
    }
  }
  // Without preallocation the size still has to be there for reads of never-written ranges.
  if (::ftruncate(fd, size_bytes) != 0) {
    const int err = errno;
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
      return PreallocationFailure(path, size_bytes, FreeBytes(path), err);
    }
    return PosixError("offload: ftruncate", path, err);
  }
  return file;
}

ScratchFile::ScratchFile(std::string path, int fd, int64_t size_bytes, bool direct_io)
    : path_(std::move(path)), fd_(fd), size_bytes_(size_bytes), direct_io_(direct_io) {}

ScratchFile::ScratchFile(ScratchFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_bytes_(other.size_bytes_),
      direct_io_(other.direct_io_) {}

ScratchFile& ScratchFile::operator=(ScratchFile&& other) noexcept {
  if (this != &other) {
    Close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_bytes_ = other.size_bytes_;
    direct_io_ = other.direct_io_;
  }
  return *this;
}

ScratchFile::~ScratchFile() { Close(); }

void ScratchFile::Close() {
  if (fd_ < 0) return;
  // Nothing can be done about a failed close of scratch that is about to be removed.
  ::close(fd_);
  fd_ = -1;
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    HOIST_LOG(WARN) << "offload: could not remove scratch file " << path_ << ": "
                    << ErrnoText(errno) << "; remove it by hand";
  }
}

}  // namespace hoist::offload
