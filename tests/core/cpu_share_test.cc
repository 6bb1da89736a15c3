// Sharing a machine's cores among the ranks on it: the cores a process may use (its affinity
// mask and its cgroup's CPU quota, v2 and v1, from fake cgroup files) and each rank's threads.
#include "core/cpu_share.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hoist {
namespace {

namespace fs = std::filesystem;

TEST(ThreadsPerRank, AnEqualShareAndAtLeastOne) {
  EXPECT_EQ(ThreadsPerRank(2, 2), 1);
  EXPECT_EQ(ThreadsPerRank(16, 4), 4);
  EXPECT_EQ(ThreadsPerRank(16, 3), 5);
  EXPECT_EQ(ThreadsPerRank(2, 3), 1);  // oversubscribed: still one each
  EXPECT_EQ(ThreadsPerRank(8, 1), 8);
  EXPECT_EQ(ThreadsPerRank(8, 0), 8);
}

TEST(UsableCores, TheAffinityMaskCappedByTheQuota) {
  EXPECT_EQ(UsableCores({.affinity_cpus = 8, .quota_cpus = -1, .quota_path = ""}), 8);
  EXPECT_EQ(UsableCores({.affinity_cpus = 8, .quota_cpus = 2.5, .quota_path = "q"}), 2);
  EXPECT_EQ(UsableCores({.affinity_cpus = 2, .quota_cpus = 16, .quota_path = "q"}), 2);
  EXPECT_EQ(UsableCores({.affinity_cpus = 8, .quota_cpus = 0.5, .quota_path = "q"}), 1);
  EXPECT_EQ(UsableCores({.affinity_cpus = 0, .quota_cpus = -1, .quota_path = ""}), 1);
  EXPECT_EQ(DescribeCores({.affinity_cpus = 8, .quota_cpus = 2.5, .quota_path = "/cg/job"}),
            "2 cores (the CPU quota of /cg/job)");
  EXPECT_EQ(DescribeCores({.affinity_cpus = 1, .quota_cpus = -1, .quota_path = ""}), "1 core");
}

class FakeCgroup {
 public:
  explicit FakeCgroup(const std::string& name)
      : root_(fs::path(::testing::TempDir()) / ("hoist_cpu_share_" + name)) {
    fs::remove_all(root_);
    fs::create_directories(root_ / "cgroup");
    sources_.self_cgroup = (root_ / "self_cgroup").string();
    sources_.cgroup_root = (root_ / "cgroup").string();
  }
  ~FakeCgroup() { fs::remove_all(root_); }
  void Write(const std::string& relative, const std::string& text) {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  const CpuLimitSources& sources() const { return sources_; }
  std::string Dir(const std::string& relative) const { return (root_ / relative).string(); }

 private:
  fs::path root_;
  CpuLimitSources sources_;
};

TEST(ReadCpuLimits, CgroupV2CpuMaxOfTheTightestAncestor) {
  FakeCgroup fake("v2");
  fake.Write("self_cgroup", "0::/job/step\n");
  fake.Write("cgroup/job/step/cpu.max", "max 100000\n");
  fake.Write("cgroup/job/cpu.max", "150000 100000\n");
  const CpuLimits limits = ReadCpuLimits(fake.sources());
  EXPECT_GT(limits.affinity_cpus, 0);
  EXPECT_DOUBLE_EQ(limits.quota_cpus, 1.5);
  EXPECT_EQ(limits.quota_path, fake.Dir("cgroup/job"));
}

TEST(ReadCpuLimits, CgroupV1CfsQuota) {
  FakeCgroup fake("v1");
  fake.Write("self_cgroup", "4:memory:/x\n3:cpu,cpuacct:/batch\n0::/\n");
  fake.Write("cgroup/cpu/batch/cpu.cfs_quota_us", "300000\n");
  fake.Write("cgroup/cpu/batch/cpu.cfs_period_us", "100000\n");
  fake.Write("cgroup/cpu/cpu.cfs_quota_us", "-1\n");
  fake.Write("cgroup/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_DOUBLE_EQ(ReadCpuLimits(fake.sources()).quota_cpus, 3.0);
}

TEST(ReadCpuLimits, NoQuotaIsNone) {
  FakeCgroup fake("none");
  fake.Write("self_cgroup", "0::/\n");
  fake.Write("cgroup/cpu.max", "max 100000\n");
  EXPECT_EQ(ReadCpuLimits(fake.sources()).quota_cpus, -1);
}

}  // namespace
}  // namespace hoist
