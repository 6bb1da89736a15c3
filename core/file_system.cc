#include "core/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "core/posix_error.h"

namespace hoist {
namespace {

// write(2) and pread(2) move at most about 2 GiB per call on Linux.
constexpr int64_t kMaxIoChunk = int64_t{1} << 30;

// Owns a descriptor; closing it is the only cleanup a failed open path needs.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(const void* data, int64_t bytes) override {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd_, p, static_cast<size_t>(std::min(bytes, kMaxIoChunk)));
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError("write", path_, errno);
      }
      // No progress and no error: the device took nothing, as a full one does.
      if (n == 0) return PosixError("write", path_, ENOSPC);
      p += n;
      bytes -= n;
    }
    return Status::Ok();
  }

  Status WriteAt(int64_t offset, const void* data, int64_t bytes) override {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::pwrite(fd_, p, static_cast<size_t>(std::min(bytes, kMaxIoChunk)), offset);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError("pwrite", path_, errno);
      }
      if (n == 0) return PosixError("pwrite", path_, ENOSPC);
      p += n;
      bytes -= n;
      offset += n;
    }
    return Status::Ok();
  }

  Status Sync() override {
    HOIST_POSIX_CALL(::fsync(fd_), path_);
    return Status::Ok();
  }

  Status Close() override {
    const int fd = std::exchange(fd_, -1);
    // The descriptor is gone whatever close(2) reports, so it is never retried.
    HOIST_POSIX_CALL(::close(fd), path_);
    return Status::Ok();
  }

 private:
  int fd_;
  std::string path_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(int fd, std::string path, int64_t size_bytes)
      : fd_(fd), path_(std::move(path)), size_bytes_(size_bytes) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  StatusOr<int64_t> Read(int64_t offset, void* data, int64_t bytes) const override {
    char* p = static_cast<char*>(data);
    int64_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::pread(
          fd_, p + done, static_cast<size_t>(std::min(bytes - done, kMaxIoChunk)), offset + done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError("pread", path_, errno);
      }
      if (n == 0) break;
      done += n;
    }
    return done;
  }

  int64_t size_bytes() const override { return size_bytes_; }
  const std::string& path() const override { return path_; }

 private:
  int fd_;
  std::string path_;
  int64_t size_bytes_;
};

class PosixReadOnlyMapping final : public ReadOnlyMapping {
 public:
  PosixReadOnlyMapping(void* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  ~PosixReadOnlyMapping() override {
    if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(bytes_));
  }
  std::span<const std::byte> bytes() const override {
    return {static_cast<const std::byte*>(data_), static_cast<size_t>(bytes_)};
  }

 private:
  void* data_;
  int64_t bytes_;
};

// Opens `path` for reading if it is a regular file. O_NONBLOCK keeps open(2) from waiting for a
// writer when the path is a named pipe (it would wait forever); on a regular file the flag has no
// effect. Anything else (a pipe, a directory, a device, a socket) is refused by name.
StatusOr<ScopedFd> OpenRegularForReading(const std::string& path, struct stat* info) {
  const int raw_fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (raw_fd < 0) return PosixError("open", path, errno);
  ScopedFd fd(raw_fd);
  if (::fstat(fd.get(), info) < 0) return PosixError("fstat", path, errno);
  if (!S_ISREG(info->st_mode)) {
    const char* kind = S_ISFIFO(info->st_mode)                            ? "a named pipe"
                       : S_ISDIR(info->st_mode)                           ? "a directory"
                       : S_ISCHR(info->st_mode) || S_ISBLK(info->st_mode) ? "a device"
                       : S_ISSOCK(info->st_mode)                          ? "a socket"
                                                                          : "not a file";
    return InvalidArgumentError("'" + path + "' is not a regular file (it is " + kind +
                                "); hoist reads models, shards, tokenizers, configs and "
                                "checkpoints from regular files: give the path of one");
  }
  return fd;
}

