#include "runtime/memory/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "comm/agree.h"
#include "comm/node.h"
#include "core/cpu_share.h"
#include "core/memory_tracker.h"

namespace hoist::runtime {
namespace {

// v1 reports "no limit" as the largest page-aligned counter (9223372036854771712); anything
// this large is no limit.
constexpr int64_t kUnlimited = int64_t{1} << 60;

// The first integer of a one-line file; -1 for "max", a missing file or text that is not one.
int64_t ReadValue(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    size_t used = 0;
    const int64_t value = std::stoll(text, &used);
    return used == text.size() ? value : -1;
  } catch (...) {
    return -1;
  }
}

// The value of `key` in a "key value" file such as memory.stat; 0 when absent.
int64_t ReadStat(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string name;
  int64_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

struct CgroupLevel {
  std::string dir;
  int64_t free = -1;
};

// The tightest allowance from `dir` up to `base` (the hierarchy's root, included): at each level
// the limit less the usage, the reclaimable page cache not counted as used.
CgroupLevel TightestFrom(std::string dir, const std::string& base, const char* limit_file,
                         const char* usage_file, const char* inactive_key) {
  CgroupLevel tightest;
  while (true) {
    const int64_t limit = ReadValue(dir + "/" + limit_file);
    const int64_t usage = ReadValue(dir + "/" + usage_file);
    if (limit >= 0 && limit < kUnlimited && usage >= 0) {
      const int64_t inactive = ReadStat(dir + "/memory.stat", inactive_key);
      const int64_t used = std::max<int64_t>(0, usage - inactive);
      const int64_t free = std::max<int64_t>(0, limit - used);
      if (tightest.free < 0 || free < tightest.free) tightest = {dir, free};
    }
    if (dir.size() <= base.size()) break;
    const size_t slash = dir.rfind('/');
    if (slash == std::string::npos || slash < base.size()) {
      dir = base;
    } else {
      dir.resize(slash);
    }
  }
  return tightest;
}

}  // namespace

HostMemory ReadHostMemory(const HostMemorySources& sources) {
  HostMemory host;
  host.mem_available = HostMemAvailableBytes(sources.meminfo).value_or(-1);
  // One line per hierarchy, "ID:CONTROLLERS:PATH": v2's is "0::PATH", v1's memory controller
  // has "memory" among its controllers.
  std::vector<CgroupLevel> found;
  for (const auto& [controllers, path] : ReadSelfCgroup(sources.self_cgroup)) {
    if (controllers.empty()) {
      const std::string& base = sources.cgroup_root;
      found.push_back(
          TightestFrom(base + path, base, "memory.max", "memory.current", "inactive_file"));
      continue;
    }
    std::stringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name != "memory") continue;
      const std::string base = sources.cgroup_root + "/memory";
      found.push_back(TightestFrom(base + path, base, "memory.limit_in_bytes",
                                   "memory.usage_in_bytes", "total_inactive_file"));
    }
  }
  for (const CgroupLevel& level : found) {
    if (level.free >= 0 && (host.cgroup_free < 0 || level.free < host.cgroup_free)) {
      host.cgroup_free = level.free;
      host.cgroup_path = level.dir;
    }
  }
  return host;
}

Status CheckNodeBytes(int64_t node_bytes, const HostMemory& host, const std::string& need,
                      const std::string& lower) {
  if (host.mem_available >= 0 && node_bytes > host.mem_available) {
    return ResourceExhaustedError(need + " but the host has only " +
                                  FormatBytesExactly(host.mem_available) +
                                  " available (MemAvailable)" + lower);
  }
  if (host.cgroup_free >= 0 && node_bytes > host.cgroup_free) {
    return ResourceExhaustedError(need + " but the cgroup " + host.cgroup_path + " allows only " +
                                  FormatBytesExactly(host.cgroup_free) +
                                  " more (its memory limit less its usage)" + lower +
                                  ", or raise the job's memory limit");
  }
  return Status::Ok();
}

Status CheckJobHostMemory(const MemoryEstimate& estimate, int local_ranks, const HostMemory& host) {
  const int64_t device = estimate.PeakTotal(Place::kDevice);
  const int64_t pageable = estimate.PeakTotal(Place::kHost);
  const int64_t pinned = estimate.PeakTotal(Place::kHostPinned);
  const int64_t rank_bytes = device + pageable + pinned;
  const int64_t node_bytes = rank_bytes * local_ranks;
  std::ostringstream need;
  need << "the job needs " << FormatBytesExactly(node_bytes) << " of memory on this node ("
       << local_ranks << (local_ranks == 1 ? " rank" : " ranks") << " x " << FormatBytes(rank_bytes)
       << ": " << FormatBytes(device) << " for the model's states and activations on the CPU, "
       << FormatBytes(pageable + pinned) << " of host buffers; `hoist estimate` shows the parts)";
  const std::string lower =
      "; lower it with a higher zero_optimization.stage over more ranks, by offloading the "
      "optimizer states (zero_optimization.offload_optimizer.device nvme), a smaller "
      "train_micro_batch_size_per_gpu (with more gradient_accumulation_steps), activation "
      "checkpointing (activation_checkpointing.policy), bf16, a smaller model, or fewer ranks "
      "on this node; `hoist plan --memory BYTES` finds settings that fit";
  return CheckNodeBytes(node_bytes, host, need.str(), lower);
}

Status PreflightJobHostMemory(const Config& config, comm::Communicator& comm,
                              const HostMemory* host) {
  HOIST_ASSIGN_OR_RETURN(const comm::NodeCounts nodes, comm::CountRanksPerNode(comm));
  Status local = Status::Ok();
  const StatusOr<MemoryEstimate> estimate = EstimateMemory(config, comm.world_size());
  if (estimate.ok()) {
    local = CheckJobHostMemory(*estimate, nodes.on_this_node,
                               host != nullptr ? *host : ReadHostMemory());
  }
  return comm::AgreeOnStatus(comm, local);
}

}  // namespace hoist::runtime
