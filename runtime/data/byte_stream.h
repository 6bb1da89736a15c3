// A file read front to back as a stream of its content, decompressed on the way when it is gzip
// (zlib; several members one after another, as `cat a.gz b.gz` makes, read as one) or zstd
// (libzstd; any number of frames), found by the file's first bytes whatever its name. Memory: one
// chunk of compressed input (1 MiB) and the decompressor's window.
//
// A compressed file that is damaged or ends inside a member or frame is DataLoss naming the file
// (a truncated download reads as such, not as a shorter dataset). Not thread-safe: one reader,
// one thread; every Read blocks on the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/file_system.h"
#include "core/status.h"

namespace hoist::runtime {

enum class Compression { kNone, kGzip, kZstd };

// "none", "gzip", "zstd".
const char* CompressionName(Compression compression);

class ByteStream {
 public:
  // Reads the first bytes of `file` to tell its compression; `path` names it in errors.
  static StatusOr<std::unique_ptr<ByteStream>> Open(std::unique_ptr<RandomAccessFile> file,
                                                    std::string path);
  virtual ~ByteStream() = default;

  // Up to `n` bytes of the content into `out`; 0 only at the end.
  virtual StatusOr<int64_t> Read(char* out, int64_t n) = 0;

  Compression compression() const { return compression_; }
  // Bytes of the file read so far (of the compressed data, for a compressed file).
  int64_t file_bytes_read() const { return file_offset_; }
  int64_t file_bytes() const { return file_->size_bytes(); }
  const std::string& path() const { return path_; }

 protected:
  ByteStream(std::unique_ptr<RandomAccessFile> file, std::string path, Compression compression)
      : file_(std::move(file)), path_(std::move(path)), compression_(compression) {}

  std::unique_ptr<RandomAccessFile> file_;
  std::string path_;
  Compression compression_;
  int64_t file_offset_ = 0;
};

}  // namespace hoist::runtime
