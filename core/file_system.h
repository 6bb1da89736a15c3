// The file-system seam (LevelDB's Env, narrowed to what checkpoints and token shards need):
// FileSystem is the interface, FileSystem::Posix() the real one, and FaultInjectingFileSystem a
// wrapper that makes chosen calls fail (a full disk on the Nth write, a rename that does not
// happen) so that tests can check that a failed save leaves the previous file intact.
//
// Every error is a Status from PosixError (core/posix_error.h) naming the path: ENOSPC and EDQUOT
// are ResourceExhausted, ENOENT is NotFound, the rest IoError. Every call blocks on the OS.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hoist {

// A file being written from its start. Not thread-safe. Destroying an unclosed file closes it
// and drops any error, so a caller that wants close(2)'s report calls Close.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all `bytes` at the end of the file; on error part of them may have been written.
  virtual Status Append(const void* data, int64_t bytes) = 0;
  // Writes all `bytes` at `offset`, extending the file as needed (a hole reads as zeros), without
  // moving where Append writes; on error part of them may have been written.
  virtual Status WriteAt(int64_t offset, const void* data, int64_t bytes) = 0;
  // Blocks until the contents are on stable storage (fsync).
  virtual Status Sync() = 0;
  // Some file systems (NFS) report a failed write only here.
  virtual Status Close() = 0;
};

// A file opened for reading at offsets. Read is thread-safe (pread), so one file may serve
// several threads at once.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to `bytes` at `offset` into `data` and returns how many were read: fewer only where
  // the file ends.
  virtual StatusOr<int64_t> Read(int64_t offset, void* data, int64_t bytes) const = 0;
  // The size when the file was opened.
  virtual int64_t size_bytes() const = 0;
  virtual const std::string& path() const = 0;
};

// A whole file mapped read-only. The pages belong to the page cache, not to a tracked
// allocation; they stay valid and unchanged (MAP_PRIVATE) until the mapping is destroyed.
// Immutable, so any number of threads may read it.
class ReadOnlyMapping {
 public:
  virtual ~ReadOnlyMapping() = default;
  virtual std::span<const std::byte> bytes() const = 0;
};

enum class FileType { kRegular, kDirectory, kOther };

struct FileInfo {
  FileType type = FileType::kOther;
  int64_t size_bytes = 0;
};

// Implementations are thread-safe; the caller owns every file and mapping returned.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The process-wide POSIX implementation; never destroyed.
  static FileSystem& Posix();

  // Creates or truncates `path` for writing.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // Opens the regular file at `path` for reading. Anything else (a named pipe, a directory, a
  // device) is InvalidArgument naming the path, without waiting on it.
  virtual StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // Maps the regular file at `path` in full; refuses anything else as NewRandomAccessFile does.
  virtual StatusOr<std::unique_ptr<ReadOnlyMapping>> MapReadOnly(const std::string& path) = 0;

  // stat(2), following symlinks; NotFound when nothing is there.
  virtual StatusOr<FileInfo> Stat(const std::string& path) = 0;
  // The names in directory `path` (not "." or ".."), in no particular order.
  virtual StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) = 0;

  // Creates the directory and any missing parents; an existing directory is fine.
  virtual Status CreateDirs(const std::string& path) = 0;
  // fsyncs a directory, making renames and creations inside it durable: without it a crash can
  // forget a new directory entry.
  virtual Status SyncDir(const std::string& path) = 0;
  // rename(2): atomically replaces `to` if it is a file or an empty directory.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Atomically swaps two existing paths (renameat2 RENAME_EXCHANGE). Unimplemented where the
  // file system cannot; callers fall back to a non-atomic replace.
  virtual Status Exchange(const std::string& a, const std::string& b) = 0;
  // link(2): a second name `to` for the file `from` (a symbolic link is linked, not followed);
  // `to` must not exist.
  virtual Status Link(const std::string& from, const std::string& to) = 0;
  // Removes a file or an empty directory; a missing path is fine, so cleanup may repeat.
  virtual Status Remove(const std::string& path) = 0;
  // Removes a file or a directory tree; a missing path is fine.
  virtual Status RemoveAll(const std::string& path) = 0;
};

// The whole file at `path`; for small files (manifests, pointers), it holds them in memory.
StatusOr<std::string> ReadFileToString(FileSystem& fs, const std::string& path);
// The same, refusing a file of more than `max_bytes` (before reading it where its size says so):
// for files from outside, whose size should not decide how much memory the process takes.
StatusOr<std::string> ReadFileToString(FileSystem& fs, const std::string& path, int64_t max_bytes);

