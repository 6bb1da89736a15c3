#include "runtime/token_shard.h"

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

// llm.c's Llama-3 shards carry this magic and uint32 tokens; named so the error can say so.
constexpr int32_t kLlama3ShardMagic = 20240801;

}  // namespace

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::move(other.file_)),
      count_(std::exchange(other.count_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    path_ = std::move(other.path_);
    file_ = std::move(other.file_);
    count_ = std::exchange(other.count_, 0);
  }
  return *this;
}

Status TokenShard::Read(int64_t first, int64_t count, uint16_t* out) const {
  HOIST_CHECK(first >= 0 && count >= 0 && first + count <= count_)
      << path_ << ": tokens [" << first << ", " << first + count << ") of " << count_;
  const int64_t bytes = count * int64_t{sizeof(uint16_t)};
  HOIST_ASSIGN_OR_RETURN(
      const int64_t got,
      file_->Read(kTokenShardHeaderBytes + first * int64_t{sizeof(uint16_t)}, out, bytes));
  if (got == bytes) return Status::Ok();
  const int64_t expected = kTokenShardHeaderBytes + count_ * int64_t{sizeof(uint16_t)};
  std::error_code error;
  const auto now = std::filesystem::file_size(path_, error);
  return DataLossError(
      "token shard '" + path_ + "' should be " + std::to_string(expected) + " bytes (" +
      std::to_string(count_) + " tokens) but is " +
      (error ? std::string("no longer readable") : std::to_string(now) + " bytes") +
      ": it was truncated while training; put the whole file back and resume "
      "from the last checkpoint");
}

StatusOr<std::vector<uint16_t>> TokenShard::ReadAll() const {
  std::vector<uint16_t> tokens(static_cast<size_t>(count_));
  HOIST_RETURN_IF_ERROR(Read(0, count_, tokens.data()));
  return tokens;
}

Status TokenShard::CheckTokensBelow(int vocab_size) const {
  HOIST_CHECK_GT(vocab_size, 0);
  // Read in blocks; the maximum over a block vectorises, and only a block that fails is
  // searched token by token.
  constexpr int64_t kBlock = int64_t{1} << 19;
  std::vector<uint16_t> block(static_cast<size_t>(std::min(count_, kBlock)));
  for (int64_t begin = 0; begin < count_; begin += kBlock) {
    const int64_t n = std::min(count_ - begin, kBlock);
    HOIST_RETURN_IF_ERROR(Read(begin, n, block.data()));
    uint16_t block_max = 0;
    for (int64_t i = 0; i < n; ++i) block_max = std::max(block_max, block[i]);
    if (block_max < vocab_size) continue;
    for (int64_t i = 0; i < n; ++i) {
      if (block[i] >= vocab_size) {
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
  if (magic == kLlama3ShardMagic) {
    return DataLossError("token shard '" + path +
                         "' has magic 20240801, a Llama-3 shard of uint32 tokens; hoist reads "
                         "GPT-2 style uint16 shards (magic " +
                         std::to_string(kTokenShardMagic) + ")");
  }
  if (magic != kTokenShardMagic) {
    return DataLossError("token shard '" + path + "' has magic " + std::to_string(magic) +
                         ", expected " + std::to_string(kTokenShardMagic) +
                         "; it is not an llm.c token shard");
  }
  if (version != kTokenShardVersion) {
    return DataLossError("token shard '" + path + "' has version " + std::to_string(version) +
                         ", expected " + std::to_string(kTokenShardVersion));
  }
  if (count < 0) {
    return DataLossError("token shard '" + path + "' has a negative token count (" +
                         std::to_string(count) + ") in its header");
  }
  const int64_t expected_bytes = kTokenShardHeaderBytes + 2 * count;
  if (actual_bytes != expected_bytes) {
    return DataLossError(
        "token shard '" + path + "' should be " + std::to_string(expected_bytes) + " bytes (" +
        std::to_string(kTokenShardHeaderBytes) + "-byte header + " + std::to_string(count) +
        " tokens x 2 bytes) but is " + std::to_string(actual_bytes) + " bytes; it is " +
        (actual_bytes < expected_bytes ? "truncated" : "over-long") + ", write it again");
  }
  shard.count_ = count;
  return shard;
}

Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens, FileSystem& fs) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError("token shard '" + path + "': " + std::to_string(tokens.size()) +
                                " tokens do not fit the header's int32 count; split them into "
                                "several shards");
  }
  int32_t header[kTokenShardHeaderInts] = {};
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  const std::string_view pieces[] = {
      {reinterpret_cast<const char*>(header), sizeof(header)},
      {reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes()}};
  return WriteFileAtomically(fs, path, pieces).WithContext("writing token shard '" + path + "'");
}

}  // namespace hoist::runtime
