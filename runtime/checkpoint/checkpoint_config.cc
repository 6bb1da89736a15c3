#include "runtime/checkpoint/checkpoint_config.h"

#include <xxhash.h>

#include <limits>
#include <string_view>

#include "runtime/checkpoint/checkpoint_metadata.h"
#include "runtime/checkpoint/checkpoint_shard.h"

namespace hoist::runtime {
namespace {

std::string Checksum(std::string_view text) { return Xxh64Hex(XXH64(text.data(), text.size(), 0)); }

std::string FileName(const std::string& checksum) { return "config_" + checksum + ".json"; }

}  // namespace

StatusOr<nlohmann::json> StoreRunConfig(const std::string& dir, std::string_view text,
                                        FileSystem& fs) {
  const std::string checksum = Checksum(text);
  const std::string name = FileName(checksum);
  const std::string path = dir + "/" + name;
  nlohmann::json reference = {
      {"name", name}, {"bytes", static_cast<int64_t>(text.size())}, {"xxh64", checksum}};
  // Another step of the run (or an earlier run with the same config) stored it already; a file
  // of that name holding anything else (damaged, cut short) is replaced.
  StatusOr<FileInfo> existing = fs.Stat(path);
  if (existing.ok() && existing->size_bytes == static_cast<int64_t>(text.size())) {
    StatusOr<std::string> stored = ReadFileToString(fs, path);
    if (stored.ok() && *stored == text) return reference;
  }
  HOIST_RETURN_IF_ERROR(fs.CreateDirs(dir));
  const std::string_view pieces[] = {text};
  HOIST_RETURN_IF_ERROR(WriteFileAtomically(fs, path, pieces)
                            .WithContext("storing the run's config beside its checkpoints"));
  return reference;
}

StatusOr<std::string> ReadRunConfig(const std::string& dir, const nlohmann::json& reference,
                                    FileSystem& fs) {
  const bool well_formed = reference.is_object() && reference.contains("xxh64") &&
                           reference["xxh64"].is_string() && reference.contains("bytes") &&
                           IntegerIn(reference["bytes"], 0, std::numeric_limits<int64_t>::max());
  if (!well_formed) {
    return DataLossError("the config reference " + reference.dump().substr(0, 200) +
                         " of a manifest in " + dir +
                         " is not {name, bytes, xxh64}; the manifest is damaged");
  }
  const std::string checksum = reference["xxh64"].get<std::string>();
  const std::string path = dir + "/" + FileName(checksum);
  StatusOr<std::string> text = ReadFileToString(fs, path);
  if (!text.ok()) {
    return Status(text.status().code(),
                  "the run's config " + path +
                      " that the checkpoint names cannot be read: " + text.status().message());
  }
  if (static_cast<int64_t>(text->size()) != reference["bytes"].get<int64_t>() ||
      Checksum(*text) != checksum) {
    return DataLossError("the run's config " + path + " is " + std::to_string(text->size()) +
                         " bytes with checksum " + Checksum(*text) + ", but the checkpoint names " +
                         reference["bytes"].dump() + " bytes with checksum " + checksum +
                         "; it was damaged or replaced");
  }
  return std::move(text).value();
}

}  // namespace hoist::runtime
