#include "runtime/checkpoint/checkpoint_shard.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "core/check.h"

namespace hoist::runtime {
namespace {

constexpr char kMagic[8] = {'H', 'O', 'I', 'S', 'T', 'C', 'K', 'P'};
constexpr int64_t kHeaderBytes = 32;
constexpr int64_t kDataAlignment = 64;
constexpr uint32_t kMaxNameBytes = 1024;
// Bounds on what an index may claim, so a corrupt count cannot make us allocate gigabytes.
constexpr uint32_t kMaxBlobs = 1u << 16;
constexpr uint32_t kMaxIndexBytes = 64u << 20;

int64_t AlignUp(int64_t value) {
  return (value + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t GetU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

Status Corrupt(const std::string& path, const std::string& what) {
  return DataLossError("checkpoint shard " + path + " " + what +
                       "; the file is damaged: resume from another step directory");
}

}  // namespace

std::string Xxh64Hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

namespace {

// The index for blobs of these names and sizes, data placed in order after it, with these
// checksums; `offsets` receives where each blob starts.
std::string BuildIndex(int64_t step, int rank, const std::vector<std::string>& names,
                       const std::vector<int64_t>& sizes, const std::vector<uint64_t>& hashes,
                       std::vector<int64_t>* offsets) {
  int64_t index_bytes = kHeaderBytes + 8;
  for (const std::string& name : names) index_bytes += 4 + static_cast<int64_t>(name.size()) + 24;
  HOIST_CHECK_LE(index_bytes, int64_t{kMaxIndexBytes});
  std::string index;
  index.reserve(static_cast<size_t>(index_bytes));
  index.append(kMagic, sizeof(kMagic));
  PutU32(&index, kShardFormatVersion);
  PutU32(&index, static_cast<uint32_t>(rank));
  PutU64(&index, static_cast<uint64_t>(step));
  PutU32(&index, static_cast<uint32_t>(names.size()));
  PutU32(&index, static_cast<uint32_t>(index_bytes));
  offsets->clear();
  int64_t end = index_bytes;
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t offset = AlignUp(end);
    offsets->push_back(offset);
    end = offset + sizes[i];
    PutU32(&index, static_cast<uint32_t>(names[i].size()));
    index.append(names[i]);
    PutU64(&index, static_cast<uint64_t>(offset));
    PutU64(&index, static_cast<uint64_t>(sizes[i]));
    PutU64(&index, hashes[i]);
  }
  PutU64(&index, XXH64(index.data(), index.size(), 0));
  HOIST_CHECK_EQ(static_cast<int64_t>(index.size()), index_bytes);
  return index;
}

struct Xxh64StateDeleter {
  void operator()(XXH64_state_t* state) const { XXH64_freeState(state); }
};
using Xxh64State = std::unique_ptr<XXH64_state_t, Xxh64StateDeleter>;

Xxh64State NewXxh64State() {
  Xxh64State state(XXH64_createState());
  HOIST_CHECK(state != nullptr) << "out of memory for a checksum state";
  XXH64_reset(state.get(), 0);
  return state;
}

}  // namespace

Status AbandonStreamed(const StreamedBlobs* streamed, const Status& failure) {
  if (streamed == nullptr || !streamed->produce) return failure;
  (void)streamed->produce([&](int, const void*, int64_t) { return failure; });
  return failure;
}

Status WriteShardFile(FileSystem& fs, const std::string& path, int64_t step, int rank,
                      std::span<const CheckpointBlob> blobs, const StreamedBlobs* streamed) {
  HOIST_CHECK_GE(step, 0);
  HOIST_CHECK_GE(rank, 0);
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  std::vector<uint64_t> hashes;
  for (const CheckpointBlob& blob : blobs) {
    HOIST_CHECK(blob.bytes >= 0 && (blob.data != nullptr || blob.bytes == 0))
        << "blob '" << blob.name << "'";
    names.push_back(blob.name);
    sizes.push_back(blob.bytes);
    hashes.push_back(XXH64(blob.data, static_cast<size_t>(blob.bytes), 0));
  }
  const size_t first_streamed = names.size();
  if (streamed != nullptr) {
    HOIST_CHECK_EQ(streamed->names.size(), streamed->bytes.size());
    for (size_t i = 0; i < streamed->names.size(); ++i) {
      HOIST_CHECK_GE(streamed->bytes[i], 0) << "blob '" << streamed->names[i] << "'";
      names.push_back(streamed->names[i]);
      sizes.push_back(streamed->bytes[i]);
      hashes.push_back(0);  // known once the bytes have gone by
    }
  }
  HOIST_CHECK_LE(names.size(), size_t{kMaxBlobs});
  std::set<std::string> unique;
  for (const std::string& name : names) {
    HOIST_CHECK(!name.empty() && name.size() <= kMaxNameBytes) << "blob name '" << name << "'";
    HOIST_CHECK(unique.insert(name).second) << "blob '" << name << "' given twice";
  }
  std::vector<int64_t> offsets;
  std::string index = BuildIndex(step, rank, names, sizes, hashes, &offsets);
  const auto index_bytes = static_cast<int64_t>(index.size());

  StatusOr<std::unique_ptr<WritableFile>> opened = fs.NewWritableFile(path);
  if (!opened.ok()) return AbandonStreamed(streamed, opened.status());
  std::unique_ptr<WritableFile> file = std::move(opened).value();
  static const char kZeros[kDataAlignment] = {};
  if (streamed == nullptr) {
    // Front to back in one pass.
    HOIST_RETURN_IF_ERROR(file->Append(index.data(), index_bytes));
    int64_t written = index_bytes;
    for (size_t i = 0; i < blobs.size(); ++i) {
      HOIST_RETURN_IF_ERROR(file->Append(kZeros, offsets[i] - written));
      HOIST_RETURN_IF_ERROR(file->Append(blobs[i].data, blobs[i].bytes));
      written = offsets[i] + blobs[i].bytes;
    }
  } else {
    // Every byte goes to its place; the index, which needs the streamed blobs' checksums, last.
    Status placed = [&]() -> Status {
      int64_t end = index_bytes;
      for (size_t i = 0; i < names.size(); ++i) {
        HOIST_RETURN_IF_ERROR(file->WriteAt(end, kZeros, offsets[i] - end));
        end = offsets[i] + sizes[i];
      }
      for (size_t i = 0; i < blobs.size(); ++i) {
        HOIST_RETURN_IF_ERROR(file->WriteAt(offsets[i], blobs[i].data, blobs[i].bytes));
      }
      return Status::Ok();
    }();
    if (!placed.ok()) return AbandonStreamed(streamed, placed);
    std::vector<Xxh64State> states;
    std::vector<int64_t> done(streamed->names.size(), 0);
    for (size_t i = 0; i < streamed->names.size(); ++i) states.push_back(NewXxh64State());
    HOIST_RETURN_IF_ERROR(streamed->produce([&](int blob, const void* data, int64_t bytes) {
      HOIST_CHECK(blob >= 0 && static_cast<size_t>(blob) < done.size()) << "streamed blob " << blob;
      const auto b = static_cast<size_t>(blob);
      HOIST_CHECK_LE(done[b] + bytes, streamed->bytes[b])
          << "streamed blob '" << streamed->names[b] << "' overflows";
      HOIST_RETURN_IF_ERROR(file->WriteAt(offsets[first_streamed + b] + done[b], data, bytes));
      XXH64_update(states[b].get(), data, static_cast<size_t>(bytes));
      done[b] += bytes;
      return Status::Ok();
    }));
    for (size_t b = 0; b < done.size(); ++b) {
      HOIST_CHECK_EQ(done[b], streamed->bytes[b])
          << "streamed blob '" << streamed->names[b] << "' is short";
      hashes[first_streamed + b] = XXH64_digest(states[b].get());
    }
    index = BuildIndex(step, rank, names, sizes, hashes, &offsets);
    HOIST_RETURN_IF_ERROR(file->WriteAt(0, index.data(), index_bytes));
  }
  HOIST_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

StatusOr<ShardFile> ShardFile::Open(const std::string& path, FileSystem& fs) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, fs.NewRandomAccessFile(path));
  return ShardFile(std::move(file));
}

Status ShardFile::ReadAt(int64_t offset, void* data, int64_t bytes) const {
  HOIST_ASSIGN_OR_RETURN(int64_t n, file_->Read(offset, data, bytes));
  if (n < bytes) {
    return Corrupt(path(), "ends at byte " + std::to_string(offset + n) + " but " +
                               std::to_string(bytes - n) + " more bytes were expected (truncated)");
  }
  return Status::Ok();
}

StatusOr<ShardIndex> ShardFile::ReadIndex() const {
  unsigned char header[kHeaderBytes];
  if (size_bytes() < kHeaderBytes) {
    return Corrupt(path(), "is " + std::to_string(size_bytes()) +
                               " bytes, shorter than a shard header (truncated)");
  }
  HOIST_RETURN_IF_ERROR(ReadAt(0, header, kHeaderBytes));
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    return Corrupt(path(), "does not start with the magic \"HOISTCKP\": it is not a hoist shard");
  }
  const uint32_t version = GetU32(header + 8);
  if (version != kShardFormatVersion) {
    return FailedPreconditionError("checkpoint shard " + path() + " has format version " +
                                   std::to_string(version) + " but this build reads version " +
                                   std::to_string(kShardFormatVersion) +
                                   "; read it with the hoist that wrote it");
  }
  ShardIndex index;
  index.rank = static_cast<int>(GetU32(header + 12));
  index.step = static_cast<int64_t>(GetU64(header + 16));
  const uint32_t count = GetU32(header + 24);
  const uint32_t index_bytes = GetU32(header + 28);
  if (count > kMaxBlobs || index_bytes > kMaxIndexBytes || index_bytes < kHeaderBytes + 8) {
    return Corrupt(path(), "has an impossible index (" + std::to_string(count) + " blobs in " +
                               std::to_string(index_bytes) + " bytes)");
  }
  if (index_bytes > size_bytes()) {
    return Corrupt(path(), "is " + std::to_string(size_bytes()) + " bytes, shorter than its " +
                               std::to_string(index_bytes) + "-byte index (truncated)");
  }
  std::vector<unsigned char> raw(index_bytes);
  HOIST_RETURN_IF_ERROR(ReadAt(0, raw.data(), index_bytes));
  const uint64_t stored = GetU64(raw.data() + index_bytes - 8);
  const uint64_t actual = XXH64(raw.data(), index_bytes - 8, 0);
  if (stored != actual) {
    return Corrupt(path(), "has an index checksum of " + Xxh64Hex(actual) + " where " +
                               Xxh64Hex(stored) + " was stored");
  }
  index.index_bytes = index_bytes;
  index.index_xxh64 = stored;

