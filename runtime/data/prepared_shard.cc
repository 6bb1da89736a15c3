#include "runtime/data/prepared_shard.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/check.h"

namespace hoist::runtime {

namespace {

// Bytes a writer stages per section before writing, and a reader reads at a time.
constexpr int64_t kChunkBytes = int64_t{1} << 20;
constexpr int64_t kHeaderHashAt = 120;

using HeaderBytes = std::array<unsigned char, kPreparedShardHeaderBytes>;

void Put32(HeaderBytes& h, int at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    h[static_cast<size_t>(at + i)] = static_cast<unsigned char>(v >> (8 * i));
}
void Put64(HeaderBytes& h, int at, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    h[static_cast<size_t>(at + i)] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t Get32(const HeaderBytes& h, int at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | h[static_cast<size_t>(at + i)];
  return v;
}
uint64_t Get64(const HeaderBytes& h, int at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | h[static_cast<size_t>(at + i)];
  return v;
}

HeaderBytes EncodeHeader(const PreparedShardHeader& header) {
  HeaderBytes h{};
  std::memcpy(h.data(), kPreparedShardMagic, sizeof(kPreparedShardMagic));
  Put32(h, 8, header.version);
  Put32(h, 12, static_cast<uint32_t>(header.token_bytes));
  Put64(h, 16, static_cast<uint64_t>(header.tokens));
  Put64(h, 24, static_cast<uint64_t>(header.documents));
  Put64(h, 32, static_cast<uint64_t>(header.trainable));
  Put32(h, 40, header.max_token);
  Put64(h, 48, header.tokens_hash);
  Put64(h, 56, header.mask_hash);
  Put64(h, 64, header.documents_hash);
  Put64(h, kHeaderHashAt, XXH64(h.data(), kHeaderHashAt, 0));
  return h;
}

std::string Quoted(const std::string& path) { return "prepared shard '" + path + "'"; }

struct Xxh64Deleter {
  void operator()(XXH64_state_t* state) const { XXH64_freeState(state); }
};
using Xxh64 = std::unique_ptr<XXH64_state_t, Xxh64Deleter>;

Xxh64 NewHash() {
  Xxh64 state(XXH64_createState());
  HOIST_CHECK(state != nullptr) << "out of memory for a hash state";
  XXH64_reset(state.get(), 0);
  return state;
}

}  // namespace

// ---- Reading ----

StatusOr<PreparedShard> PreparedShard::Open(const std::string& path, FileSystem& fs) {
  PreparedShard shard;
  shard.path_ = path;
  HOIST_ASSIGN_OR_RETURN(shard.file_, fs.NewRandomAccessFile(path));
  const int64_t size = shard.file_->size_bytes();
  if (size < kPreparedShardHeaderBytes) {
    return DataLossError(Quoted(path) + " is " + std::to_string(size) +
                         " bytes, shorter than its 128-byte header: it is truncated or not a "
                         "prepared shard; prepare it again with `hoist data prepare`");
  }
  HeaderBytes h{};
  HOIST_ASSIGN_OR_RETURN(const int64_t got,
                         shard.file_->Read(0, h.data(), kPreparedShardHeaderBytes));
  if (got != kPreparedShardHeaderBytes) {
    return DataLossError(Quoted(path) + ": its header could not be read whole (" +
                         std::to_string(got) + " of 128 bytes)");
  }
  if (std::memcmp(h.data(), kPreparedShardMagic, sizeof(kPreparedShardMagic)) != 0) {
    std::string found;
    for (int i = 0; i < 8; ++i) {
      const unsigned char c = h[static_cast<size_t>(i)];
      found += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    }
    return DataLossError("'" + path + "' is not a prepared shard: it starts with \"" + found +
                         "\", not \"HOISTPRP\" (a token shard goes in data.train as a token "
                         "source; a dataset is prepared with `hoist data prepare`)");
  }
  PreparedShardHeader& header = shard.header_;
  header.version = Get32(h, 8);
  if (header.version != kPreparedShardVersion) {
    return DataLossError(Quoted(path) + " has format version " + std::to_string(header.version) +
                         "; this build reads version " + std::to_string(kPreparedShardVersion) +
                         ": prepare the dataset again with this hoist");
  }
  if (Get64(h, kHeaderHashAt) != XXH64(h.data(), kHeaderHashAt, 0)) {
    return DataLossError(Quoted(path) +
                         ": its header is damaged (checksum mismatch); prepare it again");
  }
  const uint32_t token_bytes = Get32(h, 12);
  header.tokens = static_cast<int64_t>(Get64(h, 16));
  header.documents = static_cast<int64_t>(Get64(h, 24));
  header.trainable = static_cast<int64_t>(Get64(h, 32));
  header.max_token = Get32(h, 40);
  header.tokens_hash = Get64(h, 48);
  header.mask_hash = Get64(h, 56);
  header.documents_hash = Get64(h, 64);
  if ((token_bytes != 2 && token_bytes != 4) || header.tokens < 0 || header.documents < 0 ||
      header.tokens > size || header.documents > size / 8 || header.trainable < 0 ||
      header.trainable > header.tokens) {
    return DataLossError(Quoted(path) + ": its header does not hold together (token bytes " +
                         std::to_string(token_bytes) + ", " + std::to_string(header.tokens) +
                         " tokens, " + std::to_string(header.documents) + " documents, " +
                         std::to_string(header.trainable) + " trainable)");
  }
  header.token_bytes = static_cast<int>(token_bytes);
  if (header.file_bytes() != size) {
    return DataLossError(Quoted(path) + " is " + std::to_string(size) + " bytes but its header (" +
                         std::to_string(header.tokens) + " tokens, " +
                         std::to_string(header.documents) + " documents) says " +
                         std::to_string(header.file_bytes()) +
                         ": it was truncated or written over; prepare it again");
  }
  return shard;
}

Status PreparedShard::ReadBytes(int64_t offset, int64_t bytes, void* out) const {
  HOIST_ASSIGN_OR_RETURN(const int64_t got, file_->Read(offset, out, bytes));
  if (got == bytes) return Status::Ok();
  std::error_code error;
  const auto now = std::filesystem::file_size(path_, error);
  return DataLossError(
      Quoted(path_) + " should be " + std::to_string(header_.file_bytes()) + " bytes but is " +
      (error ? std::string("no longer readable") : std::to_string(now) + " bytes") +
      ": it was truncated while in use; put the whole file back and resume "
      "from the last checkpoint");
}

Status PreparedShard::ReadTokens(int64_t first, int64_t count, uint32_t* out) const {
  HOIST_CHECK(first >= 0 && count >= 0 && first + count <= header_.tokens)
      << path_ << ": tokens [" << first << ", " << first + count << ") of " << header_.tokens;
  const int64_t offset = header_.tokens_offset() + first * header_.token_bytes;
  if (header_.token_bytes == 4) return ReadBytes(offset, count * 4, out);
  // Narrow ids read in blocks through a bounce buffer and widened.
  constexpr int64_t kBlock = int64_t{1} << 14;
  uint16_t narrow[kBlock];
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kBlock, count - done);
    HOIST_RETURN_IF_ERROR(ReadBytes(offset + done * 2, n * 2, narrow));
    for (int64_t i = 0; i < n; ++i) out[done + i] = narrow[i];
    done += n;
  }
  return Status::Ok();
}

