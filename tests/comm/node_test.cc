#include "comm/node.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/comm/comm_test_util.h"

namespace hoist::comm {
namespace {

using testing::ExpectAllOk;
using testing::MakeGroup;
using testing::RunRanks;

constexpr double kTimeoutS = 5.0;

std::vector<Status> Refuse(const std::vector<std::string>& names) {
  auto group = MakeGroup(static_cast<int>(names.size()), kTimeoutS);
  return RunRanks(*group, [&](int rank, Communicator& comm) {
    return RefuseSharedResource(comm, names[rank], "the GPU");
  });
}

TEST(RefuseSharedResource, DistinctNamesPass) {
  ExpectAllOk(Refuse({"0000:3b:00.0 on a", "0000:5e:00.0 on a", "0000:3b:00.0 on b"}));
}

TEST(RefuseSharedResource, RanksUsingNothingNeverClash) {
  ExpectAllOk(Refuse({"", "", "0000:3b:00.0 on a", ""}));
}

TEST(RefuseSharedResource, TheRanksSharingANameAreRefusedNamingEachOther) {
  const std::vector<Status> results =
      Refuse({"0000:3b:00.0 on a", "0000:5e:00.0 on a", "0000:3b:00.0 on a"});
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
  ASSERT_EQ(results[0].code(), StatusCode::kUnavailable);
  EXPECT_EQ(results[0].message(), "rank 0 and rank 2 would both use the GPU 0000:3b:00.0 on a");
  ASSERT_EQ(results[2].code(), StatusCode::kUnavailable);
  EXPECT_NE(results[2].message().find("rank 2 and rank 0"), std::string::npos)
      << results[2].message();
}

TEST(RefuseSharedResource, NamesAreComparedOnTheirFirst255Bytes) {
  const std::string long_name(300, 'x');
  // Differing only past byte 255: taken as the same.
  const std::vector<Status> results = Refuse({long_name + "a", long_name + "b"});
  EXPECT_EQ(results[0].code(), StatusCode::kUnavailable);
  EXPECT_EQ(results[1].code(), StatusCode::kUnavailable);
  // Differing at byte 254: told apart.
  std::string near = std::string(254, 'x') + "y";
  ExpectAllOk(Refuse({std::string(255, 'x'), near}));
}

TEST(RefuseSharedResource, OneRankHasNothingToShare) { ExpectAllOk(Refuse({"0000:3b:00.0 on a"})); }

// The ranks here are threads of one process on one machine; a thread's affinity is its own.
std::vector<int> SharingCpus(int ranks, const std::function<void(int rank)>& before) {
  auto group = MakeGroup(ranks, kTimeoutS);
  std::vector<int> sharing(static_cast<size_t>(ranks), -1);
  ExpectAllOk(RunRanks(*group, [&](int rank, Communicator& comm) -> Status {
    before(rank);
    HOIST_ASSIGN_OR_RETURN(sharing[static_cast<size_t>(rank)], CountRanksSharingCpus(comm));
    return Status::Ok();
  }));
  return sharing;
}

TEST(CountRanksSharingCpus, UnboundRanksOfAMachineShareItsCores) {
  EXPECT_EQ(SharingCpus(3, [](int) {}), (std::vector<int>{3, 3, 3}));
}

TEST(CountRanksSharingCpus, RanksBoundToCoresOfTheirOwnShareWithNoOne) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.size() < 2) GTEST_SKIP() << "this process may run on one CPU only";
  // As mpirun --bind-to core does: rank r on cpus[r].
  EXPECT_EQ(SharingCpus(2,
                        [&](int rank) {
                          cpu_set_t mine;
                          CPU_ZERO(&mine);
                          CPU_SET(cpus[static_cast<size_t>(rank)], &mine);
                          ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine), 0);
                        }),
            (std::vector<int>{1, 1}));
}

}  // namespace
}  // namespace hoist::comm
