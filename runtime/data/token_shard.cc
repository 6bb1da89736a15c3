#include "runtime/data/token_shard.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include "core/check.h"

namespace hoist::runtime {
namespace {

// The format is little-endian on disk and is read without byte swapping.
static_assert(std::endian::native == std::endian::little, "token shards are read as they are");

std::string ShardBytesText(int64_t count, int token_bytes) {
  return std::to_string(kTokenShardHeaderBytes) + "-byte header + " + std::to_string(count) +
         " tokens x " + std::to_string(token_bytes) + " bytes";
}

}  // namespace

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::move(other.file_)),
      count_(std::exchange(other.count_, 0)),
      token_bytes_(other.token_bytes_) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    path_ = std::move(other.path_);
    file_ = std::move(other.file_);
    count_ = std::exchange(other.count_, 0);
    token_bytes_ = other.token_bytes_;
  }
  return *this;
}

Status TokenShard::Read(int64_t first, int64_t count, uint32_t* out) const {
  HOIST_CHECK(first >= 0 && count >= 0 && first + count <= count_)
      << path_ << ": tokens [" << first << ", " << first + count << ") of " << count_;
  const int64_t offset = kTokenShardHeaderBytes + first * token_bytes_;
  int64_t got = 0;
  if (token_bytes_ == 4) {
    HOIST_ASSIGN_OR_RETURN(got, file_->Read(offset, out, count * 4));
  } else {
    // Narrow tokens are read in blocks through a bounce buffer and widened.
    constexpr int64_t kBlock = int64_t{1} << 15;
    uint16_t narrow[kBlock];
    for (int64_t done = 0; done < count;) {
      const int64_t n = std::min(kBlock, count - done);
      HOIST_ASSIGN_OR_RETURN(const int64_t block, file_->Read(offset + done * 2, narrow, n * 2));
      got += block;
      if (block != n * 2) break;
      for (int64_t i = 0; i < n; ++i) out[done + i] = narrow[i];
      done += n;
    }
  }
  if (got == count * token_bytes_) return Status::Ok();
  const int64_t expected = kTokenShardHeaderBytes + count_ * token_bytes_;
  std::error_code error;
  const auto now = std::filesystem::file_size(path_, error);
  return DataLossError(
      "token shard '" + path_ + "' should be " + std::to_string(expected) + " bytes (" +
      std::to_string(count_) + " tokens) but is " +
      (error ? std::string("no longer readable") : std::to_string(now) + " bytes") +
      ": it was truncated while training; put the whole file back and resume "
      "from the last checkpoint");
}

StatusOr<std::vector<uint32_t>> TokenShard::ReadAll() const {
  std::vector<uint32_t> tokens(static_cast<size_t>(count_));
  HOIST_RETURN_IF_ERROR(Read(0, count_, tokens.data()));
  return tokens;
}

Status TokenShard::CheckTokensBelow(int vocab_size) const {
  HOIST_CHECK_GT(vocab_size, 0);
  // Read in blocks; the maximum over a block vectorises, and only a block that fails is
  // searched token by token.
  constexpr int64_t kBlock = int64_t{1} << 19;
  std::vector<uint32_t> block(static_cast<size_t>(std::min(count_, kBlock)));
  for (int64_t begin = 0; begin < count_; begin += kBlock) {
    const int64_t n = std::min(count_ - begin, kBlock);
    HOIST_RETURN_IF_ERROR(Read(begin, n, block.data()));
    uint32_t block_max = 0;
    for (int64_t i = 0; i < n; ++i) block_max = std::max(block_max, block[i]);
    if (block_max < static_cast<uint32_t>(vocab_size)) continue;
    for (int64_t i = 0; i < n; ++i) {
      if (block[i] >= static_cast<uint32_t>(vocab_size)) {
        return InvalidArgumentError("token shard '" + path_ + "': token at index " +
                                    std::to_string(begin + i) + " is " + std::to_string(block[i]) +
                                    ", not below the model's vocab_size " +
                                    std::to_string(vocab_size) +
                                    "; tokenize the data for this model's vocabulary or raise "
                                    "model.vocab_size");
      }
    }
  }
  return Status::Ok();
}

