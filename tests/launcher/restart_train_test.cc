// `hoist launch --max-restarts` with a real two-rank `hoist train` whose rank 1 is killed with
// SIGKILL: the launcher stops rank 0, starts both ranks again with --resume, and the losses
// equal those of a run never interrupted. Without restarts left, or when the job was stopped by
// a signal, nothing starts again.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/launcher/background_hoist.h"
#include "tests/launcher/launch_test_util.h"
#include "tests/launcher/run_hoist.h"
#include "tests/launcher/train_job_util.h"

namespace hoist::launcher {
namespace {

namespace fs = std::filesystem;
using testing::Background;
using testing::Contains;
using testing::JobSets;
using testing::ReadLog;
using testing::ShellArgs;
using testing::TrainArgs;
using testing::WaitForSteps;

// The launcher's child with RANK=`rank` in its environment; -1 if none.
pid_t RankPid(pid_t launcher, int rank) {
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) +
                         "/children");
  for (pid_t child; children >> child;) {
    std::ifstream environ_file("/proc/" + std::to_string(child) + "/environ");
    for (std::string entry; std::getline(environ_file, entry, '\0');) {
      if (entry == "RANK=" + std::to_string(rank)) return child;
    }
  }
  return -1;
}

// `hoist launch -n 2 LAUNCH_FLAGS -- train ...` for `steps` steps, checkpointing every 2.
std::vector<std::string> LaunchArgs(const fs::path& dir, const std::vector<std::string>& flags,
                                    int64_t steps) {
  std::vector<std::string> args = {"launch", "-n", "2"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  std::vector<std::string> sets = JobSets(dir, "log_{rank}.jsonl", steps);
  sets.push_back("checkpoint.interval_steps=2");
  const std::vector<std::string> train = TrainArgs(sets);
  args.insert(args.end(), train.begin(), train.end());
  return args;
}

// Kills rank `rank` of `job` with `signal_number` once rank 1 has logged `steps` steps.
void KillRankAfter(Background& job, const fs::path& dir, size_t steps, int rank,
                   int signal_number) {
  ASSERT_TRUE(WaitForSteps(job, dir / "log_1.jsonl", steps)) << job.err();
  const pid_t pid = RankPid(job.pid(), rank);
  ASSERT_GT(pid, 0) << "rank " << rank << " of launcher " << job.pid() << " not found";
  ASSERT_EQ(::kill(pid, signal_number), 0);
}

constexpr int64_t kSteps = 40;

TEST(RestartTrain, KilledRankIsRestartedFromTheCheckpointAndLossesMatch) {
  const fs::path dir = testing::TempDir("hoist_restart_train_", "restart");
  const fs::path ref = dir / "ref";
  fs::create_directories(ref);
  const testing::CommandResult reference =
      testing::RunHoist(ShellArgs(LaunchArgs(ref, {}, kSteps)), ref);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::map<int64_t, float> expected = ReadLog(ref / "log_0.jsonl").losses;
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));

  Background job(dir, LaunchArgs(dir, {"--max-restarts", "1"}, kSteps));
  KillRankAfter(job, dir, 5, 1, SIGKILL);
  ASSERT_EQ(job.Wait(300), 0) << job.err();
  const std::string err = job.err();
  EXPECT_TRUE(Contains(err,
                       "restart 1 of 1: rank 1 was killed by signal 9 (SIGKILL); starting "
                       "all 2 ranks again with --resume"))
      << err;
  // The restarted ranks resumed from a checkpoint rather than from the start.
  EXPECT_TRUE(std::regex_search(err, std::regex("resum(ed|ing) from .*step_0*[1-9]"))) << err;

  const std::map<int64_t, float> losses = ReadLog(dir / "log_0.jsonl").losses;
  ASSERT_EQ(losses.size(), expected.size()) << err;
  for (const auto& [step, loss] : expected) {
    ASSERT_EQ(losses.count(step), 1u) << "step " << step;
    EXPECT_EQ(losses.at(step), loss) << "step " << step;
  }
}