  // The checksum matched, so the fields below are what the writer wrote; the checks guard
  // against a file whose tail was cut or replaced.
  size_t pos = kHeaderBytes;
  const size_t table_end = index_bytes - 8;
  int64_t end = index_bytes;
  for (uint32_t i = 0; i < count; ++i) {
    if (pos + 4 > table_end) return Corrupt(path(), "has a blob table that overruns its index");
    const uint32_t name_bytes = GetU32(raw.data() + pos);
    pos += 4;
    if (name_bytes == 0 || name_bytes > kMaxNameBytes || pos + name_bytes + 24 > table_end) {
      return Corrupt(path(), "has a blob table that overruns its index");
    }
    ShardBlobEntry entry;
    entry.name.assign(reinterpret_cast<const char*>(raw.data() + pos), name_bytes);
    pos += name_bytes;
    entry.offset = static_cast<int64_t>(GetU64(raw.data() + pos));
    entry.bytes = static_cast<int64_t>(GetU64(raw.data() + pos + 8));
    entry.xxh64 = GetU64(raw.data() + pos + 16);
    pos += 24;
    if (entry.offset < end || entry.bytes < 0 || entry.offset > (int64_t{1} << 62) ||
        entry.bytes > (int64_t{1} << 62)) {
      return Corrupt(path(), "places blob '" + entry.name + "' at an impossible offset");
    }
    end = entry.offset + entry.bytes;
    index.blobs.push_back(std::move(entry));
  }
  if (pos != table_end) return Corrupt(path(), "has bytes after its blob table");
  index.file_bytes = end;
  if (size_bytes() != end) {
    return Corrupt(path(), "is " + std::to_string(size_bytes()) + " bytes but its index says " +
                               std::to_string(end) +
                               (size_bytes() < end ? " (truncated)" : " (trailing bytes)"));
  }
  return index;
}