Status PreparedShard::ReadMask(int64_t first, int64_t count, uint8_t* out) const {
  HOIST_CHECK(first >= 0 && count >= 0 && first + count <= header_.tokens)
      << path_ << ": mask [" << first << ", " << first + count << ") of " << header_.tokens;
  return ReadBytes(header_.mask_offset() + first, count, out);
}

Status PreparedShard::ReadDocuments(int64_t first, int64_t count, int64_t* out) const {
  HOIST_CHECK(first >= 0 && count >= 0 && first + count <= header_.documents)
      << path_ << ": documents [" << first << ", " << first + count << ") of " << header_.documents;
  // Stored little-endian, as this build's hosts keep them.
  return ReadBytes(header_.documents_offset() + first * 8, count * 8, out);
}

static_assert(std::endian::native == std::endian::little,
              "prepared shards are read and written as little-endian in place");

Status PreparedShard::Verify(int64_t vocab_size) const {
  std::vector<unsigned char> chunk(static_cast<size_t>(kChunkBytes));
  // Each section read in chunks, hashed as stored, and its contents checked.
  auto section = [&](int64_t offset, int64_t bytes, int64_t unit, const char* name,
                     uint64_t expected, const auto& check) -> Status {
    // Damage is named as such before what it broke: the contents' first error is kept and
    // returned only where the hash holds.
    Xxh64 hash = NewHash();
    Status contents = Status::Ok();
    const int64_t step = kChunkBytes / unit * unit;
    for (int64_t done = 0; done < bytes;) {
      const int64_t n = std::min(step, bytes - done);
      HOIST_RETURN_IF_ERROR(ReadBytes(offset + done, n, chunk.data()));
      XXH64_update(hash.get(), chunk.data(), static_cast<size_t>(n));
      if (contents.ok()) contents = check(done / unit, n / unit);
      done += n;
    }
    if (XXH64_digest(hash.get()) != expected) {
      return DataLossError(Quoted(path_) + ": its " + name +
                           " are damaged (checksum mismatch); prepare it again");
    }
    return contents;
  };
  uint32_t largest = 0;
  HOIST_RETURN_IF_ERROR(
      section(header_.tokens_offset(), header_.tokens * header_.token_bytes, header_.token_bytes,
              "tokens", header_.tokens_hash, [&](int64_t first, int64_t n) -> Status {
                for (int64_t i = 0; i < n; ++i) {
                  uint32_t id = 0;
                  if (header_.token_bytes == 2) {
                    uint16_t narrow = 0;
                    std::memcpy(&narrow, chunk.data() + 2 * i, 2);
                    id = narrow;
                  } else {
                    std::memcpy(&id, chunk.data() + 4 * i, 4);
                  }
                  largest = std::max(largest, id);
                  if (vocab_size > 0 && id >= vocab_size) {
                    return InvalidArgumentError(
                        Quoted(path_) + ": token " + std::to_string(first + i) + " is " +
                        std::to_string(id) + ", not below the model's vocab_size " +
                        std::to_string(vocab_size) + ": it was prepared with another tokenizer");
                  }
                }
                return Status::Ok();
              }));
  int64_t trainable = 0;
  HOIST_RETURN_IF_ERROR(section(header_.mask_offset(), header_.tokens, 1, "loss mask bytes",
                                header_.mask_hash, [&](int64_t first, int64_t n) -> Status {
                                  for (int64_t i = 0; i < n; ++i) {
                                    const unsigned char bit = chunk[static_cast<size_t>(i)];
                                    if (bit > 1) {
                                      return DataLossError(Quoted(path_) +
                                                           ": the loss mask of token " +
                                                           std::to_string(first + i) + " is " +
                                                           std::to_string(bit) + ", not 0 or 1");
                                    }
                                    trainable += bit;
                                  }
                                  return Status::Ok();
                                }));
  int64_t previous = -1;
  HOIST_RETURN_IF_ERROR(section(
      header_.documents_offset(), header_.documents * 8, 8, "document offsets",
      header_.documents_hash, [&](int64_t first, int64_t n) -> Status {
        for (int64_t i = 0; i < n; ++i) {
          int64_t at = 0;
          std::memcpy(&at, chunk.data() + 8 * i, 8);
          const bool ok = (first + i == 0) ? at == 0 : (at > previous && at < header_.tokens);
          if (!ok) {
            return DataLossError(Quoted(path_) + ": document " + std::to_string(first + i) +
                                 " starts at token " + std::to_string(at) +
                                 ", out of order (documents start at 0 and increase below " +
                                 std::to_string(header_.tokens) + ")");
          }
          previous = at;
        }
        return Status::Ok();
      }));
  if ((header_.tokens > 0) != (header_.documents > 0)) {
    return DataLossError(Quoted(path_) + ": " + std::to_string(header_.tokens) + " tokens in " +
                         std::to_string(header_.documents) + " documents");
  }
  if (trainable != header_.trainable || largest != header_.max_token) {
    return DataLossError(Quoted(path_) + ": its header counts " +
                         std::to_string(header_.trainable) + " trainable tokens (largest " +
                         std::to_string(header_.max_token) + ") where the file holds " +
                         std::to_string(trainable) + " (largest " + std::to_string(largest) + ")");
  }
  return Status::Ok();
}