TEST(RestartTrain, AfterTheLastRestartTheFailingRanksCodeIsTheLaunchers) {
  const fs::path dir = testing::TempDir("hoist_restart_train_", "used_up");
  Background job(dir, LaunchArgs(dir, {"--max-restarts", "1"}, 1000000));
  KillRankAfter(job, dir, 3, 1, SIGKILL);
  // The restarted rank 1 appends to its log: wait for the restart's line, then for new steps.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!Contains(job.err(), "restart 1 of 1") && job.Wait(0) == -1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(Contains(job.err(), "restart 1 of 1")) << job.err();
  pid_t restarted = -1;
  while (restarted <= 0 && job.Wait(0) == -1 && std::chrono::steady_clock::now() < deadline) {
    restarted = RankPid(job.pid(), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(restarted, 0) << job.err();
  ASSERT_EQ(::kill(restarted, SIGKILL), 0);
  ASSERT_EQ(job.Wait(120), 128 + SIGKILL) << job.err();
  EXPECT_TRUE(Contains(job.err(),
                       "all 1 restarts (--max-restarts) are used; exiting with its "
                       "code 137"))
      << job.err();
  EXPECT_FALSE(Contains(job.err(), "restart 2")) << job.err();
}

TEST(RestartTrain, WithoutMaxRestartsAKilledRankEndsTheJob) {
  const fs::path dir = testing::TempDir("hoist_restart_train_", "none");
  Background job(dir, LaunchArgs(dir, {}, 1000000));
  KillRankAfter(job, dir, 3, 1, SIGKILL);
  ASSERT_EQ(job.Wait(120), 128 + SIGKILL) << job.err();
  EXPECT_TRUE(Contains(job.err(), "rank 1 (pid")) << job.err();
  EXPECT_FALSE(Contains(job.err(), "restart 1 of")) << job.err();
}

TEST(RestartTrain, AStopBySigtermIsNotRestarted) {
  const fs::path dir = testing::TempDir("hoist_restart_train_", "stop");
  Background job(dir, LaunchArgs(dir, {"--max-restarts", "3"}, 1000000));
  ASSERT_TRUE(WaitForSteps(job, dir / "log_1.jsonl", 3)) << job.err();
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  ASSERT_EQ(job.Wait(120), 128 + SIGTERM) << job.err();
  EXPECT_TRUE(Contains(job.err(), "got SIGTERM; forwarding it")) << job.err();
  EXPECT_FALSE(Contains(job.err(), "restart 1 of")) << job.err();
}

// Sends `signal_number` to rank 1 alone of a job with restarts left: every rank stops at the
// same step (the one that got it checkpoints and says why), the launcher exits 128 + the number,
// and nothing restarts.
void ExpectARankStoppedDirectlyIsNotRestarted(int signal_number, const std::string& name) {
  const fs::path dir = testing::TempDir("hoist_restart_train_", "rank_stop_" + name);
  Background job(dir, LaunchArgs(dir, {"--max-restarts", "3"}, 1000000));
  KillRankAfter(job, dir, 3, 1, signal_number);
  ASSERT_EQ(job.Wait(120), 128 + signal_number) << job.err();
  EXPECT_TRUE(Contains(job.err(), "exited with code " + std::to_string(128 + signal_number)))
      << job.err();
  EXPECT_FALSE(Contains(job.err(), "restart 1 of")) << job.err();
  const testing::Log rank1 = ReadLog(dir / "log_1.jsonl");
  ASSERT_TRUE(rank1.end.is_object()) << job.err();
  EXPECT_TRUE(Contains(rank1.end.value("stopped", ""), "stopped by " + name)) << rank1.end.dump();
  EXPECT_NE(testing::Latest(dir / "ck"), "") << job.err();
}

// A scheduler may signal every process of a job itself (Slurm does): a rank stopped by SIGTERM
// exits 143 after its checkpoint, and that is a stop too.
TEST(RestartTrain, ARankStoppedBySigtermDirectlyIsNotRestarted) {
  ExpectARankStoppedDirectlyIsNotRestarted(SIGTERM, "SIGTERM");
}

// SIGHUP sent to one rank (its terminal closed) is a stop as well: every rank checkpoints, exits
// 129, and nothing restarts (issue 35: the rank died of it and the launcher restarted the job).
TEST(RestartTrain, ARankStoppedBySighupDirectlyIsNotRestarted) {
  ExpectARankStoppedDirectlyIsNotRestarted(SIGHUP, "SIGHUP");
}

}  // namespace
}  // namespace hoist::launcher