Status ShardFile::ReadBlob(const ShardBlobEntry& entry, void* data) const {
  HOIST_RETURN_IF_ERROR(ReadAt(entry.offset, data, entry.bytes));
  const uint64_t actual = XXH64(data, static_cast<size_t>(entry.bytes), 0);
  if (actual != entry.xxh64) {
    return Corrupt(path(), "has blob '" + entry.name + "' with checksum " + Xxh64Hex(actual) +
                               " where " + Xxh64Hex(entry.xxh64) + " was stored");
  }
  return Status::Ok();
}

Status ShardFile::ReadRange(const ShardBlobEntry& entry, int64_t offset, void* data,
                            int64_t bytes) const {
  HOIST_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= entry.bytes)
      << "range [" << offset << ", " << offset + bytes << ") of blob '" << entry.name << "'";
  return ReadAt(entry.offset + offset, data, bytes);
}

BlobReader::BlobReader(const ShardFile* file, ShardBlobEntry entry)
    : file_(file), entry_(std::move(entry)), state_(XXH64_createState()) {
  HOIST_CHECK(state_ != nullptr) << "out of memory for a checksum state";
  XXH64_reset(static_cast<XXH64_state_t*>(state_), 0);
}

BlobReader::~BlobReader() {
  if (state_ != nullptr) XXH64_freeState(static_cast<XXH64_state_t*>(state_));
}