// ---- Writing ----

// One section on its way to disk: its temporary file, the bytes staged for it, its hash.
struct PreparedShardWriter::Section {
  std::string temp_path;
  std::unique_ptr<WritableFile> file;
  std::vector<char> staging;
  Xxh64 hash = NewHash();

  Status Add(const void* data, int64_t bytes) {
    XXH64_update(hash.get(), data, static_cast<size_t>(bytes));
    const char* from = static_cast<const char*>(data);
    staging.insert(staging.end(), from, from + bytes);
    if (static_cast<int64_t>(staging.size()) < kChunkBytes) return Status::Ok();
    return Flush();
  }
  Status Flush() {
    if (staging.empty()) return Status::Ok();
    const Status written = file->Append(staging.data(), static_cast<int64_t>(staging.size()));
    staging.clear();
    return written;
  }
};

PreparedShardWriter::PreparedShardWriter() = default;
PreparedShardWriter::PreparedShardWriter(PreparedShardWriter&&) noexcept = default;
PreparedShardWriter& PreparedShardWriter::operator=(PreparedShardWriter&&) noexcept = default;

PreparedShardWriter::~PreparedShardWriter() {
  if (open_) RemoveTemporaries();
}

void PreparedShardWriter::RemoveTemporaries() {
  for (std::unique_ptr<Section>* section : {&tokens_, &mask_, &documents_}) {
    if (*section == nullptr) continue;
    if ((*section)->file != nullptr) (void)(*section)->file->Close();
    (*section)->file.reset();
    (void)fs_->Remove((*section)->temp_path);
  }
  open_ = false;
}

