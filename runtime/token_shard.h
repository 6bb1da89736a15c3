// Token shards in llm.c's format: a 1024-byte header of 256 little-endian int32 ([0] magic
// 20240520, [1] version 1, [2] token count, the rest zero) followed by exactly `count` uint16
// tokens. This is the file that `hoist data tokenize` writes and the data loader reads, and it is
// byte-compatible with llm.c's and nanoGPT's GPT-2 shards.
//
// A TokenShard keeps its file open and reads tokens with pread when asked, rather than mapping
// it: a file truncated while training then gives an error that names it and its sizes, where a
// mapping would end the process with SIGBUS. What it reads is copied out, not tracked memory.
// Reading and writing block on the file system and go through a FileSystem (core/file_system.h),
// so tests can inject faults such as a full disk. A TokenShard is immutable after ReadTokenShard
// returns and may be read from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"

namespace hoist::runtime {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderInts = 256;
inline constexpr int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;

// One shard's tokens, read from its file on demand. Movable, not copyable; closes the file on
// destruction.
class TokenShard {
 public:
  TokenShard() = default;
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard() = default;

  const std::string& path() const { return path_; }
  // Tokens, as the header counts them.
  int64_t size() const { return count_; }

  // Copies tokens [first, first + count) into `out`; the range must lie within size(). A file
  // that has become shorter since it was opened (truncated in place) is DataLoss naming it, its
  // size now and the size it should have; an I/O error is IoError naming it.
  Status Read(int64_t first, int64_t count, uint16_t* out) const;
  // Every token (Read's errors).
  StatusOr<std::vector<uint16_t>> ReadAll() const;

  // OK when every token is below `vocab_size`; otherwise an InvalidArgument error naming the file,
  // the first offending token's index and value, and `vocab_size`. Reads the whole shard.
  Status CheckTokensBelow(int vocab_size) const;

 private:
  friend StatusOr<TokenShard> ReadTokenShard(const std::string& path, FileSystem& fs);

  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  int64_t count_ = 0;
};

// Opens the shard at `path` after validating its header. A wrong magic or version is DataLoss
// naming the file and the value found; a file whose size is not exactly 1024 + 2 * count bytes
// (truncated or over-long) is DataLoss naming the file, the expected and the actual size; a
// missing file is NotFound.
StatusOr<TokenShard> ReadTokenShard(const std::string& path, FileSystem& fs = FileSystem::Posix());

// Writes `tokens` as a shard at `path`, atomically: the bytes go to a temporary file in the same
// directory, which is fsynced and renamed over `path`, then the directory is fsynced. On any
// failure (a full disk is ResourceExhausted) the temporary file is removed and `path` is left as
// it was. More than INT32_MAX tokens do not fit the header's count and are InvalidArgument.
Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens,
                       FileSystem& fs = FileSystem::Posix());

}  // namespace hoist::runtime