BlobReader::BlobReader(BlobReader&& other) noexcept
    : file_(other.file_),
      entry_(std::move(other.entry_)),
      done_(other.done_),
      state_(std::exchange(other.state_, nullptr)) {}

Status BlobReader::Read(void* data, int64_t bytes) {
  if (done_ + bytes > entry_.bytes) {
    return FailedPreconditionError("blob '" + entry_.name + "' in " + file_->path() + " has " +
                                   std::to_string(entry_.bytes) + " bytes; reading " +
                                   std::to_string(bytes) + " more at " + std::to_string(done_) +
                                   " goes past its end");
  }
  HOIST_RETURN_IF_ERROR(file_->ReadRange(entry_, done_, data, bytes));
  XXH64_update(static_cast<XXH64_state_t*>(state_), data, static_cast<size_t>(bytes));
  done_ += bytes;
  return Status::Ok();
}

Status BlobReader::Finish() const {
  if (done_ != entry_.bytes) {
    return FailedPreconditionError("blob '" + entry_.name + "' in " + file_->path() +
                                   " was read to " + std::to_string(done_) + " of " +
                                   std::to_string(entry_.bytes) + " bytes");
  }
  const uint64_t actual = XXH64_digest(static_cast<XXH64_state_t*>(state_));
  if (actual != entry_.xxh64) {
    return Corrupt(file_->path(), "has blob '" + entry_.name + "' with checksum " +
                                      Xxh64Hex(actual) + " where " + Xxh64Hex(entry_.xxh64) +
                                      " was stored");
  }
  return Status::Ok();
}

}  // namespace hoist::runtime
