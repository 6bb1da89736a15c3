// Before an offloaded job allocates anything: what offloading will take from the host and the
// disk, and whether this node can give it. DeepSpeed users meet an OOM-killed host or a disk that
// fills mid-run (its issues #1891, #3000, #5290); hoist refuses to start instead, with the
// numbers and the setting to change.
//
// Host memory: every rank on the node needs the same offload footprint (the shards are equal),
// so the node needs local_ranks x footprint, compared with MemAvailable, with the cgroup's
// remaining allowance (runtime/memory/host_memory.h: cgroup v2 or v1, where a limit is set) and
// with offload.max_host_bytes when set. Disk: nvme_path must be an existing, writable directory on
// a file system that takes O_DIRECT, with room for every local rank's scratch file.
//
// Pure functions over their inputs except CheckNvmePath, which looks at the system; all
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/memory/host_memory.h"
#include "zero/partition.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {

// One rank's offload bytes, by where they live.
struct OffloadFootprint {
  // Page-locked host buffers: states under cpu, swapper slots, and (added by the trainer)
  // cpu_checkpointing's block inputs.
  int64_t pinned_bytes = 0;
  int64_t host_bytes = 0;            // pageable host memory (cpu with pin_memory false)
  int64_t optimizer_file_bytes = 0;  // scratch file under offload_optimizer.nvme_path
  int64_t param_file_bytes = 0;      // scratch file under offload_param.nvme_path
};

// For the engine that ZeroEngine::Create(units, options, ...) builds on `rank` of `world_size`:
// its resident host and file bytes (zero/memory_estimate.h, the engine's own sizing). Errors:
// what the engine would refuse for these options.
// `accelerator`: the engine's backend cannot operate on host memory (a GPU's), which adds the
// offloaded update's pinned staging.
StatusOr<OffloadFootprint> OffloadFootprintPerRank(const std::vector<zero::UnitSpec>& units,
                                                   const zero::ZeroOptions& options, int world_size,
                                                   int rank, bool accelerator = false);

// ResourceExhausted when local_ranks x the footprint's host and pinned bytes exceed what `host`
// offers or `max_host_bytes` (> 0) allows; the message gives the bytes needed (per rank and for
// the node), the bytes available and which setting would lower the need.
Status CheckHostMemory(const OffloadFootprint& per_rank, int local_ranks, int64_t max_host_bytes,
                       const HostMemory& host);

struct NvmeCheckOptions {
  bool simulate_no_direct_io = false;  // for tests: behave as though open(O_DIRECT) failed
  int64_t simulate_free_bytes = -1;    // for tests: the file system's free bytes
};

// Checks that `path` (named in messages as `key`, e.g.
// "zero_optimization.offload_optimizer.nvme_path") can hold `bytes_needed` bytes of scratch
// files: it exists, is a directory, is writable, takes O_DIRECT (probed with a file created and
// removed at once) and has that much free space once the scratch files of ended processes are
// swept from it (offload::SweepScratchFiles, each removal logged). NotFound, FailedPrecondition
// or ResourceExhausted naming the path, what is needed and what is free, and the scratch files of
// other processes still there.
Status CheckNvmePath(const std::string& path, const std::string& key, int64_t bytes_needed,
                     const NvmeCheckOptions& options = {});

}  // namespace hoist::runtime
