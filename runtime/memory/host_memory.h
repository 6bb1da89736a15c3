// What host memory a node can give a job, and whether a CPU job fits in it before it allocates:
// an oversized job is refused with the numbers instead of being killed by the kernel's OOM
// killer part-way through its set-up.
//
// The readings: /proc/meminfo's MemAvailable and the tightest cgroup memory limit of this
// process's cgroup and its ancestors, in cgroup v2 (memory.max, memory.current) or v1
// (memory.limit_in_bytes, memory.usage_in_bytes); the page cache the kernel can reclaim
// (inactive_file in memory.stat) counts as free. The files are injectable for tests.
//
// ReadHostMemory reads files; everything else is a pure function. All thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/memory/memory_estimate.h"

namespace hoist::runtime {

// What the host can give. -1: unknown or unlimited.
struct HostMemory {
  int64_t mem_available = -1;  // /proc/meminfo MemAvailable
  int64_t cgroup_free = -1;    // the cgroup's limit less what it uses, at the tightest level
  std::string cgroup_path;     // that cgroup's directory, for messages
};

// Where ReadHostMemory looks.
struct HostMemorySources {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  // The cgroup file system: v2's unified hierarchy, or v1's controllers below it (memory/).
  std::string cgroup_root = "/sys/fs/cgroup";
};

// Missing or unreadable files leave fields at -1; never an error.
HostMemory ReadHostMemory(const HostMemorySources& sources = {});

// Before a job whose compute device is the CPU allocates: `local_ranks` ranks of `estimate` on
// this node hold their device, host and pinned host bytes (the estimate's peak_total) in the
// node's memory at once. ResourceExhausted, with the bytes needed per rank and for the node, the
// bytes available, and the settings that lower the need, when `host` cannot hold that.
Status CheckJobHostMemory(const MemoryEstimate& estimate, int local_ranks, const HostMemory& host);

// `node_bytes` against the readings: Ok, or kResourceExhausted of `need` ("the job needs ...")
// with the reading it passes and `lower` ("; lower it with ...").
Status CheckNodeBytes(int64_t node_bytes, const HostMemory& host, const std::string& need,
                      const std::string& lower);

// Collective over `comm`, the job's ranks: estimates `config` for them, counts the ranks on each
// node and checks each node's readings (`host`, or ReadHostMemory() when null); every rank
// returns the same outcome, a refusal naming the rank that found it. A config the estimate
// cannot size passes: the engine refuses it with its own reason.
Status PreflightJobHostMemory(const Config& config, comm::Communicator& comm,
                              const HostMemory* host);

}  // namespace hoist::runtime
