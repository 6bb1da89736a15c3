#include "runtime/interchange/export_staging.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "core/posix_error.h"

namespace hoist::runtime {

namespace {

constexpr std::string_view kStagingTag = ".hoist-export-";
constexpr std::string_view kSetAsideTag = ".hoist-replaced-";
// An earlier export kept because files were added to it during the swap; never swept.
constexpr std::string_view kKeptTag = ".hoist-kept-";

// The pid that ends `entry` when it is ".<name><tag><pid>", else 0.
int64_t SiblingPid(std::string_view entry, const std::string& name, std::string_view tag) {
  const std::string prefix = "." + name + std::string(tag);
  if (!entry.starts_with(prefix)) return 0;
  entry.remove_prefix(prefix.size());
  int64_t pid = 0;
  const auto [end, error] = std::from_chars(entry.data(), entry.data() + entry.size(), pid);
  if (error != std::errc() || end != entry.data() + entry.size() || pid <= 0) return 0;
  return pid;
}

// Whether what process `pid` left can go: it has ended, or it is this process (an export of
// ours that failed without cleaning up, or a pid reused since).
bool LeftByEndedExport(int64_t pid) {
  if (pid == ::getpid()) return true;
  return pid > INT_MAX || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
}

Status SubdirectoryRefused(const std::string& target, const std::string& entry) {
  return FailedPreconditionError(
      "export to " + target + ": it holds the directory '" + entry +
      "', which the export cannot keep: an export replaces the directory whole (so that a "
      "failure leaves the earlier export intact), carrying over only its files; move '" +
      entry + "' out of " + target + ", or export to a new directory");
}

// Refuses a target holding directories (a hard link cannot carry one over). A name that cannot
// be examined (a dangling symbolic link) is linked like a file.
Status CheckCarriable(FileSystem& fs, const std::string& target,
                      const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) {
    StatusOr<FileInfo> info = fs.Stat(target + "/" + entry);
    if (info.ok() && info->type == FileType::kDirectory) {
      return SubdirectoryRefused(target, entry);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<StagedExportDir> StagedExportDir::Begin(const std::string& target_text, FileSystem& fs) {
  std::error_code error;
  std::filesystem::path target = std::filesystem::absolute(target_text, error);
  if (error) return PosixError("export: absolute path of", target_text, error.value());
  target = target.lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/", "."
  // The swap renames the target's last name: a symbolic link there would be replaced by a
  // directory, the earlier export left in the link's target, and the staging directory made in
  // the link's parent, perhaps another file system. The export goes to where the links lead.
  std::filesystem::path resolved = std::filesystem::weakly_canonical(target, error);
  if (error) {
    return PosixError("export: resolving the symbolic links of", target_text, error.value());
  }
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(resolved, error))) {
    return FailedPreconditionError(
        "export to " + target_text + ": it is a symbolic link to " +
        std::filesystem::read_symlink(resolved, error).string() +
        ", which does not exist; create that directory or remove the link");
  }
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(target, error))) {
    HOIST_LOG(INFO) << "export: " << target.string() << " is a symbolic link to "
                    << resolved.string() << "; exporting there";
  }
  target = resolved;
  if (!target.has_filename() || target.filename() == "..") {
    return InvalidArgumentError("export to " + target_text +
                                ": an export replaces its directory whole, so it needs a "
                                "directory with a parent; name a new directory inside it");
  }
  const std::string target_path = target.string();
  const std::string name = target.filename().string();
  const std::string parent = target.parent_path().string();
  const std::string pid = std::to_string(::getpid());

  StatusOr<FileInfo> info = fs.Stat(target_path);
  if (!info.ok() && info.status().code() != StatusCode::kNotFound) {
    return info.status().WithContext("export to " + target_path);
  }
  bool present = info.ok();
  if (present && info->type != FileType::kDirectory) {
    return FailedPreconditionError("export to " + target_path +
                                   ": it is a file, and this format writes a directory; remove "
                                   "it or choose another --output");
  }
  HOIST_RETURN_IF_ERROR(fs.CreateDirs(parent).WithContext("export to " + target_path));

  // What exports killed part-way left beside the target.
  HOIST_ASSIGN_OR_RETURN(const std::vector<std::string> siblings, fs.ListDirectory(parent));
  for (const std::string& entry : siblings) {
    const std::string path = parent + "/" + entry;
    const int64_t set_aside = SiblingPid(entry, name, kSetAsideTag);
    if (set_aside != 0 && LeftByEndedExport(set_aside)) {
      if (!present) {
        // A two-rename swap cut short between its renames: the earlier export goes back.
        HOIST_RETURN_IF_ERROR(fs.Rename(path, target_path)
                                  .WithContext("export to " + target_path +
                                               ": putting back the earlier export from " + path));
        present = true;
        HOIST_LOG(WARN) << "export: put back " << target_path << " from " << path
                        << ", where an export killed while replacing it had left it";
      } else {
        HOIST_RETURN_IF_ERROR(fs.RemoveAll(path).WithContext(
            "export to " + target_path + ": removing an earlier export left in " + path));
      }
    }
    const int64_t staging = SiblingPid(entry, name, kStagingTag);
    if (staging != 0 && LeftByEndedExport(staging)) {
      HOIST_RETURN_IF_ERROR(fs.RemoveAll(path).WithContext(
          "export to " + target_path + ": removing what a failed export left in " + path));
    }
  }
  if (present) {
    HOIST_ASSIGN_OR_RETURN(const std::vector<std::string> entries, fs.ListDirectory(target_path));
    HOIST_RETURN_IF_ERROR(CheckCarriable(fs, target_path, entries));
  }
  std::string staging = parent + "/." + name + std::string(kStagingTag) + pid;
  HOIST_RETURN_IF_ERROR(fs.CreateDirs(staging).WithContext(
      "export to " + target_path + ": the new export is written beside it first, in " + staging +
      ", so that a failure leaves the earlier one intact"));
  return StagedExportDir(fs, target_path, std::move(staging),
                         parent + "/." + name + std::string(kSetAsideTag) + pid);
}