class PosixFileSystem final : public FileSystem {
 public:
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd;
    HOIST_POSIX_CALL(fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                     path);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(fd, path));
  }

  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    struct stat info;
    HOIST_ASSIGN_OR_RETURN(ScopedFd fd, OpenRegularForReading(path, &info));
    return std::unique_ptr<RandomAccessFile>(
        new PosixRandomAccessFile(fd.release(), path, static_cast<int64_t>(info.st_size)));
  }

  StatusOr<std::unique_ptr<ReadOnlyMapping>> MapReadOnly(const std::string& path) override {
    struct stat info;
    HOIST_ASSIGN_OR_RETURN(ScopedFd fd, OpenRegularForReading(path, &info));
    const int64_t bytes = info.st_size;
    // mmap(2) rejects a zero length; an empty file maps to an empty span.
    if (bytes == 0) return std::unique_ptr<ReadOnlyMapping>(new PosixReadOnlyMapping(nullptr, 0));
    void* data = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (data == MAP_FAILED) return PosixError("mmap", path, errno);
    return std::unique_ptr<ReadOnlyMapping>(new PosixReadOnlyMapping(data, bytes));
  }

  StatusOr<FileInfo> Stat(const std::string& path) override {
    struct stat info;
    HOIST_POSIX_CALL(::stat(path.c_str(), &info), path);
    FileInfo result;
    result.type = S_ISREG(info.st_mode)   ? FileType::kRegular
                  : S_ISDIR(info.st_mode) ? FileType::kDirectory
                                          : FileType::kOther;
    result.size_bytes = static_cast<int64_t>(info.st_size);
    return result;
  }

  StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), ::closedir);
    if (dir == nullptr) return PosixError("opendir", path, errno);
    std::vector<std::string> names;
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(dir.get());
      if (entry == nullptr) {
        if (errno != 0) return PosixError("readdir", path, errno);
        return names;
      }
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
  }

  Status CreateDirs(const std::string& path) override {
    std::error_code error;
    std::filesystem::create_directories(path, error);
    if (error) return PosixError("create_directories", path, error.value());
    return Status::Ok();
  }

  Status SyncDir(const std::string& path) override {
    int raw_fd;
    HOIST_POSIX_CALL(raw_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC), path);
    ScopedFd fd(raw_fd);
    HOIST_POSIX_CALL(::fsync(fd.get()), path);
    return Status::Ok();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    HOIST_POSIX_CALL(::rename(from.c_str(), to.c_str()), from + "' -> '" + to);
    return Status::Ok();
  }

  Status Exchange(const std::string& a, const std::string& b) override {
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) < 0) {
      if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
        return UnimplementedError("this file system cannot exchange '" + a + "' and '" + b + "'");
      }
      return PosixError("renameat2(RENAME_EXCHANGE)", a + "' <-> '" + b, errno);
    }
    return Status::Ok();
  }

  Status Link(const std::string& from, const std::string& to) override {
    HOIST_POSIX_CALL(::link(from.c_str(), to.c_str()), from + "' -> '" + to);
    return Status::Ok();
  }

  Status Remove(const std::string& path) override {
    std::error_code error;
    std::filesystem::remove(path, error);
    if (error) return PosixError("remove", path, error.value());
    return Status::Ok();
  }

  Status RemoveAll(const std::string& path) override {
    std::error_code error;
    std::filesystem::remove_all(path, error);
    if (error) return PosixError("remove_all", path, error.value());
    return Status::Ok();
  }
};

const char* OpName(FileOp op) {
  switch (op) {
    case FileOp::kNewWritableFile: return "open for writing";
    case FileOp::kAppend: return "write";
    case FileOp::kSync: return "fsync";
    case FileOp::kClose: return "close";
    case FileOp::kOpenForRead: return "open for reading";
    case FileOp::kRead: return "pread";
    case FileOp::kCreateDirs: return "create_directories";
    case FileOp::kSyncDir: return "fsync directory";
    case FileOp::kRename: return "rename";
    case FileOp::kRemove: return "remove";
    case FileOp::kLink: return "link";
  }
  return "file operation";
}

}  // namespace

FileSystem& FileSystem::Posix() {
  static FileSystem* const fs = new PosixFileSystem();
  return *fs;
}