StatusOr<TokenShard> ReadTokenShard(const std::string& path, FileSystem& fs) {
  TokenShard shard;
  shard.path_ = path;
  HOIST_ASSIGN_OR_RETURN(shard.file_, fs.NewRandomAccessFile(path));
  const int64_t actual_bytes = shard.file_->size_bytes();
  if (actual_bytes < kTokenShardHeaderBytes) {
    return DataLossError("token shard '" + path + "' is " + std::to_string(actual_bytes) +
                         " bytes, shorter than the " + std::to_string(kTokenShardHeaderBytes) +
                         "-byte header; the file is truncated or not a token shard");
  }

  int32_t header[kTokenShardHeaderInts];
  HOIST_ASSIGN_OR_RETURN(const int64_t got, shard.file_->Read(0, header, sizeof(header)));
  if (got != int64_t{sizeof(header)}) {
    return DataLossError("token shard '" + path + "' ended inside its header while being read");
  }
  const int32_t magic = header[0];
  const int32_t version = header[1];
  const int64_t count = header[2];
  if (magic == kTokenShardMagic) {
    shard.token_bytes_ = 2;
    if (version != kTokenShardVersion) {
      return DataLossError("token shard '" + path + "' has version " + std::to_string(version) +
                           ", expected " + std::to_string(kTokenShardVersion) + " with magic " +
                           std::to_string(kTokenShardMagic));
    }
  } else if (magic == kTokenShardMagic32) {
    shard.token_bytes_ = 4;
    if (version != kTokenShardVersion32) {
      return DataLossError("token shard '" + path + "' has version " + std::to_string(version) +
                           ", expected " + std::to_string(kTokenShardVersion32) + " with magic " +
                           std::to_string(kTokenShardMagic32));
    }
  } else {
    return DataLossError("token shard '" + path + "' has magic " + std::to_string(magic) +
                         ", expected " + std::to_string(kTokenShardMagic) + " (uint16 tokens) or " +
                         std::to_string(kTokenShardMagic32) +
                         " (uint32 tokens); it is not an llm.c token shard");
  }
  if (count < 0) {
    return DataLossError("token shard '" + path + "' has a negative token count (" +
                         std::to_string(count) + ") in its header");
  }
  const int64_t expected_bytes = kTokenShardHeaderBytes + shard.token_bytes_ * count;
  if (actual_bytes != expected_bytes) {
    return DataLossError("token shard '" + path + "' should be " + std::to_string(expected_bytes) +
                         " bytes (" + ShardBytesText(count, shard.token_bytes_) + ") but is " +
                         std::to_string(actual_bytes) + " bytes; it is " +
                         (actual_bytes < expected_bytes ? "truncated" : "over-long") +
                         ", write it again");
  }
  shard.count_ = count;
  return shard;
}

namespace {

template <typename Token>
Status WriteShard(const std::string& path, std::span<const Token> tokens, FileSystem& fs) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError("token shard '" + path + "': " + std::to_string(tokens.size()) +
                                " tokens do not fit the header's int32 count; split them into "
                                "several shards");
  }
  int32_t header[kTokenShardHeaderInts] = {};
  header[0] = sizeof(Token) == 2 ? kTokenShardMagic : kTokenShardMagic32;
  header[1] = sizeof(Token) == 2 ? kTokenShardVersion : kTokenShardVersion32;
  header[2] = static_cast<int32_t>(tokens.size());
  const std::string_view pieces[] = {
      {reinterpret_cast<const char*>(header), sizeof(header)},
      {reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes()}};
  return WriteFileAtomically(fs, path, pieces).WithContext("writing token shard '" + path + "'");
}

}  // namespace

Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens, FileSystem& fs) {
  return WriteShard(path, tokens, fs);
}