StagedExportDir::StagedExportDir(StagedExportDir&& other) noexcept
    : fs_(other.fs_),
      target_(std::move(other.target_)),
      staging_(std::move(other.staging_)),
      set_aside_(std::move(other.set_aside_)),
      committed_(std::exchange(other.committed_, true)) {}

StagedExportDir::~StagedExportDir() {
  if (committed_ || staging_.empty()) return;
  Status removed = fs_->RemoveAll(staging_);
  if (!removed.ok()) {
    HOIST_LOG(WARN) << "export: could not remove the unfinished export in " << staging_ << " ("
                    << removed.message() << "); the next export to " << target_
                    << " removes it, or remove it by hand";
  }
}

Status StagedExportDir::Commit(const std::function<bool(std::string_view name)>& is_stale) {
  HOIST_CHECK(!committed_) << "StagedExportDir::Commit twice for " << target_;
  const std::string parent = std::filesystem::path(target_).parent_path().string();
  const std::string context = "export to " + target_;
  StatusOr<FileInfo> info = fs_->Stat(target_);
  const bool present = info.ok();
  // What the earlier export held when its entries were carried over (linked), replaced or left
  // as stale: all that may go with it.
  std::set<std::string> accounted;
  if (present) {
    HOIST_ASSIGN_OR_RETURN(const std::vector<std::string> written, fs_->ListDirectory(staging_));
    const std::set<std::string> new_names(written.begin(), written.end());
    HOIST_ASSIGN_OR_RETURN(const std::vector<std::string> entries, fs_->ListDirectory(target_));
    accounted.insert(entries.begin(), entries.end());
    HOIST_RETURN_IF_ERROR(CheckCarriable(*fs_, target_, entries));
    for (const std::string& entry : entries) {
      if (new_names.count(entry) != 0 || is_stale(entry)) continue;
      Status linked = fs_->Link(target_ + "/" + entry, staging_ + "/" + entry);
      if (!linked.ok()) {
        return Status(linked.code(), context + ": could not keep its file '" + entry +
                                         "' in the new export (" + linked.message() +
                                         "); move it out of " + target_ +
                                         ", or export to a new directory");
      }
    }
  }
  HOIST_RETURN_IF_ERROR(fs_->SyncDir(staging_).WithContext(context));
  // The swap: the new export takes the target's name in one step; the earlier one ends up in
  // `earlier` and goes last.
  std::string earlier;
  if (!present) {
    HOIST_RETURN_IF_ERROR(fs_->Rename(staging_, target_).WithContext(context));
  } else {
    Status exchanged = fs_->Exchange(staging_, target_);
    if (exchanged.ok()) {
      earlier = staging_;
    } else if (exchanged.code() == StatusCode::kUnimplemented) {
      // Two renames: a kill between them leaves the earlier export whole under set_aside_,
      // which the next Begin puts back.
      HOIST_RETURN_IF_ERROR(fs_->Rename(target_, set_aside_).WithContext(context));
      Status renamed = fs_->Rename(staging_, target_);
      if (!renamed.ok()) {
        (void)fs_->Rename(set_aside_, target_);
        return renamed.WithContext(context);
      }
      earlier = set_aside_;
    } else {
      return exchanged.WithContext(context + " (the earlier export is unchanged; is " + target_ +
                                   " a mount point? then export to a directory inside it)");
    }
  }
  committed_ = true;
  HOIST_RETURN_IF_ERROR(fs_->SyncDir(parent).WithContext(context));
  if (earlier.empty()) return Status::Ok();
  // Files added to the target after the listing above (by another program, during the swap)
  // are in `earlier` only: it is kept, out of the way of the next export's cleanup.
  StatusOr<std::vector<std::string>> now = fs_->ListDirectory(earlier);
  std::string added;
  if (now.ok()) {
    for (const std::string& entry : *now) {
      if (accounted.count(entry) == 0) added += (added.empty() ? "'" : ", '") + entry + "'";
    }
  }
  if (!added.empty()) {
    const std::filesystem::path target_path(target_);
    const std::string kept = parent + "/." + target_path.filename().string() +
                             std::string(kKeptTag) + std::to_string(::getpid());
    const bool moved = fs_->Rename(earlier, kept).ok();
    HOIST_LOG(WARN) << "export: the new export is in " << target_ << ", but " << added
                    << " appeared in the earlier one while it was being replaced; the earlier "
                       "export is kept in "
                    << (moved ? kept : earlier) << ": move those files where they belong and "
                    << "remove it" << (moved ? "" : " before the next export to " + target_);
    return Status::Ok();
  }
  Status removed = fs_->RemoveAll(earlier);
  if (!removed.ok()) {
    HOIST_LOG(WARN) << "export: the new export is in " << target_
                    << ", but the earlier one could not be removed from " << earlier << " ("
                    << removed.message() << "); the next export there removes it, or remove it "
                    << "by hand";
  }
  return Status::Ok();
}

}  // namespace hoist::runtime
