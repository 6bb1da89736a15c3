#include "core/cpu_share.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hoist {
namespace {

// Walks from `dir` up to `base` (included), calling `at` on each directory.
template <typename At>
void UpFrom(std::string dir, const std::string& base, At at) {
  while (true) {
    at(dir);
    if (dir.size() <= base.size()) return;
    const size_t slash = dir.rfind('/');
    dir = (slash == std::string::npos || slash < base.size()) ? base : dir.substr(0, slash);
  }
}

double ReadNumber(const std::string& path) {
  std::ifstream in(path);
  double value = 0;
  return (in >> value) ? value : -1;
}

}  // namespace

std::vector<CgroupMembership> ReadSelfCgroup(const std::string& self_cgroup) {
  std::vector<CgroupMembership> out;
  std::ifstream cgroup(self_cgroup);
  for (std::string line; std::getline(cgroup, line);) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    out.push_back({controllers, path});
  }
  return out;
}

CpuLimits ReadCpuLimits(const CpuLimitSources& sources) {
  CpuLimits limits;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) limits.affinity_cpus = CPU_COUNT(&mask);
  auto consider = [&](double cpus, const std::string& dir) {
    if (cpus > 0 && (limits.quota_cpus < 0 || cpus < limits.quota_cpus)) {
      limits.quota_cpus = cpus;
      limits.quota_path = dir;
    }
  };
  for (const auto& [controllers, path] : ReadSelfCgroup(sources.self_cgroup)) {
    if (controllers.empty()) {
      // v2: cpu.max is "QUOTA PERIOD" or "max PERIOD".
      UpFrom(sources.cgroup_root + path, sources.cgroup_root, [&](const std::string& dir) {
        std::ifstream in(dir + "/cpu.max");
        std::string quota;
        double period = 0;
        if (in >> quota >> period && quota != "max" && period > 0) {
          consider(std::atof(quota.c_str()) / period, dir);
        }
      });
      continue;
    }
    std::stringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name != "cpu") continue;
      // v1: the controller is mounted as cpu (often a link to cpu,cpuacct); quota -1: none.
      const std::string base = sources.cgroup_root + "/cpu";
      UpFrom(base + path, base, [&](const std::string& dir) {
        const double quota = ReadNumber(dir + "/cpu.cfs_quota_us");
        const double period = ReadNumber(dir + "/cpu.cfs_period_us");
        if (quota > 0 && period > 0) consider(quota / period, dir);
      });
    }
  }
  return limits;
}

int UsableCores(const CpuLimits& limits) {
  int cores = limits.affinity_cpus > 0 ? limits.affinity_cpus : 1;
  if (limits.quota_cpus > 0) {
    cores = std::min(cores, static_cast<int>(std::floor(limits.quota_cpus)));
  }
  return std::max(1, cores);
}

int ThreadsPerRank(int cores, int ranks) { return std::max(1, cores / std::max(1, ranks)); }

std::string DescribeCores(const CpuLimits& limits) {
  const int cores = UsableCores(limits);
  std::string text = std::to_string(cores) + (cores == 1 ? " core" : " cores");
  if (limits.quota_cpus > 0 && cores < limits.affinity_cpus) {
    text += " (the CPU quota of " + limits.quota_path + ")";
  }
  return text;
}

}  // namespace hoist