// A fresh name beside `path` ("<path>.tmp.<pid>.<n>") for writing a file that is then renamed
// over `path`: the same directory keeps the rename atomic, and the pid and counter keep
// concurrent writers apart.
std::string UniqueTempPath(const std::string& path);

// Replaces `path` with the concatenation of `pieces` so that a reader sees the old file or the
// new one, never a mixture: writes a UniqueTempPath, fsyncs and closes it, renames it over
// `path` and fsyncs the directory. On error the temporary is removed and `path` is as it was
// (unless only the final directory fsync failed: then the rename happened but may not survive a
// crash).
Status WriteFileAtomically(FileSystem& fs, const std::string& path,
                           std::span<const std::string_view> pieces);

// The operations FaultInjectingFileSystem can fail.
enum class FileOp {
  kNewWritableFile,
  kAppend,  // and WriteAt
  kSync,
  kClose,
  kOpenForRead,  // NewRandomAccessFile and MapReadOnly
  kRead,
  kCreateDirs,
  kSyncDir,
  kRename,  // and Exchange; matched on the destination (`to`, `b`)
  kRemove,  // and RemoveAll
  kLink,    // matched on the new name
};

// One injected failure: the `nth` call (1 = the next) of `op` whose path contains
// `path_contains` (every path when empty) fails with `errno_value` without touching the disk;
// with `sticky`, every later matching call fails too, as a disk that stays full would.
//   fs.Inject(FileFault(FileOp::kAppend, ENOSPC).Nth(2).OnPathsContaining("rank_"));
struct FileFault {
  FileFault(FileOp op, int errno_value) : op(op), errno_value(errno_value) {}
  FileFault& Nth(int64_t n) {
    nth = n;
    return *this;
  }
  FileFault& OnPathsContaining(std::string text) {
    path_contains = std::move(text);
    return *this;
  }
  FileFault& Sticky() {
    sticky = true;
    return *this;
  }

  FileOp op;
  int errno_value;
  int64_t nth = 1;
  std::string path_contains;
  bool sticky = false;
};

// Forwards to `base` except where a fault was injected. For tests; thread-safe (one lock
// guards the faults and the budget). `base` must outlive it, and it must outlive the files it
// returns.
class FaultInjectingFileSystem final : public FileSystem {
 public:
  explicit FaultInjectingFileSystem(FileSystem& base = FileSystem::Posix()) : base_(base) {}

  void Inject(FileFault fault);
  // Appends and WriteAts beyond `bytes` in total (from now, over all files) write what fits and
  // then fail with ENOSPC, as a real full disk does.
  void SetWriteBudget(int64_t bytes);
  // A process killed after `calls` calls: those go through, and from then on every call (of any
  // operation, on any path) fails with EIO without touching the disk, which stays as the kill
  // left it. A crash test runs its operation once per `calls` = 0, 1, 2, ... until one finishes.
  void CrashAfter(int64_t calls);
  // Removes every fault, the budget and the crash.
  void Clear();
  // How many injected failures have fired.
  int64_t faults_fired() const;

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  StatusOr<std::unique_ptr<ReadOnlyMapping>> MapReadOnly(const std::string& path) override;
  StatusOr<FileInfo> Stat(const std::string& path) override { return base_.Stat(path); }
  StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    return base_.ListDirectory(path);
  }
  Status CreateDirs(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Exchange(const std::string& a, const std::string& b) override;
  Status Link(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status RemoveAll(const std::string& path) override;

 private:
  class FaultyWritableFile;
  class FaultyRandomAccessFile;
  struct ArmedFault {
    FileFault fault;
    int64_t matched = 0;
    bool fired = false;
  };

  FileSystem& base_;
  mutable std::mutex mu_;
  std::vector<ArmedFault> faults_;   // guarded by mu_
  int64_t write_budget_bytes_ = -1;  // guarded by mu_; negative: unlimited
  int64_t faults_fired_ = 0;         // guarded by mu_
  int64_t crash_after_calls_ = -1;   // guarded by mu_; negative: no crash
  int64_t calls_ = 0;                // guarded by mu_; counted while a crash is armed

  // The failure for a call of `op` on `path`, or OK; counts the call.
  Status Check(FileOp op, const std::string& path);
  // How many of `bytes` the write budget lets through.
  int64_t TakeWriteBudget(int64_t bytes);
};

}  // namespace hoist
