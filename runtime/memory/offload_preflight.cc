#include "runtime/memory/offload_preflight.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/logging.h"
#include "core/memory_tracker.h"
#include "offload/block_storage.h"
#include "offload/scratch_file.h"
#include "offload/state_swapper.h"
#include "zero/memory_estimate.h"

namespace hoist::runtime {
namespace {

// "2 scratch files (3.00 GiB): hoist-rank1-4242.optimizer.swp (1.50 GiB, process 4242 still
// runs), ...", naming the first few.
std::string DescribeScratchFiles(const std::vector<offload::FoundScratchFile>& files) {
  constexpr size_t kNamed = 8;
  int64_t total = 0;
  for (const offload::FoundScratchFile& file : files) total += file.size_bytes;
  std::string text = std::to_string(files.size()) + " scratch file" +
                     (files.size() == 1 ? "" : "s") + " (" + FormatBytes(total) + "): ";
  for (size_t i = 0; i < files.size() && i < kNamed; ++i) {
    const offload::FoundScratchFile& file = files[i];
    text += (i > 0 ? ", " : "") + file.path + " (" + FormatBytes(file.size_bytes) +
            (file.kept_because.empty() ? "" : ", " + file.kept_because) + ")";
  }
  if (files.size() > kNamed) text += " and " + std::to_string(files.size() - kNamed) + " more";
  return text;
}

}  // namespace

StatusOr<OffloadFootprint> OffloadFootprintPerRank(const std::vector<zero::UnitSpec>& units,
                                                   const zero::ZeroOptions& options, int world_size,
                                                   int rank, bool accelerator) {
  // What the engine will hold from its creation on, in the places offload puts it.
  HOIST_ASSIGN_OR_RETURN(const zero::EngineMemoryEstimate engine,
                         zero::EstimateEngineMemory(units, options, world_size, rank,
                                                    zero::LayerwisePasses(int(units.size())),
                                                    /*micro_batches=*/1, accelerator));
  OffloadFootprint footprint;
  footprint.pinned_bytes = engine.ResidentTotal(Place::kHostPinned);
  footprint.host_bytes = engine.ResidentTotal(Place::kHost);
  footprint.optimizer_file_bytes = engine.Resident(Place::kNvme, Category::kOptimizer);
  footprint.param_file_bytes = engine.Resident(Place::kNvme, Category::kParam);
  return footprint;
}

Status CheckHostMemory(const OffloadFootprint& per_rank, int local_ranks, int64_t max_host_bytes,
                       const HostMemory& host) {
  const int64_t rank_bytes = per_rank.pinned_bytes + per_rank.host_bytes;
  if (rank_bytes == 0) return Status::Ok();
  const int64_t node_bytes = rank_bytes * local_ranks;
  std::ostringstream need;
  need << "offloading (with cpu_checkpointing's block inputs) needs "
       << FormatBytesExactly(node_bytes) << " of host memory on this node (" << local_ranks
       << (local_ranks == 1 ? " rank" : " ranks") << " x " << FormatBytes(rank_bytes) << ": "
       << FormatBytes(per_rank.pinned_bytes) << " pinned, " << FormatBytes(per_rank.host_bytes)
       << " pageable)";
  const std::string lower =
      "; lower it by offloading the optimizer to nvme instead of cpu "
      "(zero_optimization.offload_optimizer.device), by a smaller "
      "zero_optimization.sub_group_size or offload_optimizer.buffer_count for nvme, by keeping "
      "checkpointed activations on the device (activation_checkpointing.cpu_checkpointing), or by "
      "spreading the job over more nodes";
  if (max_host_bytes > 0 && node_bytes > max_host_bytes) {
    return ResourceExhaustedError(need.str() + " but offload.max_host_bytes allows " +
                                  FormatBytesExactly(max_host_bytes) + lower +
                                  ", or raise offload.max_host_bytes");
  }
  return CheckNodeBytes(node_bytes, host, need.str(), lower);
}

Status CheckNvmePath(const std::string& path, const std::string& key, int64_t bytes_needed,
                     const NvmeCheckOptions& options) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return NotFoundError(key + " \"" + path + "\" does not exist; create the directory or set " +
                           key + " to one that exists");
    }
    return FailedPreconditionError(key + " \"" + path +
                                   "\" cannot be examined: " + offload::ErrnoText(err));
  }
  if (!S_ISDIR(info.st_mode)) {
    return FailedPreconditionError(key + " \"" + path +
                                   "\" is not a directory; set it to the directory that should "
                                   "hold the scratch files");
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return FailedPreconditionError(key + " \"" + path + "\" is not writable by this user (" +
                                   offload::ErrnoText(errno) +
                                   "); fix its permissions or choose another directory");
  }
  // O_DIRECT: a probe file, created and removed at once.
  // Unique across processes and across the ranks that share one (threads in tests).
  static std::atomic<int64_t> probes{0};
  const std::string probe = path + "/.hoist-probe-" + std::to_string(getpid()) + "-" +
                            std::to_string(probes.fetch_add(1));
  const int fd = options.simulate_no_direct_io
                     ? (errno = EINVAL, -1)
                     : open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_DIRECT, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL) {
      return FailedPreconditionError(
          key + " \"" + path +
          "\" is on a file system without O_DIRECT (tmpfs and some network file systems); "
          "offloaded states bypass the page cache, so point " +
          key + " at a local disk (ext4, xfs)");
    }
    return FailedPreconditionError(key + " \"" + path + "\": cannot create a file there (" +
                                   offload::ErrnoText(err) + ")");
  }
  close(fd);
  unlink(probe.c_str());
  // Ranks killed with SIGKILL leave their whole offloaded state here; across restarts those files
  // would fill the disk. Every local rank sweeps: one of them removes each file, and the others
  // wait on its lock until it has, so no rank measures the free space before the removal.
  std::vector<offload::FoundScratchFile> left;
  const std::vector<offload::FoundScratchFile> removed = offload::SweepScratchFiles(path, &left);
  if (!removed.empty()) {
    HOIST_LOG(WARN) << "offload: removed " << DescribeScratchFiles(removed)
                    << " that ended processes left in " << key << " \"" << path << "\"";
  }
  int64_t free_bytes = options.simulate_free_bytes;
  if (free_bytes < 0) {
    struct statvfs fs {};
    if (statvfs(path.c_str(), &fs) != 0) {
      return FailedPreconditionError(key + " \"" + path + "\": cannot read its free space (" +
                                     offload::ErrnoText(errno) + ")");
    }
    free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  }
  if (free_bytes < bytes_needed) {
    // Files of other hoist processes are the first place to look for the space.
    const std::string others =
        left.empty() ? "" : "; " + DescribeScratchFiles(left) + " of other processes are there";
    return ResourceExhaustedError(key + " \"" + path + "\" has " + FormatBytesExactly(free_bytes) +
                                  " free but the job's scratch files there need " +
                                  FormatBytesExactly(bytes_needed) + others +
                                  "; free space, choose a larger disk, or spread the job over "
                                  "more nodes");
  }
  return Status::Ok();
}

}  // namespace hoist::runtime
