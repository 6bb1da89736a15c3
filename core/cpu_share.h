// How many cores this process may run on, and how many threads each of the ranks that share
// them should take: ranks on one machine that each start as many OpenMP threads as it has cores
// spin against each other (on 2 cores, two ranks of 2 threads took 60-150 times longer per step
// than two of 1).
//
// The cores: the CPUs of this process's affinity mask (what taskset, numactl, mpirun's or srun's
// binding and a cpuset cgroup leave it), fewer where the cgroup's CPU quota (v2 cpu.max, v1
// cpu.cfs_quota_us / cpu.cfs_period_us, the tightest of its cgroup and their parents) allows
// fewer. ReadCpuLimits reads the system (its cgroup files injectable); the rest are pure. All
// thread-safe.
#pragma once

#include <string>
#include <vector>

namespace hoist {

struct CpuLimits {
  int affinity_cpus = 0;   // CPUs in the affinity mask; 0: unknown
  double quota_cpus = -1;  // the cgroup's CPU quota in CPUs (quota / period); -1: none
  std::string quota_path;  // the cgroup directory that sets it, for messages
};

struct CpuLimitSources {
  std::string self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";  // v2's hierarchy; v1's cpu controller below it
};

CpuLimits ReadCpuLimits(const CpuLimitSources& sources = {});

// The hierarchies of /proc/self/cgroup (or a file of its format), one per line
// "ID:CONTROLLERS:PATH": v2's has no controllers; the root's path is "" (not "/").
struct CgroupMembership {
  std::string controllers;  // comma-separated (v1), or empty (v2)
  std::string path;
};
std::vector<CgroupMembership> ReadSelfCgroup(const std::string& self_cgroup);

// The whole cores this process may keep busy: the affinity mask's CPUs, at most the quota
// rounded down; at least 1.
int UsableCores(const CpuLimits& limits);

// Threads for each of `ranks` ranks that share `cores` cores: an equal share, at least 1.
int ThreadsPerRank(int cores, int ranks);

// "2 cores" or "2 cores (the CPU quota of /sys/fs/cgroup/job)", for the one line that says how
// the cores were shared.
std::string DescribeCores(const CpuLimits& limits);

}  // namespace hoist
