#include "runtime/checkpoint/checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/json_reader.h"
#include "core/logging.h"
#include "runtime/checkpoint/checkpoint_metadata.h"

namespace hoist::runtime {
namespace {

namespace fs_std = std::filesystem;

constexpr char kStepPrefix[] = "step_";
constexpr char kStagingPrefix[] = ".tmp_step_";
constexpr char kManifestName[] = "manifest.json";
constexpr char kLatestName[] = "latest";
constexpr char kPartSuffix[] = ".part";
constexpr char kManifestFormat[] = "hoist-checkpoint";
// Version 2 added manifest_xxh64. Version 1 manifests (no checksum) are still read: their values
// are range-checked like any others, and a checksum is no defence against someone who edits on
// purpose (it can be recomputed); it catches damage and accidental edits.
constexpr int kManifestVersion = 2;
constexpr int kUncheckedManifestVersion = 1;
constexpr char kManifestChecksumKey[] = "manifest_xxh64";

std::string Join(const std::string& dir, const std::string& name) {
  return (fs_std::path(dir) / name).string();
}

std::string StagingDirName(int64_t step) {
  return kStagingPrefix + CheckpointStepDirName(step).substr(5);
}

std::string ShardName(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.bin", rank);
  return name;
}

// The step in "<prefix><8 or more digits>", or nothing for any other name.
std::optional<int64_t> ParseStep(const std::string& name, const std::string& prefix) {
  if (name.size() < prefix.size() + 8 || name.size() > prefix.size() + 18 ||
      name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

Status WriteSmallFileAtomically(FileSystem& fs, const std::string& path,
                                const std::string& contents) {
  const std::string_view pieces[] = {contents};
  return WriteFileAtomically(fs, path, pieces);
}

bool IsDirectory(FileSystem& fs, const std::string& path) {
  StatusOr<FileInfo> info = fs.Stat(path);
  return info.ok() && info->type == FileType::kDirectory;
}

// Names in `dir` that parse as "<prefix><step>", by step.
StatusOr<std::vector<std::pair<int64_t, std::string>>> ListSteps(FileSystem& fs,
                                                                 const std::string& dir,
                                                                 const std::string& prefix) {
  HOIST_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.ListDirectory(dir));
  std::vector<std::pair<int64_t, std::string>> steps;
  for (std::string& name : names) {
    if (std::optional<int64_t> step = ParseStep(name, prefix)) {
      steps.emplace_back(*step, std::move(name));
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// The manifest's text (indent 2, or compact for -1), or InvalidArgument when `metadata` or a
// blob name is not UTF-8 (the only way dump() throws).
StatusOr<std::string> DumpManifest(const nlohmann::json& manifest, const std::string& path,
                                   int indent = 2) {
  try {
    return manifest.dump(indent) + (indent >= 0 ? "\n" : "");
  } catch (const nlohmann::json::exception& error) {
    return InvalidArgumentError("cannot write " + path + ": " + error.what() +
                                "; checkpoint metadata and blob names must be valid UTF-8");
  }
}

// The checksum of a manifest: XXH64 of the compact text of every field but manifest_xxh64 (keys
// sorted, as nlohmann keeps them). Parsing the written text and dumping it again gives the same
// text (numbers are written in their shortest round-trip form), so reader and writer agree.
StatusOr<std::string> ManifestChecksum(nlohmann::json manifest, const std::string& path) {
  manifest.erase(kManifestChecksumKey);
  HOIST_ASSIGN_OR_RETURN(std::string text, DumpManifest(manifest, path, -1));
  return Xxh64Hex(XXH64(text.data(), text.size(), 0));
}

Status PublishStagedStep(FileSystem& fs, const std::string& dir, int64_t step, int world_size,
                         const nlohmann::json& metadata) {
  const std::string staging = Join(dir, StagingDirName(step));
  nlohmann::json files = nlohmann::json::array();
  std::set<std::string> keep = {kManifestName};
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string name = ShardName(rank);
    keep.insert(name);
    StatusOr<ShardFile> shard = ShardFile::Open(Join(staging, name), fs);
    if (!shard.ok()) {
      if (shard.status().code() != StatusCode::kNotFound) return shard.status();
      return FailedPreconditionError(
          "rank " + std::to_string(rank) + "'s shard of step " + std::to_string(step) +
          " is missing from " + staging +
          "; every rank must finish WriteRankShard before rank 0 commits");
    }
    HOIST_ASSIGN_OR_RETURN(ShardIndex index, shard->ReadIndex());
    if (index.rank != rank || index.step != step) {
      return DataLossError(shard->path() + " holds rank " + std::to_string(index.rank) +
                           "'s shard of step " + std::to_string(index.step) + ", not rank " +
                           std::to_string(rank) + "'s of step " + std::to_string(step) +
                           "; save the checkpoint again");
    }
    nlohmann::json blobs = nlohmann::json::array();
    for (const ShardBlobEntry& blob : index.blobs) {
      blobs.push_back({{"name", blob.name},
                       {"offset", blob.offset},
                       {"bytes", blob.bytes},
                       {"xxh64", Xxh64Hex(blob.xxh64)}});
    }
    files.push_back({{"rank", rank},
                     {"name", name},
                     {"bytes", index.file_bytes},
                     {"index_xxh64", Xxh64Hex(index.index_xxh64)},
                     {"blobs", std::move(blobs)}});
  }
  // Leftovers of a crashed attempt (partial files, shards of ranks beyond this world) must not
  // end up in the published directory.
  HOIST_ASSIGN_OR_RETURN(std::vector<std::string> staged, fs.ListDirectory(staging));
  for (const std::string& name : staged) {
    if (keep.count(name) == 0) HOIST_RETURN_IF_ERROR(fs.RemoveAll(Join(staging, name)));
  }

  nlohmann::json manifest = {
      {"format", kManifestFormat}, {"version", kManifestVersion}, {"step", step},
      {"world_size", world_size},  {"files", std::move(files)},   {"metadata", metadata}};
  const std::string manifest_path = Join(staging, kManifestName);
  HOIST_ASSIGN_OR_RETURN(manifest[kManifestChecksumKey], ManifestChecksum(manifest, manifest_path));
  HOIST_ASSIGN_OR_RETURN(std::string manifest_text, DumpManifest(manifest, manifest_path));
  HOIST_RETURN_IF_ERROR(WriteSmallFileAtomically(fs, manifest_path, manifest_text));

  const std::string step_name = CheckpointStepDirName(step);
  const std::string final_dir = Join(dir, step_name);
  if (fs.Stat(final_dir).ok()) {
    // Re-saving a step (after resuming from an earlier one): swap the directories in one rename
    // so `latest` never names a missing directory, then drop the old contents.
    Status exchanged = fs.Exchange(staging, final_dir);
    if (exchanged.code() == StatusCode::kUnimplemented) {
      HOIST_LOG(WARN) << "replacing " << final_dir << " non-atomically: " << exchanged.message();
      HOIST_RETURN_IF_ERROR(fs.RemoveAll(final_dir));
      HOIST_RETURN_IF_ERROR(fs.Rename(staging, final_dir));
    } else {
      HOIST_RETURN_IF_ERROR(exchanged);
      HOIST_RETURN_IF_ERROR(fs.RemoveAll(staging));
    }
  } else {
    HOIST_RETURN_IF_ERROR(fs.Rename(staging, final_dir));
  }
  HOIST_RETURN_IF_ERROR(fs.SyncDir(dir));
  return WriteSmallFileAtomically(fs, Join(dir, kLatestName), step_name + "\n");
}

// A manifest carries the job config and the Hugging Face config.json of the run (each within
// ParseJson's default bounds) a few levels down, beside its own fields.
constexpr JsonLimits kManifestLimits{kJsonMaxDepth + 8, 4 * kJsonMaxBytes};

Status BadManifest(const std::string& path, const std::string& what) {
  return DataLossError(path + " " + what +
                       "; the manifest is damaged: resume from another step directory");
}

// One entry of the manifest's "files"; the blob list is checked but not kept, since the shard's
// own index (pinned by index_xxh64) is what reads use.
struct ManifestFile {
  std::string name;
  int64_t bytes = 0;
  std::string index_xxh64;
};

struct Manifest {
  bool checksummed = false;  // version 1 manifests have no checksum
  int64_t step = 0;
  int64_t world_size = 0;
  std::vector<ManifestFile> files;  // by rank
  nlohmann::json metadata;
};

// Reads typed fields of a parsed manifest without nlohmann's throwing accessors: every field of
// the wrong type or missing is a DataLoss naming the manifest and the field ("files[0].name").
class ManifestFields {
 public:
  explicit ManifestFields(const std::string& path) : path_(path) {}

  StatusOr<const nlohmann::json*> Get(const nlohmann::json& object, const std::string& where,
                                      const char* key, nlohmann::json::value_t type) const {
    const std::string field = where.empty() ? key : where + "." + key;
    const auto it = object.find(key);
    if (it == object.end()) return BadManifest(path_, "has no field \"" + field + "\"");
    const bool matches = type == nlohmann::json::value_t::number_integer ? it->is_number_integer()
                                                                         : it->type() == type;
    if (!matches) {
      return BadManifest(path_, "has field \"" + field + "\" of type " + it->type_name() +
                                    " where " + TypeName(type) + " belongs");
    }
    return &*it;
  }

  StatusOr<std::string> String(const nlohmann::json& object, const std::string& where,
                               const char* key) const {
    HOIST_ASSIGN_OR_RETURN(const nlohmann::json* value,
                           Get(object, where, key, nlohmann::json::value_t::string));
    return value->get_ref<const std::string&>();
  }

  // An integer in [min, max].
  StatusOr<int64_t> Integer(const nlohmann::json& object, const std::string& where, const char* key,
                            int64_t min, int64_t max = std::numeric_limits<int64_t>::max()) const {
    HOIST_ASSIGN_OR_RETURN(const nlohmann::json* value,
                           Get(object, where, key, nlohmann::json::value_t::number_integer));
    const std::optional<int64_t> number = IntegerIn(*value, min, max);
    if (!number) {
      const std::string field = where.empty() ? key : where + "." + key;
      return BadManifest(path_, "has field \"" + field + "\" = " + value->dump() + ", outside [" +
                                    std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    return *number;
  }

 private:
  static std::string TypeName(nlohmann::json::value_t type) {
    switch (type) {
      case nlohmann::json::value_t::string: return "a string";
      case nlohmann::json::value_t::number_integer: return "an integer";
      case nlohmann::json::value_t::array: return "an array";
      case nlohmann::json::value_t::object: return "an object";
      default: return "another type";
    }
  }

  const std::string& path_;
};

StatusOr<Manifest> ParseManifest(const std::string& path, const std::string& text) {
  using Type = nlohmann::json::value_t;
  JsonFault fault;
  StatusOr<nlohmann::json> parsed = ParseJson(text, path, kManifestLimits, &fault);
  if (!parsed.ok()) {
    if (fault == JsonFault::kNotJson) return BadManifest(path, "is not a JSON object");
    return DataLossError(parsed.status().message() +
                         "; the manifest is damaged: resume from another step directory");
  }
  const nlohmann::json json = std::move(parsed).value();
  if (!json.is_object()) return BadManifest(path, "is not a JSON object");
  const ManifestFields fields(path);
  HOIST_ASSIGN_OR_RETURN(std::string format, fields.String(json, "", "format"));
  if (format != kManifestFormat) {
    return BadManifest(path, "has \"format\": \"" + format.substr(0, 64) +
                                 "\", so it is not a hoist checkpoint manifest (\"" +
                                 kManifestFormat + "\")");
  }
  HOIST_ASSIGN_OR_RETURN(int64_t version, fields.Integer(json, "", "version", 0));
  if (version != kManifestVersion && version != kUncheckedManifestVersion) {
    return FailedPreconditionError(
        path + " has manifest version " + std::to_string(version) +
        " but this build reads versions " + std::to_string(kUncheckedManifestVersion) + " and " +
        std::to_string(kManifestVersion) + "; read it with the hoist that wrote it");
  }
  Manifest manifest;
  manifest.checksummed = version >= kManifestVersion;
  if (manifest.checksummed) {
    HOIST_ASSIGN_OR_RETURN(std::string recorded, fields.String(json, "", kManifestChecksumKey));
    HOIST_ASSIGN_OR_RETURN(std::string actual, ManifestChecksum(json, path));
    if (recorded != actual) {
      return DataLossError(path + " does not match its checksum (\"" + kManifestChecksumKey +
                           "\" says " + recorded.substr(0, 64) + ", the content hashes to " +
                           actual +
                           "): it was edited or damaged after it was written; resume from "
                           "another step directory or put the original manifest back");
    }
  }
  HOIST_ASSIGN_OR_RETURN(manifest.step, fields.Integer(json, "", "step", 0));
  HOIST_ASSIGN_OR_RETURN(manifest.world_size, fields.Integer(json, "", "world_size", 1, 1 << 24));
  HOIST_ASSIGN_OR_RETURN(const nlohmann::json* files, fields.Get(json, "", "files", Type::array));
  if (static_cast<int64_t>(files->size()) != manifest.world_size) {
    return BadManifest(path, "lists " + std::to_string(files->size()) +
                                 " files in \"files\", not one per rank of its world_size " +
                                 std::to_string(manifest.world_size));
  }
  for (size_t rank = 0; rank < files->size(); ++rank) {
    const nlohmann::json& entry = (*files)[rank];
    const std::string where = "files[" + std::to_string(rank) + "]";
    if (!entry.is_object()) {
      return BadManifest(path, "has field \"" + where + "\" of type " + entry.type_name() +
                                   " where an object belongs");
    }
    HOIST_ASSIGN_OR_RETURN(int64_t file_rank, fields.Integer(entry, where, "rank", 0));
    ManifestFile file;
    HOIST_ASSIGN_OR_RETURN(file.name, fields.String(entry, where, "name"));
    HOIST_ASSIGN_OR_RETURN(file.bytes, fields.Integer(entry, where, "bytes", 0));
    HOIST_ASSIGN_OR_RETURN(file.index_xxh64, fields.String(entry, where, "index_xxh64"));
    if (file_rank != static_cast<int64_t>(rank) || file.name != ShardName(static_cast<int>(rank))) {
      return BadManifest(path, "has a malformed entry for rank " + std::to_string(rank) + " (\"" +
                                   where + "\" names rank " + std::to_string(file_rank) +
                                   " and file '" + file.name.substr(0, 64) + "')");
    }
    HOIST_ASSIGN_OR_RETURN(const nlohmann::json* blobs,
                           fields.Get(entry, where, "blobs", Type::array));
    for (size_t i = 0; i < blobs->size(); ++i) {
      const nlohmann::json& blob = (*blobs)[i];
      const std::string blob_where = where + ".blobs[" + std::to_string(i) + "]";
      if (!blob.is_object()) {
        return BadManifest(path, "has field \"" + blob_where + "\" of type " + blob.type_name() +
                                     " where an object belongs");
      }
      HOIST_RETURN_IF_ERROR(fields.String(blob, blob_where, "name").status());
      HOIST_RETURN_IF_ERROR(fields.Integer(blob, blob_where, "offset", 0).status());
      HOIST_RETURN_IF_ERROR(fields.Integer(blob, blob_where, "bytes", 0).status());
      HOIST_RETURN_IF_ERROR(fields.String(blob, blob_where, "xxh64").status());
    }
    manifest.files.push_back(std::move(file));
  }
  // Absent metadata reads as empty, as a manifest written with empty metadata does.
  if (json.contains("metadata")) {
    HOIST_ASSIGN_OR_RETURN(const nlohmann::json* metadata,
                           fields.Get(json, "", "metadata", Type::object));
    manifest.metadata = *metadata;
  } else {
    manifest.metadata = nlohmann::json::object();
  }
  return manifest;
}

// Ok when `step_dir` holds a manifest that parses and matches its checksum and every shard it
// lists, at the size it lists; otherwise why not.
Status CheckStepComplete(FileSystem& fs, const std::string& step_dir) {
  const std::string manifest_path = Join(step_dir, kManifestName);
  HOIST_ASSIGN_OR_RETURN(std::string text,
                         ReadFileToString(fs, manifest_path, kManifestLimits.max_bytes));
  HOIST_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(manifest_path, text));
  for (const ManifestFile& file : manifest.files) {
    const std::string shard = Join(step_dir, file.name);
    HOIST_ASSIGN_OR_RETURN(FileInfo info, fs.Stat(shard));
    if (info.size_bytes != file.bytes) {
      return DataLossError(shard + " is " + std::to_string(info.size_bytes) +
                           " bytes but the manifest says " + std::to_string(file.bytes));
    }
  }
  return Status::Ok();
}

// Without `latest` (deleted, or lost with a file system that did not keep the last rename): the
// newest step directory that is complete, said in a notice, so that a resume neither starts
// afresh over the checkpoints nor takes a damaged one. NotFound when there is no step directory.
StatusOr<std::string> NewestCompleteStep(FileSystem& fs, const std::string& dir) {
  HOIST_ASSIGN_OR_RETURN(auto steps, ListSteps(fs, dir, kStepPrefix));
  if (steps.empty()) {
    return NotFoundError("no checkpoint in " + dir + ": it has no '" + kLatestName +
                         "' file and no step directory");
  }
  std::string skipped;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string step_dir = Join(dir, it->second);
    if (!IsDirectory(fs, step_dir)) continue;
    Status complete = CheckStepComplete(fs, step_dir);
    if (complete.ok()) {
      HOIST_LOG(WARN) << dir << " has no '" << kLatestName << "' file; using " << it->second
                      << ", the newest complete step directory" << skipped;
      return step_dir;
    }
    skipped += "; skipped " + it->second + ": " + complete.message();
  }
  return DataLossError(dir + " has no '" + kLatestName + "' file and none of its " +
                       std::to_string(steps.size()) + " step directories is complete" + skipped +
                       "; repair one and write its name into " + Join(dir, kLatestName) +
                       ", or move them away to start afresh");
}

}  // namespace

std::string CheckpointStepDirName(int64_t step) {
  HOIST_CHECK_GE(step, 0);
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

StatusOr<std::string> CheckpointManifestChecksum(const nlohmann::json& manifest) {
  return ManifestChecksum(manifest, kManifestName);
}

Status WriteRankShard(const std::string& dir, int64_t step, int rank,
                      std::span<const CheckpointBlob> blobs, FileSystem& fs) {
  return WriteRankShard(dir, step, rank, blobs, StreamedBlobs{}, fs);
}

Status WriteRankShard(const std::string& dir, int64_t step, int rank,
                      std::span<const CheckpointBlob> blobs, const StreamedBlobs& streamed,
                      FileSystem& fs) {
  HOIST_CHECK_GE(step, 0);
  HOIST_CHECK_GE(rank, 0);
  const std::string staging = Join(dir, StagingDirName(step));
  const std::string path = Join(staging, ShardName(rank));
  const std::string part = path + kPartSuffix;
  const StreamedBlobs* pieces = streamed.names.empty() ? nullptr : &streamed;
  Status status = [&]() -> Status {
    if (Status made = fs.CreateDirs(staging); !made.ok()) return AbandonStreamed(pieces, made);
    HOIST_RETURN_IF_ERROR(WriteShardFile(fs, part, step, rank, blobs, pieces));
    HOIST_RETURN_IF_ERROR(fs.Rename(part, path));
    return fs.SyncDir(staging);
  }();
  if (status.ok()) return status;
  (void)fs.Remove(part);
  (void)fs.Remove(path);
  // Other ranks may still be writing into the staging directory; Remove leaves a non-empty one.
  (void)fs.Remove(staging);
  return status.WithContext("checkpoint of step " + std::to_string(step) + " not saved (rank " +
                            std::to_string(rank) + ")");
}

Status CommitCheckpoint(const std::string& dir, int64_t step, int world_size,
                        const nlohmann::json& metadata, FileSystem& fs) {
  HOIST_CHECK_GE(step, 0);
  HOIST_CHECK_GE(world_size, 1);
  HOIST_CHECK(metadata.is_object()) << "checkpoint metadata must be a JSON object";
  const std::string staging = Join(dir, StagingDirName(step));
  if (!IsDirectory(fs, staging)) {
    return FailedPreconditionError("no shards of step " + std::to_string(step) + " in " + staging +
                                   "; call WriteRankShard on every rank first");
  }
  Status status = PublishStagedStep(fs, dir, step, world_size, metadata);
  if (!status.ok()) {
    (void)fs.RemoveAll(staging);
    return status.WithContext("checkpoint of step " + std::to_string(step) + " not committed");
  }
  StatusOr<std::vector<std::pair<int64_t, std::string>>> stale = ListSteps(fs, dir, kStagingPrefix);
  if (!stale.ok()) {
    HOIST_LOG(WARN) << "leftover staging directories in " << dir
                    << " stay: " << stale.status().message();
    return Status::Ok();
  }
  for (const auto& [stale_step, name] : *stale) {
    if (stale_step >= step) break;
    Status removed = fs.RemoveAll(Join(dir, name));
    if (!removed.ok()) HOIST_LOG(WARN) << "leftover " << name << " stays: " << removed.message();
  }
  return Status::Ok();
}

StatusOr<std::string> FindLatestCheckpoint(const std::string& dir, FileSystem& fs) {
  if (!IsDirectory(fs, dir)) {
    return NotFoundError("checkpoint directory " + dir + " does not exist");
  }
  const std::string latest_path = Join(dir, kLatestName);
  StatusOr<std::string> text = ReadFileToString(fs, latest_path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return NewestCompleteStep(fs, dir);
    return text.status();
  }
  std::string name = *text;
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  if (!ParseStep(name, kStepPrefix).has_value()) {
    return DataLossError(latest_path + " holds '" + name.substr(0, 64) +
                         "', not a step directory name like step_00000042; write the name of an "
                         "existing step directory into it, or delete it to start fresh");
  }
  const std::string step_dir = Join(dir, name);
  if (!IsDirectory(fs, step_dir)) {
    return DataLossError(latest_path + " names " + name + " but " + step_dir +
                         " does not exist; write the name of an existing step directory into " +
                         latest_path + ", or delete it to start fresh");
  }
  return step_dir;
}

Status PruneCheckpoints(const std::string& dir, int keep_last, FileSystem& fs) {
  if (keep_last < 1) {
    return InvalidArgumentError("keeping " + std::to_string(keep_last) +
                                " checkpoints would delete the latest; keep at least 1");
  }
  std::optional<int64_t> latest_step;
  StatusOr<std::string> latest = FindLatestCheckpoint(dir, fs);
  if (latest.ok()) {
    latest_step = ParseStep(fs_std::path(*latest).filename().string(), kStepPrefix);
  } else if (latest.status().code() != StatusCode::kNotFound) {
    return latest.status().WithContext("not pruning " + dir);
  }
  StatusOr<std::vector<std::pair<int64_t, std::string>>> steps = ListSteps(fs, dir, kStepPrefix);
  if (!steps.ok()) {
    // No directory means nothing to prune.
    if (steps.status().code() == StatusCode::kNotFound) return Status::Ok();
    return steps.status().WithContext("not pruning " + dir);
  }
  const size_t keep_from = steps->size() > static_cast<size_t>(keep_last)
                               ? steps->size() - static_cast<size_t>(keep_last)
                               : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    if (latest_step == (*steps)[i].first) continue;
    HOIST_RETURN_IF_ERROR(fs.RemoveAll(Join(dir, (*steps)[i].second)));
  }
  if (latest_step.has_value()) {
    HOIST_ASSIGN_OR_RETURN(auto staged, ListSteps(fs, dir, kStagingPrefix));
    for (const auto& [step, name] : staged) {
      if (step > *latest_step) break;
      HOIST_RETURN_IF_ERROR(fs.RemoveAll(Join(dir, name)));
    }
  }
  return fs.SyncDir(dir);
}

StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& step_dir, int rank,
                                                  FileSystem& fs) {
  HOIST_CHECK_GE(rank, 0);
  if (!IsDirectory(fs, step_dir)) {
    return NotFoundError("checkpoint directory " + step_dir + " does not exist");
  }
  const std::string manifest_path = Join(step_dir, kManifestName);
  StatusOr<std::string> text = ReadFileToString(fs, manifest_path, kManifestLimits.max_bytes);
  if (!text.ok()) {
    if (text.status().code() != StatusCode::kNotFound) return text.status();
    return NotFoundError("checkpoint " + step_dir + " has no " + kManifestName +
                         ", so it is incomplete (its save did not finish or the file was "
                         "deleted); resume from another step directory");
  }
  HOIST_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(manifest_path, *text));
  if (!manifest.checksummed && rank == 0) {
    HOIST_LOG(WARN) << manifest_path
                    << " has no checksum (manifest version 1, written by an older hoist); its "
                       "values are checked, but a change that keeps them in range goes unseen";
  }
  if (rank >= manifest.world_size) {
    return FailedPreconditionError(
        "checkpoint " + step_dir + " was written by " + std::to_string(manifest.world_size) +
        " ranks and has no shard for rank " + std::to_string(rank) + "; resume with " +
        std::to_string(manifest.world_size) + " ranks");
  }
  const ManifestFile& file = manifest.files[static_cast<size_t>(rank)];

  const std::string shard_path = Join(step_dir, file.name);
  StatusOr<ShardFile> shard = ShardFile::Open(shard_path, fs);
  if (!shard.ok()) {
    if (shard.status().code() != StatusCode::kNotFound) return shard.status();
    return NotFoundError("checkpoint " + step_dir + " lists " + file.name +
                         " in its manifest but the file is missing; resume from another step "
                         "directory");
  }
  if (shard->size_bytes() != file.bytes) {
    return DataLossError(shard_path + " is " + std::to_string(shard->size_bytes()) +
                         " bytes but the manifest says " + std::to_string(file.bytes) +
                         (shard->size_bytes() < file.bytes ? " (truncated)" : "") +
                         "; the file is damaged: resume from another step directory");
  }
  HOIST_ASSIGN_OR_RETURN(ShardIndex index, shard->ReadIndex());
  if (Xxh64Hex(index.index_xxh64) != file.index_xxh64) {
    return DataLossError(shard_path + " has index checksum " + Xxh64Hex(index.index_xxh64) +
                         " but the manifest says " + file.index_xxh64 +
                         "; the shard was replaced or damaged: resume from another step "
                         "directory");
  }
  if (index.rank != rank || index.step != manifest.step) {
    return DataLossError(shard_path + " holds rank " + std::to_string(index.rank) +
                         "'s shard of step " + std::to_string(index.step) +
                         " but the manifest is for step " + std::to_string(manifest.step) +
                         "; resume from another step directory");
  }

  CheckpointReader reader(step_dir, std::move(shard).value(), std::move(index));
  for (size_t i = 0; i < reader.index_.blobs.size(); ++i) {
    reader.blob_by_name_.emplace(reader.index_.blobs[i].name, i);
  }
  reader.metadata_ = std::move(manifest.metadata);
  reader.step_ = manifest.step;
  reader.world_size_ = static_cast<int>(manifest.world_size);
  return reader;
}

Status CheckpointReader::Read(const std::string& name, void* data, int64_t bytes) const {
  HOIST_ASSIGN_OR_RETURN(const ShardBlobEntry* blob, Find(name, bytes));
  return shard_.ReadBlob(*blob, data);
}

StatusOr<BlobReader> CheckpointReader::OpenBlob(const std::string& name, int64_t bytes) const {
  HOIST_ASSIGN_OR_RETURN(const ShardBlobEntry* blob, Find(name, bytes));
  return BlobReader(&shard_, *blob);
}

Status CheckpointReader::ReadRange(const std::string& name, int64_t bytes, int64_t offset,
                                   void* data, int64_t count) const {
  HOIST_ASSIGN_OR_RETURN(const ShardBlobEntry* blob, Find(name, bytes));
  return shard_.ReadRange(*blob, offset, data, count);
}

Status CheckpointReader::Verify(const std::string& name, int64_t bytes) const {
  HOIST_ASSIGN_OR_RETURN(BlobReader blob, OpenBlob(name, bytes));
  // A few MiB at a time: the blob may be larger than this rank's memory should hold.
  constexpr int64_t kPieceBytes = int64_t{4} << 20;
  std::vector<char> piece(static_cast<size_t>(std::min(bytes, kPieceBytes)));
  for (int64_t done = 0; done < bytes; done += kPieceBytes) {
    HOIST_RETURN_IF_ERROR(blob.Read(piece.data(), std::min(kPieceBytes, bytes - done)));
  }
  return blob.Finish();
}

StatusOr<const ShardBlobEntry*> CheckpointReader::Find(const std::string& name,
                                                       int64_t bytes) const {
  const auto it = blob_by_name_.find(name);
  if (it == blob_by_name_.end()) {
    std::string have;
    for (const ShardBlobEntry& blob : index_.blobs) have += (have.empty() ? "" : ", ") + blob.name;
    return NotFoundError("checkpoint shard " + shard_.path() + " has no blob '" + name +
                         "' (it has: " + (have.empty() ? "none" : have) +
                         "); the checkpoint was written by a different kind of job");
  }
  const ShardBlobEntry& blob = index_.blobs[it->second];
  if (blob.bytes != bytes) {
    return FailedPreconditionError("blob '" + name + "' in " + shard_.path() + " is " +
                                   std::to_string(blob.bytes) + " bytes but " +
                                   std::to_string(bytes) +
                                   " were asked for; the checkpoint was written for a different "
                                   "model or setup");
  }
  return &blob;
}

}  // namespace hoist::runtime
