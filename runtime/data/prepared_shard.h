// Prepared shards: the files `hoist data prepare` writes from a fine-tuning dataset (rows
// tokenized, templated and masked once) and training reads, as it reads token shards. A shard
// holds its documents (examples) one after another, with per token whether it counts in the loss
// and where each document starts, so that a loader can pack them into windows and keep one
// document from attending to another.
//
// Format, version 1, little-endian:
//   header   128 bytes: "HOISTPRP", u32 version, u32 token bytes (2 or 4), i64 tokens,
//            i64 documents, i64 trainable tokens (mask 1), u32 largest token, u32 0,
//            u64 XXH64 of each section below as stored (tokens, mask, documents), zeros to byte
//            120, u64 XXH64 of header bytes [0, 120)
//   tokens   `tokens` ids of `token bytes` each
//   mask     one byte per token: 1 where the token is a target of the loss, else 0
//   documents `documents` i64 offsets: where each document's first token is, increasing from 0
// and nothing after: the file is exactly as long as the header says.
//
// PreparedShard keeps its file open and reads with pread (a file truncated while training is an
// error naming it, never SIGBUS). Open checks the header and the size; Verify reads the whole
// file once, in bounded chunks, and checks the sections' hashes and contents. Reading and writing
// go through a FileSystem (core/file_system.h), so tests inject faults. A PreparedShard is
// immutable after Open and may be read from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"

namespace hoist::runtime {

inline constexpr char kPreparedShardMagic[8] = {'H', 'O', 'I', 'S', 'T', 'P', 'R', 'P'};
inline constexpr uint32_t kPreparedShardVersion = 1;
inline constexpr int64_t kPreparedShardHeaderBytes = 128;

// What a prepared shard's header says.
struct PreparedShardHeader {
  uint32_t version = kPreparedShardVersion;
  int token_bytes = 2;
  int64_t tokens = 0;
  int64_t documents = 0;
  int64_t trainable = 0;  // tokens whose mask is 1
  uint32_t max_token = 0;
  uint64_t tokens_hash = 0, mask_hash = 0, documents_hash = 0;

  int64_t tokens_offset() const { return kPreparedShardHeaderBytes; }
  int64_t mask_offset() const { return tokens_offset() + tokens * token_bytes; }
  int64_t documents_offset() const { return mask_offset() + tokens; }
  int64_t file_bytes() const { return documents_offset() + documents * 8; }
};

class PreparedShard {
 public:
  // Opens the shard at `path` after checking its header (magic, version, the header's own hash,
  // the token width) and that the file is exactly as long as the header says. A missing file is
  // NotFound; anything else wrong is DataLoss naming the file and what was found (a version this
  // build does not read names the versions it does).
  static StatusOr<PreparedShard> Open(const std::string& path,
                                      FileSystem& fs = FileSystem::Posix());

  PreparedShard(PreparedShard&&) noexcept = default;
  PreparedShard& operator=(PreparedShard&&) noexcept = default;

  const std::string& path() const { return path_; }
  const PreparedShardHeader& header() const { return header_; }
  int64_t tokens() const { return header_.tokens; }
  int64_t documents() const { return header_.documents; }

  // Reads the whole file in bounded chunks and checks it: each section's hash (DataLoss naming
  // the file and the section), mask bytes of 0 or 1, document offsets increasing from 0 and
  // within the tokens, the trainable count and the largest token as the header says (DataLoss),
  // and every token below `vocab_size` (InvalidArgument naming the file, the token's index and
  // value, and vocab_size; 0 skips that check).
  Status Verify(int64_t vocab_size = 0) const;

  // Tokens [first, first + count), widened to 32 bits; mask bytes of the same tokens; document
  // offsets [first, first + count). The range must lie within the section (checked). A file that
  // has become shorter since Open is DataLoss naming it and both sizes; an I/O error is IoError.
  Status ReadTokens(int64_t first, int64_t count, uint32_t* out) const;
  Status ReadMask(int64_t first, int64_t count, uint8_t* out) const;
  Status ReadDocuments(int64_t first, int64_t count, int64_t* out) const;

 private:
  PreparedShard() = default;
  Status ReadBytes(int64_t offset, int64_t bytes, void* out) const;

  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  PreparedShardHeader header_;
};

// Writes a prepared shard a document at a time, so that it need not be in memory: the tokens go
// to a temporary file beside `path`, the mask and the offsets to two more, and Finish joins them
// under the header and renames the result over `path` (fsynced, then the directory), so that a
// reader sees the old file or the new one. A failed call, or a writer destroyed unfinished,
// removes its temporary files and leaves `path` as it was. Memory: a staging buffer per section.
// Movable, not copyable; one thread at a time; every call blocks on the file system.
class PreparedShardWriter {
 public:
  // `token_bytes`: 2 (ids below 65536) or 4.
  static StatusOr<PreparedShardWriter> Create(const std::string& path, int token_bytes,
                                              FileSystem& fs = FileSystem::Posix());
  PreparedShardWriter(PreparedShardWriter&&) noexcept;
  PreparedShardWriter& operator=(PreparedShardWriter&&) noexcept;
  ~PreparedShardWriter();

  // One document: its tokens and, per token, 1 where it is a target of the loss and 0 where not
  // (the same length). An empty document, a length mismatch, a mask byte other than 0 or 1, or
  // a token wider than token_bytes is InvalidArgument naming the document, and the writer is
  // then failed (its files removed).
  Status Append(std::span<const uint32_t> tokens, std::span<const uint8_t> mask);
  Status Finish();

  const PreparedShardHeader& header() const { return header_; }

 private:
  struct Section;
  PreparedShardWriter();
  Status Fail(Status status);
  void RemoveTemporaries();

  FileSystem* fs_ = nullptr;
  std::string path_;
  std::unique_ptr<Section> tokens_, mask_, documents_;
  PreparedShardHeader header_;
  bool open_ = false;
};

}  // namespace hoist::runtime
