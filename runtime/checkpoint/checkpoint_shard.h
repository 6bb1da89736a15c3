// One rank's checkpoint shard file: named byte blobs ("params", "adam_m", ...) with an index
// that says where each one lies and its checksum. runtime/checkpoint/checkpoint.h builds the step
// directories and the manifest on top of this; most code wants that header, not this one.
//
// Layout, little-endian throughout (format version 1):
//   offset  bytes  field
//   0       8      magic "HOISTCKP"
//   8       4      u32 format version
//   12      4      u32 rank
//   16      8      u64 step
//   24      4      u32 blob count N
//   28      4      u32 index bytes: this header, the table and the index checksum together
//   32      ...    N table entries, each: u32 name length L, L bytes of name (no NUL),
//                  u64 data offset, u64 data bytes, u64 XXH64 (seed 0) of the data
//   ...     8      u64 index checksum: XXH64 (seed 0) of every byte before it
//   then each blob's data at its offset, in table order, offsets a multiple of 64, the gaps
//   zero; the file ends where the last blob ends (or at the index when there are none).
// The index checksum pins the blobs' checksums, so the manifest records it per file rather
// than a hash of the whole file, and committing a checkpoint reads only the indexes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"

namespace hoist::runtime {

// A blob to save. The caller owns `data`, which must stay valid and unchanged during the call.
struct CheckpointBlob {
  std::string name;  // unique within a shard, non-empty, at most 1024 bytes
  const void* data;
  int64_t bytes;
};

struct ShardBlobEntry {
  std::string name;
  int64_t offset = 0;
  int64_t bytes = 0;
  uint64_t xxh64 = 0;
};

struct ShardIndex {
  int rank = 0;
  int64_t step = 0;
  std::vector<ShardBlobEntry> blobs;
  int64_t index_bytes = 0;
  uint64_t index_xxh64 = 0;
  int64_t file_bytes = 0;  // the size the file must have
};

inline constexpr uint32_t kShardFormatVersion = 1;

// Blobs whose bytes are produced piece by piece, for states too large to hold in memory at once
// (optimizer states offloaded to NVMe). `produce(emit)` must hand every byte of every blob to
// emit(blob, data, bytes), each blob's bytes in order (blobs may interleave), and return emit's
// first error. The file is then the same, byte for byte, as if the blobs had been given whole.
struct StreamedBlobs {
  using Emit = std::function<Status(int blob, const void* data, int64_t bytes)>;
  std::vector<std::string> names;
  std::vector<int64_t> bytes;  // each blob's size, known up front
  std::function<Status(const Emit& emit)> produce;
};

// Runs `streamed`'s producer (if any) with an emit that fails at once with `failure`, and returns
// `failure`. A producer may be collective (every rank reads its NVMe states together and agrees on
// errors), so a rank that cannot write still takes its part in it.
Status AbandonStreamed(const StreamedBlobs* streamed, const Status& failure);

// Writes a complete shard file at `path` (created or truncated), fsyncs and closes it: `blobs`
// and then, if given, the `streamed` ones. On error the file may be partial: the caller removes
// it. Blocks; hashes and writes every blob once (with streamed blobs the index goes last, at the
// front of the file). The producer of `streamed` runs exactly once whatever fails first.
Status WriteShardFile(FileSystem& fs, const std::string& path, int64_t step, int rank,
                      std::span<const CheckpointBlob> blobs,
                      const StreamedBlobs* streamed = nullptr);

// A shard file opened for reading. Movable, not copyable; owns its open file. Const methods
// read at offsets only, so one ShardFile may serve concurrent reads from several threads.
class ShardFile {
 public:
  // NotFound if the file is missing; the size is taken at open.
  static StatusOr<ShardFile> Open(const std::string& path, FileSystem& fs = FileSystem::Posix());

  ShardFile(ShardFile&& other) noexcept = default;
  ShardFile& operator=(ShardFile&& other) noexcept = default;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  ~ShardFile() = default;

  // Reads and checks the index: magic, version, checksum, and that every blob lies inside a
  // file of exactly the size the index implies (a truncated file is DataLoss).
  StatusOr<ShardIndex> ReadIndex() const;
  // Reads one blob into `data` (entry.bytes long) and verifies its checksum; on a mismatch
  // `data` holds the corrupt bytes and the error names the blob.
  Status ReadBlob(const ShardBlobEntry& entry, void* data) const;
  // Reads bytes [offset, offset + bytes) of a blob, unchecked (BlobReader checks the whole).
  Status ReadRange(const ShardBlobEntry& entry, int64_t offset, void* data, int64_t bytes) const;

  const std::string& path() const { return file_->path(); }
  int64_t size_bytes() const { return file_->size_bytes(); }

 private:
  explicit ShardFile(std::unique_ptr<RandomAccessFile> file) : file_(std::move(file)) {}
  // Reads exactly `bytes`; a file that ends first is DataLoss (truncated).
  Status ReadAt(int64_t offset, void* data, int64_t bytes) const;

  std::unique_ptr<RandomAccessFile> file_;
};

// Reads one blob front to back in pieces, for blobs too large to hold in memory at once, and
// checks its checksum at the end: the pieces are not to be trusted until Finish returns Ok.
// Movable, not copyable; `file` must outlive it. Not thread-safe.
class BlobReader {
 public:
  BlobReader(const ShardFile* file, ShardBlobEntry entry);
  ~BlobReader();
  BlobReader(BlobReader&& other) noexcept;
  BlobReader& operator=(BlobReader&&) = delete;
  BlobReader(const BlobReader&) = delete;
  BlobReader& operator=(const BlobReader&) = delete;

  // The next `bytes` of the blob; reading past its end is FailedPrecondition.
  Status Read(void* data, int64_t bytes);
  // Ok when the whole blob was read and its checksum matches; DataLoss naming the blob if not.
  Status Finish() const;

 private:
  const ShardFile* file_;
  ShardBlobEntry entry_;
  int64_t done_ = 0;
  void* state_;  // XXH64_state_t
};

// "0123456789abcdef": how checksums appear in the manifest and in messages.
std::string Xxh64Hex(uint64_t value);

}  // namespace hoist::runtime
