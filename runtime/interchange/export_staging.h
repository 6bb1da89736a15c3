// An export directory replaced whole: the new export is written into a staging directory beside
// the target (same parent, so one file system) and swapped in with one atomic exchange at the
// end, so that a full disk, a failure or a kill -9 at any point leaves the earlier export or the
// new one, each whole, never a mixture or neither (an in-place re-export once left config.json
// and 4 of 7 shards with no index).
//
//   HOIST_ASSIGN_OR_RETURN(StagedExportDir staged, StagedExportDir::Begin(out_dir, fs));
//   ... write every file into staged.path() ...
//   HOIST_RETURN_IF_ERROR(staged.Commit(is_stale));
//
// Entries of the earlier directory that the new export does not write (a tokenizer, a README)
// are carried over as hard links; those `is_stale` names (an earlier export's weights) go with
// the earlier export, after the new one is in place. A directory inside the target cannot be
// carried over and is refused before anything is written. Not thread-safe; blocks on the file
// system.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/file_system.h"
#include "core/status.h"

namespace hoist::runtime {

class StagedExportDir {
 public:
  // Starts an export to the directory `target` (created with its parents when missing; a
  // symbolic link is followed, and the directory it leads to is replaced, the link kept). First
  // clears what killed exports to the same target left beside it: their staging directories, and
  // an earlier export set aside by a swap that was cut short (put back when the target is
  // missing). Errors name the target and what to do: a file where the directory should be, a
  // subdirectory inside it, a parent that cannot be written.
  static StatusOr<StagedExportDir> Begin(const std::string& target, FileSystem& fs);

  // Removes the staging directory unless Commit succeeded.
  ~StagedExportDir();
  StagedExportDir(StagedExportDir&& other) noexcept;
  StagedExportDir& operator=(StagedExportDir&&) = delete;
  StagedExportDir(const StagedExportDir&) = delete;
  StagedExportDir& operator=(const StagedExportDir&) = delete;

  // Where the new export's files go (empty at Begin).
  const std::string& path() const { return staging_; }
  const std::string& target() const { return target_; }

  // Makes the staging directory the target: carries over the earlier target's other entries,
  // exchanges the two directories atomically (renameat2; two renames where the file system
  // cannot, a cut-short swap then being repaired by the next Begin), makes that durable and
  // removes the earlier export, unless files appeared in it after they were carried over: then
  // it is kept as <parent>/.<name>.hoist-kept-<pid>, with a warning naming them. A failure
  // before the exchange leaves the target as it was.
  Status Commit(const std::function<bool(std::string_view name)>& is_stale);

 private:
  StagedExportDir(FileSystem& fs, std::string target, std::string staging, std::string set_aside)
      : fs_(&fs),
        target_(std::move(target)),
        staging_(std::move(staging)),
        set_aside_(std::move(set_aside)) {}

  FileSystem* fs_;
  std::string target_;
  std::string staging_;    // <parent>/.<name>.hoist-export-<pid>
  std::string set_aside_;  // <parent>/.<name>.hoist-replaced-<pid>: the earlier export mid-swap
  bool committed_ = false;
};

}  // namespace hoist::runtime
