#include "offload/scratch_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
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

int OpenFile(const std::string& path, bool direct) {
  int flags = O_RDWR | O_CREAT | O_CLOEXEC | (direct ? O_DIRECT : 0);
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0600);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

}  // namespace

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
  struct stat st {};
  const bool existed = ::stat(path.c_str(), &st) == 0;

  bool direct = options.direct_io;
  int fd = -1;
  if (direct && options.simulate_direct_io_refused) {
    errno = EINVAL;
  } else {
    fd = OpenFile(path, direct);
  }
  if (fd < 0 && direct && errno == EINVAL) {
    HOIST_LOG(WARN) << "offload: the file system of " << path
                    << " refuses O_DIRECT; using buffered I/O (the page cache will hold a copy)";
    direct = false;
    fd = OpenFile(path, false);
  }
  if (fd < 0) {
    return PosixError("offload: open(O_RDWR|O_CREAT" + std::string(direct ? "|O_DIRECT" : "") + ")",
                      path, errno);
  }
  // From here on the destructor closes the descriptor and removes a file this call created.
  ScratchFile file(path, fd, size_bytes, direct, !existed);

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
  if (st.st_size < size_bytes || !existed) {
    if (::ftruncate(fd, size_bytes) != 0) {
      const int err = errno;
      if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
        return PreallocationFailure(path, size_bytes, FreeBytes(path), err);
      }
      return PosixError("offload: ftruncate", path, err);
    }
  }
  return file;
}

ScratchFile::ScratchFile(std::string path, int fd, int64_t size_bytes, bool direct_io,
                         bool created_file)
    : path_(std::move(path)),
      fd_(fd),
      size_bytes_(size_bytes),
      direct_io_(direct_io),
      created_file_(created_file) {}

ScratchFile::ScratchFile(ScratchFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_bytes_(other.size_bytes_),
      direct_io_(other.direct_io_),
      created_file_(std::exchange(other.created_file_, false)) {}

ScratchFile& ScratchFile::operator=(ScratchFile&& other) noexcept {
  if (this != &other) {
    Close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_bytes_ = other.size_bytes_;
    direct_io_ = other.direct_io_;
    created_file_ = std::exchange(other.created_file_, false);
  }
  return *this;
}

ScratchFile::~ScratchFile() { Close(); }

void ScratchFile::Close() {
  if (fd_ < 0) return;
  // Nothing can be done about a failed close of scratch that is about to be removed.
  ::close(fd_);
  fd_ = -1;
  if (created_file_ && ::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    HOIST_LOG(WARN) << "offload: could not remove scratch file " << path_ << ": "
                    << ErrnoText(errno) << "; remove it by hand";
  }
  created_file_ = false;
}

}  // namespace hoist::offload
