// Backend choice of CreateWorldCommunicator and its errors.
#include "comm/world.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace hoist::comm {
namespace {

RankEnv Launched(const char* source, int rank, int world_size) {
  RankEnv env;
  env.source = source;
  env.rank = rank;
  env.world_size = world_size;
  return env;
}

TEST(World, SingleRankGetsASelfCommunicatorWithWorkingCollectives) {
  auto comm = CreateWorldCommunicator(RankEnv{}, WorldOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->world_size(), 1);
  std::vector<float> x = {1.5f, -2.0f};
  ASSERT_TRUE((*comm)->AllReduce(x.data(), 2, DType::kFloat32, ReduceOp::kAvg).ok());
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.0f}));
  std::vector<float> gathered(2, 0.0f);
  CommHandle h = (*comm)->AllGatherAsync(x.data(), gathered.data(), 2, DType::kFloat32);
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_EQ(gathered, x);
}

TEST(World, UnknownBackendIsRejectedNamingTheChoices) {
  WorldOptions options;
  options.backend = "nccl";
  auto comm = CreateWorldCommunicator(RankEnv{}, options);
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("auto, mpi, shm"), std::string::npos)
      << comm.status().message();
}

TEST(World, NonPositiveTimeoutIsRejected) {
  WorldOptions options;
  options.timeout_s = 0;
  EXPECT_EQ(CreateWorldCommunicator(RankEnv{}, options).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(World, HoistLaunchWithoutJobIdSaysHowToLaunch) {
  unsetenv("HOIST_JOB_ID");
  auto comm = CreateWorldCommunicator(Launched("hoist launch", 0, 2), WorldOptions{});
  EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(comm.status().message().find("HOIST_JOB_ID"), std::string::npos)
      << comm.status().message();
  EXPECT_NE(comm.status().message().find("hoist launch -n 2"), std::string::npos)
      << comm.status().message();
}

TEST(World, RanksOnSeveralNodesAreRefusedByTheSharedMemoryBackend) {
  setenv("HOIST_JOB_ID", "world-test", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  auto comm = CreateWorldCommunicator(Launched("hoist launch", 0, 4), WorldOptions{});
  unsetenv("LOCAL_WORLD_SIZE");
  unsetenv("HOIST_JOB_ID");
  EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(comm.status().message().find("one node only"), std::string::npos)
      << comm.status().message();
}

TEST(World, HoistLaunchSingleRankOfAPairUsesSharedMemory) {
  // Rank 0 alone creates the segment and returns; a collective would wait for rank 1.
  const std::string job = "world-test-" + std::to_string(getpid());
  setenv("HOIST_JOB_ID", job.c_str(), 1);
  WorldOptions options;
  options.timeout_s = 0.05;
  auto comm = CreateWorldCommunicator(Launched("hoist launch", 0, 2), options);
  unsetenv("HOIST_JOB_ID");
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  Status s = (*comm)->Barrier();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("did not arrive: 1"), std::string::npos) << s.message();
}

TEST(World, MpiLauncherWithoutMpiBuildSaysWhatToInstall) {
  if (HaveMpiBackend()) GTEST_SKIP() << "this build has MPI; the error is for builds without it";
  auto comm = CreateWorldCommunicator(Launched("Slurm", 0, 2), WorldOptions{});
  EXPECT_EQ(comm.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(comm.status().message().find("install-deps --mpi"), std::string::npos)
      << comm.status().message();
}

}  // namespace
}  // namespace hoist::comm