StatusOr<std::string> ReadFileToString(FileSystem& fs, const std::string& path) {
  return ReadFileToString(fs, path, std::numeric_limits<int64_t>::max());
}

StatusOr<std::string> ReadFileToString(FileSystem& fs, const std::string& path, int64_t max_bytes) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, fs.NewRandomAccessFile(path));
  auto too_large = [&] {
    return InvalidArgumentError("'" + path + "' holds more than " + std::to_string(max_bytes) +
                                " bytes, the most hoist reads from such a file; is it the right "
                                "file?");
  };
  if (file->size_bytes() > max_bytes) return too_large();
  std::string contents;
  // Read to the end rather than to the size at open, so a file that grew is read whole.
  constexpr int64_t kChunkBytes = 64 << 10;
  for (;;) {
    const size_t at = contents.size();
    contents.resize(at + kChunkBytes);
    HOIST_ASSIGN_OR_RETURN(int64_t n,
                           file->Read(static_cast<int64_t>(at), contents.data() + at, kChunkBytes));
    contents.resize(at + static_cast<size_t>(n));
    if (static_cast<int64_t>(contents.size()) > max_bytes) {
      return too_large();
    }
    if (n < kChunkBytes) return contents;
  }
}

std::string UniqueTempPath(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

Status WriteFileAtomically(FileSystem& fs, const std::string& path,
                           std::span<const std::string_view> pieces) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const std::string temp_path = UniqueTempPath(path);
  Status status = [&]() -> Status {
    HOIST_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs.NewWritableFile(temp_path));
    for (std::string_view piece : pieces) {
      HOIST_RETURN_IF_ERROR(file->Append(piece.data(), static_cast<int64_t>(piece.size())));
    }
    HOIST_RETURN_IF_ERROR(file->Sync());
    HOIST_RETURN_IF_ERROR(file->Close());
    return fs.Rename(temp_path, path);
  }();
  if (!status.ok()) {
    (void)fs.Remove(temp_path);
    return status;
  }
  return fs.SyncDir(dir);
}

class FaultInjectingFileSystem::FaultyWritableFile final : public WritableFile {
 public:
  FaultyWritableFile(FaultInjectingFileSystem* fs, std::unique_ptr<WritableFile> file,
                     std::string path)
      : fs_(fs), file_(std::move(file)), path_(std::move(path)) {}

  Status Append(const void* data, int64_t bytes) override {
    HOIST_RETURN_IF_ERROR(fs_->Check(FileOp::kAppend, path_));
    const int64_t allowed = fs_->TakeWriteBudget(bytes);
    if (allowed > 0) HOIST_RETURN_IF_ERROR(file_->Append(data, allowed));
    if (allowed < bytes) return PosixError("write", path_, ENOSPC);
    return Status::Ok();
  }
  Status WriteAt(int64_t offset, const void* data, int64_t bytes) override {
    HOIST_RETURN_IF_ERROR(fs_->Check(FileOp::kAppend, path_));
    const int64_t allowed = fs_->TakeWriteBudget(bytes);
    if (allowed > 0) HOIST_RETURN_IF_ERROR(file_->WriteAt(offset, data, allowed));
    if (allowed < bytes) return PosixError("pwrite", path_, ENOSPC);
    return Status::Ok();
  }
  Status Sync() override {
    HOIST_RETURN_IF_ERROR(fs_->Check(FileOp::kSync, path_));
    return file_->Sync();
  }
  Status Close() override {
    // The descriptor goes away even when the close "fails", as with close(2).
    Status injected = fs_->Check(FileOp::kClose, path_);
    Status closed = file_->Close();
    return injected.ok() ? closed : injected;
  }

 private:
  FaultInjectingFileSystem* fs_;
  std::unique_ptr<WritableFile> file_;
  std::string path_;
};

class FaultInjectingFileSystem::FaultyRandomAccessFile final : public RandomAccessFile {
 public:
  FaultyRandomAccessFile(FaultInjectingFileSystem* fs, std::unique_ptr<RandomAccessFile> file)
      : fs_(fs), file_(std::move(file)) {}