Status WriteTokenShard(const std::string& path, std::span<const uint32_t> tokens, FileSystem& fs) {
  return WriteShard(path, tokens, fs);
}

StatusOr<TokenShardWriter> TokenShardWriter::Create(const std::string& path, int token_bytes,
                                                    FileSystem& fs) {
  HOIST_CHECK(token_bytes == 2 || token_bytes == 4) << token_bytes;
  TokenShardWriter writer;
  writer.fs_ = &fs;
  writer.path_ = path;
  writer.temp_path_ = UniqueTempPath(path);
  writer.token_bytes_ = token_bytes;
  StatusOr<std::unique_ptr<WritableFile>> file = fs.NewWritableFile(writer.temp_path_);
  if (!file.ok()) return file.status().WithContext("writing token shard '" + path + "'");
  writer.file_ = std::move(file).value();
  const int32_t header[kTokenShardHeaderInts] = {};
  HOIST_RETURN_IF_ERROR(writer.Fail(writer.file_->Append(header, sizeof(header))));
  return writer;
}

TokenShardWriter::~TokenShardWriter() {
  if (file_ == nullptr) return;
  (void)file_->Close();
  file_.reset();
  (void)fs_->Remove(temp_path_);
}

Status TokenShardWriter::Fail(Status status) {
  if (status.ok()) return status;
  if (file_ != nullptr) {
    (void)file_->Close();
    file_.reset();
    (void)fs_->Remove(temp_path_);
  }
  return status.WithContext("writing token shard '" + path_ + "'");
}

Status TokenShardWriter::Append(std::span<const uint32_t> tokens) {
  HOIST_CHECK(file_ != nullptr) << "TokenShardWriter used after Finish or a failure: " << path_;
  if (count_ + static_cast<int64_t>(tokens.size()) > INT32_MAX) {
    return Fail(InvalidArgumentError(
        "more than " + std::to_string(INT32_MAX) +
        " tokens do not fit the header's int32 count; split the input into several files"));
  }
  count_ += static_cast<int64_t>(tokens.size());
  if (token_bytes_ == 4) {
    return Fail(file_->Append(tokens.data(), static_cast<int64_t>(tokens.size_bytes())));
  }
  staging_.resize(tokens.size() * 2);
  for (size_t i = 0; i < tokens.size(); ++i) {
    HOIST_CHECK_LE(tokens[i], 0xFFFFu) << "token does not fit a uint16 shard: " << path_;
    const uint16_t token = static_cast<uint16_t>(tokens[i]);
    std::memcpy(staging_.data() + 2 * i, &token, 2);
  }
  return Fail(file_->Append(staging_.data(), static_cast<int64_t>(staging_.size())));
}

Status TokenShardWriter::Finish() {
  HOIST_CHECK(file_ != nullptr) << "TokenShardWriter finished twice: " << path_;
  int32_t header[kTokenShardHeaderInts] = {};
  header[0] = token_bytes_ == 2 ? kTokenShardMagic : kTokenShardMagic32;
  header[1] = token_bytes_ == 2 ? kTokenShardVersion : kTokenShardVersion32;
  header[2] = static_cast<int32_t>(count_);
  HOIST_RETURN_IF_ERROR(Fail(file_->WriteAt(0, header, sizeof(header))));
  HOIST_RETURN_IF_ERROR(Fail(file_->Sync()));
  HOIST_RETURN_IF_ERROR(Fail(file_->Close()));
  file_.reset();
  Status renamed = fs_->Rename(temp_path_, path_);
  if (!renamed.ok()) {
    (void)fs_->Remove(temp_path_);
    return renamed.WithContext("writing token shard '" + path_ + "'");
  }
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  return fs_->SyncDir(dir.empty() ? std::string(".") : dir);
}

}  // namespace hoist::runtime