Status PreparedShardWriter::Fail(Status status) {
  if (status.ok()) return status;
  if (open_) RemoveTemporaries();
  return status.WithContext("writing " + Quoted(path_));
}

StatusOr<PreparedShardWriter> PreparedShardWriter::Create(const std::string& path, int token_bytes,
                                                          FileSystem& fs) {
  HOIST_CHECK(token_bytes == 2 || token_bytes == 4) << token_bytes;
  PreparedShardWriter writer;
  writer.fs_ = &fs;
  writer.path_ = path;
  writer.header_.token_bytes = token_bytes;
  writer.open_ = true;
  for (std::unique_ptr<Section>* section : {&writer.tokens_, &writer.mask_, &writer.documents_}) {
    *section = std::make_unique<Section>();
    (*section)->temp_path = UniqueTempPath(path);
    StatusOr<std::unique_ptr<WritableFile>> file = fs.NewWritableFile((*section)->temp_path);
    if (!file.ok()) return writer.Fail(file.status());
    (*section)->file = std::move(file).value();
  }
  // The header's place, written at Finish.
  const HeaderBytes placeholder{};
  HOIST_RETURN_IF_ERROR(
      writer.Fail(writer.tokens_->file->Append(placeholder.data(), kPreparedShardHeaderBytes)));
  return writer;
}

