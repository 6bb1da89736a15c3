// Token shards in llm.c's format: a 1024-byte header of 256 little-endian int32 ([0] magic,
// [1] version, [2] token count, the rest zero) followed by exactly `count` tokens. The magic and
// version record the token width, as llm.c's two kinds of shard do:
//   magic 20240520, version 1: uint16 tokens (llm.c's and nanoGPT's GPT-2 shards);
//   magic 20240801, version 7: uint32 tokens (llm.c's Llama 3 shards), for vocabularies that do
//                              not fit 16 bits.
// This is the file that `hoist data tokenize` writes (uint16 whenever every id fits) and the data
// loader reads, byte-compatible with llm.c's.
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

inline constexpr int32_t kTokenShardMagic = 20240520;  // uint16 tokens
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int32_t kTokenShardMagic32 = 20240801;  // uint32 tokens
inline constexpr int32_t kTokenShardVersion32 = 7;
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
  // Bytes per token on disk: 2 or 4, as the header's magic says.
  int token_bytes() const { return token_bytes_; }

  // Copies tokens [first, first + count) into `out`, widened to 32 bits; the range must lie
  // within size(). A file that has become shorter since it was opened (truncated in place) is
  // DataLoss naming it, its size now and the size it should have; an I/O error is IoError naming
  // it.
  Status Read(int64_t first, int64_t count, uint32_t* out) const;
  // Every token (Read's errors).
  StatusOr<std::vector<uint32_t>> ReadAll() const;

  // OK when every token is below `vocab_size`; otherwise an InvalidArgument error naming the file,
  // the first offending token's index and value, and `vocab_size`. Reads the whole shard.
  Status CheckTokensBelow(int vocab_size) const;

 private:
  friend StatusOr<TokenShard> ReadTokenShard(const std::string& path, FileSystem& fs);

  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  int64_t count_ = 0;
  int token_bytes_ = 2;
};

// Opens the shard at `path` after validating its header. A wrong magic or version is DataLoss
// naming the file and the value found; a file whose size is not exactly 1024 + token_bytes *
// count bytes (truncated or over-long) is DataLoss naming the file, the expected and the actual
// size; a missing file is NotFound.
StatusOr<TokenShard> ReadTokenShard(const std::string& path, FileSystem& fs = FileSystem::Posix());

// Writes `tokens` as a shard at `path`, atomically: the bytes go to a temporary file in the same
// directory, which is fsynced and renamed over `path`, then the directory is fsynced. On any
// failure (a full disk is ResourceExhausted) the temporary file is removed and `path` is left as
// it was. More than INT32_MAX tokens do not fit the header's count and are InvalidArgument.
Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens,
                       FileSystem& fs = FileSystem::Posix());
// The same as a uint32 shard (magic 20240801, version 7).
Status WriteTokenShard(const std::string& path, std::span<const uint32_t> tokens,
                       FileSystem& fs = FileSystem::Posix());

// Writes a shard whose tokens arrive in pieces, so that they need not all be in memory: Append
// adds tokens, Finish writes the count into the header and renames the file into place with the
// same atomicity as WriteTokenShard. Until Finish the tokens are in a temporary file next to
// `path`, removed when the writer is destroyed unfinished or a call fails. Movable, not copyable;
// one thread at a time; every call blocks on the file system.
class TokenShardWriter {
 public:
  // `token_bytes` is 2 (uint16 shard) or 4 (uint32 shard).
  static StatusOr<TokenShardWriter> Create(const std::string& path, int token_bytes,
                                           FileSystem& fs = FileSystem::Posix());
  TokenShardWriter(TokenShardWriter&&) noexcept = default;
  TokenShardWriter& operator=(TokenShardWriter&&) noexcept = default;
  ~TokenShardWriter();

  // Tokens must fit token_bytes (checked: a larger one is a bug of the caller). More than
  // INT32_MAX tokens in all is InvalidArgument.
  Status Append(std::span<const uint32_t> tokens);
  Status Finish();
  int64_t count() const { return count_; }

 private:
  TokenShardWriter() = default;
  Status Fail(Status status);

  FileSystem* fs_ = nullptr;
  std::string path_;
  std::string temp_path_;
  std::unique_ptr<WritableFile> file_;
  int token_bytes_ = 2;
  int64_t count_ = 0;
  std::vector<char> staging_;
};

}  // namespace hoist::runtime
