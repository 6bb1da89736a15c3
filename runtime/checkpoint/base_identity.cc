#include "runtime/checkpoint/base_identity.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "runtime/checkpoint/checkpoint_metadata.h"
#include "runtime/checkpoint/checkpoint_shard.h"
#include "runtime/interchange/safetensors.h"

namespace hoist::runtime {
namespace {

constexpr int64_t kWindows = 64;
constexpr int64_t kWindowBytes = int64_t{16} << 10;
// Data up to this size is hashed whole (the windows would cover it anyway).
constexpr int64_t kWholeBytes = kWindows * kWindowBytes;

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Feeds bytes [offset, offset + bytes) of `file` into `state`.
Status HashRange(const RandomAccessFile& file, int64_t offset, int64_t bytes, XXH64_state_t* state,
                 std::vector<char>* buffer) {
  while (bytes > 0) {
    const int64_t piece = std::min<int64_t>(bytes, static_cast<int64_t>(buffer->size()));
    HOIST_ASSIGN_OR_RETURN(int64_t read, file.Read(offset, buffer->data(), piece));
    if (read != piece) {
      return DataLossError(file.path() + " ended at byte " + std::to_string(offset + read) +
                           " while its identity was read; it changed while it was read");
    }
    XXH64_update(state, buffer->data(), static_cast<size_t>(piece));
    offset += piece;
    bytes -= piece;
  }
  return Status::Ok();
}

// The identity of one file (see the header).
StatusOr<nlohmann::json> FileIdentity(FileSystem& fs, const std::string& path,
                                      const std::string& name) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, fs.NewRandomAccessFile(path));
  const int64_t size = file->size_bytes();
  nlohmann::json identity = {{"name", name}, {"bytes", size}};
  std::vector<char> buffer(static_cast<size_t>(kWindowBytes));
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(),
                                                                   &XXH64_freeState);
  int64_t data_begin = 0;
  if (EndsWith(name, ".safetensors") && size >= 8) {
    unsigned char length_bytes[8];
    HOIST_ASSIGN_OR_RETURN(int64_t read, file->Read(0, length_bytes, 8));
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
    // A length past the file or the readers' limit leaves the whole file as data (the reader
    // refuses such a file before it gets here).
    if (read == 8 && length <= static_cast<uint64_t>(size - 8) &&
        length <= static_cast<uint64_t>(kSafetensorsMaxHeaderBytes)) {
      data_begin = 8 + static_cast<int64_t>(length);
      XXH64_reset(state.get(), 0);
      HOIST_RETURN_IF_ERROR(HashRange(*file, 0, data_begin, state.get(), &buffer));
      identity["header_xxh64"] = Xxh64Hex(XXH64_digest(state.get()));
    }
  }
  XXH64_reset(state.get(), 0);
  const int64_t data_bytes = size - data_begin;
  if (data_bytes <= kWholeBytes) {
    HOIST_RETURN_IF_ERROR(HashRange(*file, data_begin, data_bytes, state.get(), &buffer));
  } else {
    // Window w starts at w / (kWindows - 1) of the way to the last window's start.
    const int64_t span = data_bytes - kWindowBytes;
    for (int64_t w = 0; w < kWindows; ++w) {
      const int64_t at = data_begin + span * w / (kWindows - 1);
      HOIST_RETURN_IF_ERROR(HashRange(*file, at, kWindowBytes, state.get(), &buffer));
    }
  }
  identity["data_xxh64"] = Xxh64Hex(XXH64_digest(state.get()));
  return identity;
}

// The file entries of `saved` by name; DataLoss naming the field when it is malformed.
Status ReadSaved(const nlohmann::json& saved, const std::string& checkpoint,
                 std::map<std::string, const nlohmann::json*>* files) {
  const std::string field = std::string("metadata.") + kBaseIdentityField;
  const auto bad = [&](const std::string& what) {
    return DataLossError("checkpoint " + checkpoint + ": " + field + " " + what +
                         "; the manifest is damaged: resume from another step directory");
  };
  if (!saved.is_object() || !saved.contains("files") || !saved["files"].is_array()) {
    return bad("has no list of files");
  }
  for (const nlohmann::json& file : saved["files"]) {
    if (!file.is_object() || !file.contains("name") || !file["name"].is_string() ||
        !file.contains("bytes") ||
        !IntegerIn(file["bytes"], 0, std::numeric_limits<int64_t>::max()) ||
        !file.contains("data_xxh64") || !file["data_xxh64"].is_string() ||
        (file.contains("header_xxh64") && !file["header_xxh64"].is_string())) {
      return bad("holds a file entry that is not {name, bytes, data_xxh64}: " +
                 file.dump().substr(0, 200));
    }
    (*files)[file["name"].get<std::string>()] = &file;
  }
  return Status::Ok();
}

// What differs between the saved and the current entry of one file ("" when nothing does).
std::string FileDifference(const nlohmann::json& saved, const nlohmann::json& now) {
  const std::string name = saved["name"].get<std::string>();
  if (saved["bytes"] != now["bytes"]) {
    return name + " is " + now["bytes"].dump() + " bytes, was " + saved["bytes"].dump();
  }
  if (saved.value("header_xxh64", "") != now.value("header_xxh64", "")) {
    return name + "'s header (its tensors' names, dtypes, shapes and offsets) has checksum " +
           now.value("header_xxh64", std::string("(none)")) + ", was " +
           saved.value("header_xxh64", std::string("(none)"));
  }
  if (saved["data_xxh64"] != now["data_xxh64"]) {
    return name + " holds other data: its sampled checksum is " +
           now["data_xxh64"].get<std::string>() + ", was " + saved["data_xxh64"].get<std::string>();
  }
  return "";
}

}  // namespace

StatusOr<nlohmann::json> BaseIdentity(const WeightSource& base, FileSystem& fs) {
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& path : base.files()) {
    // Every file is in the base's directory (or is the base): its own name identifies it
    // wherever the path is spelled from.
    const std::string name = std::filesystem::path(path).filename().string();
    HOIST_ASSIGN_OR_RETURN(nlohmann::json file, FileIdentity(fs, path, name));
    files.push_back(std::move(file));
  }
  return nlohmann::json{{"files", std::move(files)}};
}

Status CheckSameBase(const nlohmann::json& saved, const nlohmann::json& current,
                     const std::string& base_path, const std::string& checkpoint) {
  std::map<std::string, const nlohmann::json*> was;
  HOIST_RETURN_IF_ERROR(ReadSaved(saved, checkpoint, &was));
  std::vector<std::string> changes;
  std::map<std::string, const nlohmann::json*> now;
  for (const nlohmann::json& file : current["files"]) now[file["name"].get<std::string>()] = &file;
  for (const auto& [name, file] : was) {
    const auto it = now.find(name);
    if (it == now.end()) {
      changes.push_back(name + " is gone");
    } else if (std::string d = FileDifference(*file, *it->second); !d.empty()) {
      changes.push_back(std::move(d));
    }
  }
  for (const auto& [name, file] : now) {
    if (was.count(name) == 0) changes.push_back(name + " is new");
  }
  if (changes.empty()) return Status::Ok();
  std::string what;
  for (const std::string& change : changes) what += (what.empty() ? "" : "; ") + change;
  return FailedPreconditionError(
      "checkpoint " + checkpoint + " holds adapters of the base at " + base_path +
      " (model.init_from), but the files there are not that base any more: " + what +
      "; put the base the adapters were trained on back at that path");
}

}  // namespace hoist::runtime
