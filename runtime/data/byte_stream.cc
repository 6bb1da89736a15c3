#include "runtime/data/byte_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace hoist::runtime {
namespace {

constexpr int64_t kInputChunkBytes = int64_t{1} << 20;

// The file as it is.
class PlainStream final : public ByteStream {
 public:
  PlainStream(std::unique_ptr<RandomAccessFile> file, std::string path)
      : ByteStream(std::move(file), std::move(path), Compression::kNone) {}

  StatusOr<int64_t> Read(char* out, int64_t n) override {
    HOIST_ASSIGN_OR_RETURN(int64_t got, file_->Read(file_offset_, out, n));
    file_offset_ += got;
    return got;
  }
};

// Compressed input a chunk at a time, for the decompressors below.
class CompressedStream : public ByteStream {
 protected:
  CompressedStream(std::unique_ptr<RandomAccessFile> file, std::string path,
                   Compression compression)
      : ByteStream(std::move(file), std::move(path), compression),
        input_(static_cast<size_t>(kInputChunkBytes)) {}

  // Refills the input when it is used up: false at the file's end.
  StatusOr<bool> Refill() {
    if (input_at_ < input_size_) return true;
    HOIST_ASSIGN_OR_RETURN(int64_t got, file_->Read(file_offset_, input_.data(), kInputChunkBytes));
    file_offset_ += got;
    input_at_ = 0;
    input_size_ = static_cast<size_t>(got);
    return got > 0;
  }

  Status Damaged(const std::string& what) const {
    return DataLossError("'" + path_ + "' is not a whole " + CompressionName(compression_) +
                         " file: " + what + " (near byte " + std::to_string(file_offset_) + " of " +
                         std::to_string(file_bytes()) + "); download or compress it again");
  }

  std::vector<char> input_;
  size_t input_at_ = 0;
  size_t input_size_ = 0;
};

class GzipStream final : public CompressedStream {
 public:
  GzipStream(std::unique_ptr<RandomAccessFile> file, std::string path)
      : CompressedStream(std::move(file), std::move(path), Compression::kGzip) {}
  ~GzipStream() override {
    if (started_) inflateEnd(&z_);
  }

  StatusOr<int64_t> Read(char* out, int64_t n) override {
    if (!started_) {
      std::memset(&z_, 0, sizeof(z_));
      // 15 + 16: a gzip header and trailer around the deflate data.
      if (inflateInit2(&z_, 15 + 16) != Z_OK) return InternalError("zlib: inflateInit2 failed");
      started_ = true;
    }
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(std::min<int64_t>(n, 1 << 30));
    const uInt wanted = z_.avail_out;
    while (z_.avail_out == wanted) {
      // At the file's end the decompressor still runs, without input: it may hold output.
      HOIST_ASSIGN_OR_RETURN(const bool more, Refill());
      if (between_members_) {
        if (!more) return 0;
        // Another member follows the last one.
        inflateReset(&z_);
        between_members_ = false;
      }
      z_.next_in = reinterpret_cast<Bytef*>(input_.data() + input_at_);
      z_.avail_in = static_cast<uInt>(input_size_ - input_at_);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      input_at_ = input_size_ - z_.avail_in;
      if (rc == Z_STREAM_END) {
        between_members_ = true;
      } else if (rc == Z_BUF_ERROR || (rc == Z_OK && !more)) {
        if (!more && z_.avail_out == wanted) return Damaged("it ends inside its compressed data");
      } else if (rc != Z_OK) {
        return Damaged(z_.msg != nullptr ? z_.msg : "zlib error " + std::to_string(rc));
      }
    }
    return static_cast<int64_t>(wanted - z_.avail_out);
  }

 private:
  z_stream z_{};
  bool started_ = false;
  bool between_members_ = false;
};

class ZstdStream final : public CompressedStream {
 public:
  ZstdStream(std::unique_ptr<RandomAccessFile> file, std::string path)
      : CompressedStream(std::move(file), std::move(path), Compression::kZstd),
        context_(ZSTD_createDCtx()) {}
  ~ZstdStream() override { ZSTD_freeDCtx(context_); }

  StatusOr<int64_t> Read(char* out, int64_t n) override {
    if (context_ == nullptr) return ResourceExhaustedError("zstd: no memory for a decompressor");
    ZSTD_outBuffer output{out, static_cast<size_t>(n), 0};
    while (output.pos == 0) {
      // At the file's end the decompressor still runs, without input: it may hold output.
      HOIST_ASSIGN_OR_RETURN(const bool more, Refill());
      if (!more && frame_done_) return 0;
      ZSTD_inBuffer in{input_.data(), input_size_, input_at_};
      const size_t rc = ZSTD_decompressStream(context_, &output, &in);
      input_at_ = in.pos;
      if (ZSTD_isError(rc)) return Damaged(ZSTD_getErrorName(rc));
      // 0: a frame is decoded and flushed; the next bytes, if any, start another.
      frame_done_ = rc == 0;
      if (!more && output.pos == 0 && !frame_done_) return Damaged("it ends inside a frame");
    }
    return static_cast<int64_t>(output.pos);
  }

 private:
  ZSTD_DCtx* context_;
  bool frame_done_ = true;  // an empty file is no frame, and ends cleanly
};

}  // namespace

const char* CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone: return "none";
    case Compression::kGzip: return "gzip";
    case Compression::kZstd: return "zstd";
  }
  return "?";
}

StatusOr<std::unique_ptr<ByteStream>> ByteStream::Open(std::unique_ptr<RandomAccessFile> file,
                                                       std::string path) {
  unsigned char magic[4] = {};
  HOIST_ASSIGN_OR_RETURN(int64_t got, file->Read(0, reinterpret_cast<char*>(magic), 4));
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    return std::unique_ptr<ByteStream>(new GzipStream(std::move(file), std::move(path)));
  }
  if (got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) {
    return std::unique_ptr<ByteStream>(new ZstdStream(std::move(file), std::move(path)));
  }
  return std::unique_ptr<ByteStream>(new PlainStream(std::move(file), std::move(path)));
}

}  // namespace hoist::runtime