Status PreparedShardWriter::Append(std::span<const uint32_t> tokens,
                                   std::span<const uint8_t> mask) {
  HOIST_CHECK(open_) << "PreparedShardWriter used after Finish or a failure: " << path_;
  const std::string document = "document " + std::to_string(header_.documents);
  if (tokens.empty()) {
    return Fail(InvalidArgumentError(document + " has no tokens"));
  }
  if (mask.size() != tokens.size()) {
    return Fail(InvalidArgumentError(document + " has " + std::to_string(tokens.size()) +
                                     " tokens but " + std::to_string(mask.size()) + " mask bytes"));
  }
  int64_t trainable = 0;
  for (uint8_t bit : mask) {
    if (bit > 1) {
      return Fail(InvalidArgumentError(document + " has a mask byte of " + std::to_string(bit) +
                                       ", not 0 or 1"));
    }
    trainable += bit;
  }
  uint32_t largest = 0;
  for (uint32_t id : tokens) largest = std::max(largest, id);
  if (header_.token_bytes == 2 && largest > 0xFFFFu) {
    return Fail(InvalidArgumentError(document + " has token " + std::to_string(largest) +
                                     ", which does not fit a 2-byte shard"));
  }
  const int64_t start = header_.tokens;
  HOIST_RETURN_IF_ERROR(Fail(documents_->Add(&start, 8)));
  if (header_.token_bytes == 4) {
    HOIST_RETURN_IF_ERROR(
        Fail(tokens_->Add(tokens.data(), static_cast<int64_t>(tokens.size_bytes()))));
  } else {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    HOIST_RETURN_IF_ERROR(
        Fail(tokens_->Add(narrow.data(), static_cast<int64_t>(narrow.size() * 2))));
  }
  HOIST_RETURN_IF_ERROR(Fail(mask_->Add(mask.data(), static_cast<int64_t>(mask.size()))));
  header_.tokens += static_cast<int64_t>(tokens.size());
  header_.documents += 1;
  header_.trainable += trainable;
  header_.max_token = std::max(header_.max_token, largest);
  return Status::Ok();
}

Status PreparedShardWriter::Finish() {
  HOIST_CHECK(open_) << "PreparedShardWriter finished twice or after a failure: " << path_;
  for (Section* section : {tokens_.get(), mask_.get(), documents_.get()}) {
    HOIST_RETURN_IF_ERROR(Fail(section->Flush()));
  }
  // The mask and the offsets joined after the tokens, a chunk at a time.
  std::vector<char> chunk(static_cast<size_t>(kChunkBytes));
  for (Section* side : {mask_.get(), documents_.get()}) {
    HOIST_RETURN_IF_ERROR(Fail(side->file->Close()));
    side->file.reset();
    StatusOr<std::unique_ptr<RandomAccessFile>> opened = fs_->NewRandomAccessFile(side->temp_path);
    if (!opened.ok()) return Fail(opened.status());
    const std::unique_ptr<RandomAccessFile>& in = *opened;
    for (int64_t done = 0; done < in->size_bytes();) {
      const int64_t n = std::min(kChunkBytes, in->size_bytes() - done);
      StatusOr<int64_t> got = in->Read(done, chunk.data(), n);
      if (!got.ok()) return Fail(got.status());
      if (*got != n) return Fail(DataLossError("temporary file '" + side->temp_path + "' shrank"));
      HOIST_RETURN_IF_ERROR(Fail(tokens_->file->Append(chunk.data(), n)));
      done += n;
    }
  }
  header_.tokens_hash = XXH64_digest(tokens_->hash.get());
  header_.mask_hash = XXH64_digest(mask_->hash.get());
  header_.documents_hash = XXH64_digest(documents_->hash.get());
  const HeaderBytes header = EncodeHeader(header_);
  HOIST_RETURN_IF_ERROR(Fail(tokens_->file->WriteAt(0, header.data(), kPreparedShardHeaderBytes)));
  HOIST_RETURN_IF_ERROR(Fail(tokens_->file->Sync()));
  HOIST_RETURN_IF_ERROR(Fail(tokens_->file->Close()));
  tokens_->file.reset();
  HOIST_RETURN_IF_ERROR(Fail(fs_->Rename(tokens_->temp_path, path_)));
  // The tokens' temporary is the shard now; the side files go.
  tokens_->temp_path.clear();
  for (Section* side : {mask_.get(), documents_.get()}) (void)fs_->Remove(side->temp_path);
  open_ = false;
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const Status synced = fs_->SyncDir(dir.empty() ? std::string(".") : dir);
  return synced.ok() ? synced : synced.WithContext("writing " + Quoted(path_));
}

}  // namespace hoist::runtime
