// Training checkpoints on disk: a directory per step with one shard file per rank, a manifest
// with checksums, and a `latest` pointer, all published atomically so that a crash or a full
// disk at any moment leaves the previous checkpoint readable and `latest` naming a complete step.
//
//   <dir>/latest                      "step_00000042\n", replaced by rename
//   <dir>/step_00000042/manifest.json {format, version, step, world_size, files, metadata,
//                                      manifest_xxh64}
//   <dir>/step_00000042/rank_00000.bin  one shard per rank (layout:
//   runtime/checkpoint/checkpoint_shard.h) <dir>/.tmp_step_00000043/         a step being written;
//   never read, removed when stale
//
// Saving, on every rank: WriteRankShard; then, once every rank's call has returned (the caller
// synchronises), on rank 0 alone: CommitCheckpoint. Every file is written as a temporary, fsync'd
// and renamed, and each directory is fsync'd after a rename into it. Commit writes the manifest
// into the staging directory and only then renames the directory into place, so a step_
// directory is complete whenever it exists; `latest` moves last.
//
// manifest.json: "files" lists, per rank r, {"rank": r, "name": "rank_<05d>.bin", "bytes": size,
// "index_xxh64": 16 hex digits, "blobs": [{"name", "offset", "bytes", "xxh64"}]}. index_xxh64 is
// the checksum of the shard's index, which holds every blob's checksum, so it pins the content.
// manifest_xxh64 (version 2) is the XXH64 of the manifest's compact JSON text without that field,
// keys sorted: an edited or damaged manifest is DataLoss. Version 1 manifests, written before the
// field existed, are read without it (with a notice).
//
// Errors are Statuses that name the file and what to do: a missing or damaged file is NotFound or
// DataLoss (a manifest field of the wrong type too: the error names the field), a full disk
// ResourceExhausted; no exception escapes. All I/O goes through `fs` (core/file_system.h), so
// tests can inject faults into saving and loading alike. Functions block on disk I/O. Calls for
// different checkpoint directories may run concurrently; for one directory, WriteRankShard calls
// for distinct ranks may, and nothing may run concurrently with CommitCheckpoint or
// PruneCheckpoints.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"
#include "runtime/checkpoint/checkpoint_shard.h"

namespace hoist::runtime {

// "step_00000042" (at least 8 digits).
std::string CheckpointStepDirName(int64_t step);

// The manifest_xxh64 that `manifest` (a parsed manifest.json) must carry, for tools and tests
// that rewrite a manifest on purpose. InvalidArgument when a string in it is not UTF-8.
StatusOr<std::string> CheckpointManifestChecksum(const nlohmann::json& manifest);

// Writes this rank's shard of `step` into <dir>/.tmp_step_<08d>/rank_<05d>.bin, creating the
// directories as needed and replacing a shard a crashed earlier attempt left there. On error
// (ResourceExhausted for a full disk) the partial file is removed, and the staging directory
// too if nothing else is in it; committed steps and `latest` are never touched.
Status WriteRankShard(const std::string& dir, int64_t step, int rank,
                      std::span<const CheckpointBlob> blobs, FileSystem& fs = FileSystem::Posix());
// The same with blobs produced piece by piece after `blobs` (checkpoint_shard.h).
Status WriteRankShard(const std::string& dir, int64_t step, int rank,
                      std::span<const CheckpointBlob> blobs, const StreamedBlobs& streamed,
                      FileSystem& fs = FileSystem::Posix());

// Publishes `step`: checks the indexes of the world_size staged shards, writes the manifest
// with `metadata` (a JSON object: run identity, the stored config's reference, loss, ...),
// renames the staging directory to <dir>/step_<08d> (atomically replacing an existing one of the
// same step), points `latest` at it, and removes staging directories of earlier steps. On error the
// staging directory is removed and `latest` keeps naming the previous checkpoint.
Status CommitCheckpoint(const std::string& dir, int64_t step, int world_size,
                        const nlohmann::json& metadata, FileSystem& fs = FileSystem::Posix());

// The path of the step directory `latest` names. Without `latest`, the newest complete step
// directory (its manifest intact, every shard there at its size), with a notice. NotFound when
// there is no checkpoint (no directory, or neither `latest` nor a step directory); DataLoss when
// `latest` is unreadable or names a missing directory, or when no step directory is complete,
// so that a damaged pointer or lost checkpoints are not mistaken for a fresh start.
StatusOr<std::string> FindLatestCheckpoint(const std::string& dir,
                                           FileSystem& fs = FileSystem::Posix());

// Removes all but the `keep_last` (>= 1) highest step directories, never the one `latest`
// names, and staging directories of steps at or before that one.
Status PruneCheckpoints(const std::string& dir, int keep_last,
                        FileSystem& fs = FileSystem::Posix());

// One rank's view of a committed step. Open checks the manifest, this rank's shard size and
// index checksum against it; each Read checks its blob's checksum. Movable, not copyable; owns
// the open shard. Const methods are safe to call from several threads at once.
class CheckpointReader {
 public:
  static StatusOr<CheckpointReader> Open(const std::string& step_dir, int rank,
                                         FileSystem& fs = FileSystem::Posix());

  const nlohmann::json& metadata() const { return metadata_; }
  int64_t step() const { return step_; }
  int world_size() const { return world_size_; }
  const std::string& step_dir() const { return step_dir_; }

  // The blobs of this rank's shard, in file order.
  const std::vector<ShardBlobEntry>& blobs() const { return index_.blobs; }
  // Copies blob `name` into `data`, which must be exactly the blob's size. A missing blob is
  // NotFound, a size mismatch FailedPrecondition, a checksum mismatch DataLoss; each names the
  // blob and the file. On error `data` is not to be used.
  Status Read(const std::string& name, void* data, int64_t bytes) const;
  // A reader of blob `name` in pieces (for blobs too large to read whole), with Read's checks of
  // the name and the size up front and the checksum checked by BlobReader::Finish. This reader
  // must outlive the BlobReader and stay where it is.
  StatusOr<BlobReader> OpenBlob(const std::string& name, int64_t bytes) const;
  // Bytes [offset, offset + count) of blob `name`, which must be `bytes` long (Read's checks of the
  // name and size), for a reader that needs only part of it. The checksum is not checked here:
  // check it with Verify before trusting what was read.
  Status ReadRange(const std::string& name, int64_t bytes, int64_t offset, void* data,
                   int64_t count) const;
  // Reads blob `name` (`bytes` long) through in pieces of a few MiB and checks its checksum: Ok,
  // or Read's errors.
  Status Verify(const std::string& name, int64_t bytes) const;

 private:
  // The entry of blob `name`, which must be `bytes` long (the errors Read describes).
  StatusOr<const ShardBlobEntry*> Find(const std::string& name, int64_t bytes) const;
  CheckpointReader(std::string step_dir, ShardFile shard, ShardIndex index)
      : step_dir_(std::move(step_dir)), shard_(std::move(shard)), index_(std::move(index)) {}

  std::string step_dir_;
  ShardFile shard_;
  ShardIndex index_;
  std::unordered_map<std::string, size_t> blob_by_name_;
  nlohmann::json metadata_;
  int64_t step_ = 0;
  int world_size_ = 0;
};

}  // namespace hoist::runtime