  StatusOr<int64_t> Read(int64_t offset, void* data, int64_t bytes) const override {
    HOIST_RETURN_IF_ERROR(fs_->Check(FileOp::kRead, file_->path()));
    return file_->Read(offset, data, bytes);
  }
  int64_t size_bytes() const override { return file_->size_bytes(); }
  const std::string& path() const override { return file_->path(); }

 private:
  FaultInjectingFileSystem* fs_;
  std::unique_ptr<RandomAccessFile> file_;
};

void FaultInjectingFileSystem::Inject(FileFault fault) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.push_back(ArmedFault{std::move(fault), 0, false});
}

void FaultInjectingFileSystem::SetWriteBudget(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  write_budget_bytes_ = std::max<int64_t>(bytes, 0);
}

void FaultInjectingFileSystem::CrashAfter(int64_t calls) {
  std::lock_guard<std::mutex> lock(mu_);
  crash_after_calls_ = std::max<int64_t>(calls, 0);
  calls_ = 0;
}

void FaultInjectingFileSystem::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.clear();
  write_budget_bytes_ = -1;
  crash_after_calls_ = -1;
}

int64_t FaultInjectingFileSystem::faults_fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_fired_;
}

Status FaultInjectingFileSystem::Check(FileOp op, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (crash_after_calls_ >= 0 && calls_++ >= crash_after_calls_) {
    return PosixError(std::string(OpName(op)) + " (after an injected crash)", path, EIO);
  }
  for (ArmedFault& armed : faults_) {
    const FileFault& fault = armed.fault;
    if (fault.op != op || path.find(fault.path_contains) == std::string::npos) continue;
    if (armed.fired ? !fault.sticky : ++armed.matched != fault.nth) continue;
    armed.fired = true;
    ++faults_fired_;
    return PosixError(std::string(OpName(op)) + " (injected fault)", path, fault.errno_value);
  }
  return Status::Ok();
}

int64_t FaultInjectingFileSystem::TakeWriteBudget(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (write_budget_bytes_ < 0) return bytes;
  const int64_t allowed = std::min(bytes, write_budget_bytes_);
  write_budget_bytes_ -= allowed;
  return allowed;
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectingFileSystem::NewWritableFile(
    const std::string& path) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kNewWritableFile, path));
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_.NewWritableFile(path));
  return std::unique_ptr<WritableFile>(new FaultyWritableFile(this, std::move(file), path));
}

StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectingFileSystem::NewRandomAccessFile(
    const std::string& path) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kOpenForRead, path));
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, base_.NewRandomAccessFile(path));
  return std::unique_ptr<RandomAccessFile>(new FaultyRandomAccessFile(this, std::move(file)));
}

StatusOr<std::unique_ptr<ReadOnlyMapping>> FaultInjectingFileSystem::MapReadOnly(
    const std::string& path) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kOpenForRead, path));
  return base_.MapReadOnly(path);
}

Status FaultInjectingFileSystem::CreateDirs(const std::string& path) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kCreateDirs, path));
  return base_.CreateDirs(path);
}

Status FaultInjectingFileSystem::SyncDir(const std::string& path) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kSyncDir, path));
  return base_.SyncDir(path);
}

Status FaultInjectingFileSystem::Rename(const std::string& from, const std::string& to) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kRename, to));
  return base_.Rename(from, to);
}

Status FaultInjectingFileSystem::Exchange(const std::string& a, const std::string& b) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kRename, b));
  return base_.Exchange(a, b);
}

Status FaultInjectingFileSystem::Link(const std::string& from, const std::string& to) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kLink, to));
  return base_.Link(from, to);
}

Status FaultInjectingFileSystem::Remove(const std::string& path) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kRemove, path));
  return base_.Remove(path);
}

Status FaultInjectingFileSystem::RemoveAll(const std::string& path) {
  HOIST_RETURN_IF_ERROR(Check(FileOp::kRemove, path));
  return base_.RemoveAll(path);
}

}  // namespace hoist
