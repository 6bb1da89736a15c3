// SIGTERM, as a scheduler preempting a job sends it, to a real `hoist train` (alone and under
// `hoist launch`): every rank checkpoints at the step boundary, the process exits 143 (128 +
// SIGTERM), the JSONL end record says so, and `--resume` continues the exact losses of the run
// that was never interrupted. SIGHUP (a closed terminal) does the same and exits 129.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
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
using testing::Latest;
using testing::Log;
using testing::ReadLog;
using testing::ShellArgs;
using testing::TrainArgs;
using testing::WaitForSteps;

// The losses (rank 0's log) of `steps` steps never interrupted, run in `dir`/ref; `launch`: the
// `hoist launch` arguments before the train command, "" for one rank alone.
std::map<int64_t, float> ReferenceLosses(const fs::path& dir, int64_t steps,
                                         const std::string& launch = "") {
  const fs::path ref = dir / "ref";
  fs::create_directories(ref);
  const testing::CommandResult run = testing::RunHoist(
      launch + ShellArgs(TrainArgs(JobSets(ref, "log_{rank}.jsonl", steps))), ref);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return ReadLog(ref / "log_0.jsonl").losses;
}

// Resumes the job stopped at step `stopped` for a few more steps and checks rank 0's log, from
// the first step on, against the run that was never interrupted.
void ExpectResumeContinuesTheLosses(const fs::path& dir, int64_t stopped,
                                    const std::string& launch = "") {
  const int64_t steps = stopped + 4;
  const std::map<int64_t, float> reference = ReferenceLosses(dir, steps, launch);
  ASSERT_EQ(reference.size(), static_cast<size_t>(steps));
  const testing::CommandResult resumed = testing::RunHoist(
      launch + ShellArgs(TrainArgs(JobSets(dir, "log_{rank}.jsonl", steps))) + " --resume", dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const Log continued = ReadLog(dir / "log_0.jsonl");
  ASSERT_EQ(continued.losses.size(), reference.size());
  for (const auto& [step, loss] : reference) {
    ASSERT_EQ(continued.losses.count(step), 1u) << "step " << step;
    EXPECT_EQ(continued.losses.at(step), loss) << "step " << step;
  }
}

// Sends `signal_number` (named `name`) to `job`, `ranks` ranks of `hoist train` alone or under
// `hoist launch`, once the last rank has logged 3 steps, and checks that it exits 128 + the
// number after every rank stopped at the same step with a checkpoint of it, which the end record
// names. Returns that step, -1 after a failure.
int64_t StopAndExpectCheckpoint(Background& job, const fs::path& dir, int signal_number,
                                const std::string& name, int ranks) {
  const auto log_of = [&](int rank) { return dir / ("log_" + std::to_string(rank) + ".jsonl"); };
  if (!WaitForSteps(job, log_of(ranks - 1), 3)) {
    ADD_FAILURE() << "no 3 steps: " << job.err();
    return -1;
  }
  EXPECT_EQ(::kill(job.pid(), signal_number), 0);
  EXPECT_EQ(job.Wait(60), 128 + signal_number) << job.err();
  const Log rank0 = ReadLog(log_of(0));
  if (!rank0.end.is_object()) {
    ADD_FAILURE() << "no end record: " << job.err();
    return -1;
  }
  const int64_t step = rank0.end["steps"];
  for (int r = 1; r < ranks; ++r) EXPECT_EQ(ReadLog(log_of(r)).end["steps"], step) << r;
  const std::string reason = rank0.end.value("stopped", "");
  EXPECT_TRUE(Contains(
      reason, "stopped by " + name + " (exit code " + std::to_string(128 + signal_number) + ")"))
      << reason;
  const std::string latest = Latest(dir / "ck");
  EXPECT_FALSE(latest.empty()) << "no checkpoint was written on " << name << ": " << job.err();
  EXPECT_TRUE(Contains(reason, latest)) << reason;
  for (int r = 0; r < ranks; ++r) {
    char shard[32];
    std::snprintf(shard, sizeof(shard), "rank_%05d.bin", r);
    EXPECT_TRUE(fs::exists(dir / "ck" / latest / shard)) << latest << "/" << shard;
  }
  return step;
}

// `hoist launch -n 2 -- train ...`, logging to `dir`.
std::vector<std::string> LaunchTwo(const fs::path& dir) {
  std::vector<std::string> args = {"launch", "-n", "2", "--"};
  const std::vector<std::string> train = TrainArgs(JobSets(dir, "log_{rank}.jsonl", 1000000));
  args.insert(args.end(), train.begin(), train.end());
  return args;
}

TEST(SignalTrain, SigtermCheckpointsExits143AndResumeContinuesTheLosses) {
  const fs::path dir = testing::TempDir("hoist_signal_train_", "one");
  Background job(dir, TrainArgs(JobSets(dir, "log_{rank}.jsonl", 1000000)));
  const int64_t step = StopAndExpectCheckpoint(job, dir, SIGTERM, "SIGTERM", 1);
  ASSERT_GE(step, 3);
  EXPECT_TRUE(Contains(job.out(), "stopped by SIGTERM")) << job.out();
  ExpectResumeContinuesTheLosses(dir, step);
}

// SIGHUP is a closed terminal or ssh session: the job stops as on SIGTERM, with a checkpoint, and
// exits 129 (issue 35: it died at once, without one).
TEST(SignalTrain, SighupCheckpointsAndExits129) {
  const fs::path dir = testing::TempDir("hoist_signal_train_", "hup");
  Background job(dir, TrainArgs(JobSets(dir, "log_{rank}.jsonl", 1000000)));
  EXPECT_GE(StopAndExpectCheckpoint(job, dir, SIGHUP, "SIGHUP", 1), 3);
}

TEST(SignalTrain, OnSignalFalseStopsWithoutACheckpoint) {
  const fs::path dir = testing::TempDir("hoist_signal_train_", "off");
  std::vector<std::string> sets = JobSets(dir, "log.jsonl", 1000000);
  sets.push_back("checkpoint.on_signal=false");
  Background job(dir, TrainArgs(sets));
  ASSERT_TRUE(WaitForSteps(job, dir / "log.jsonl", 2)) << job.err();
  ASSERT_EQ(::kill(job.pid(), SIGINT), 0);
  ASSERT_EQ(job.Wait(60), 128 + SIGINT) << job.err();
  EXPECT_EQ(Latest(dir / "ck"), "");
  const std::string reason = ReadLog(dir / "log.jsonl").end.value("stopped", "");
  EXPECT_TRUE(Contains(reason, "stopped by SIGINT (exit code 130)")) << reason;
  EXPECT_FALSE(Contains(reason, "checkpoint")) << reason;
}

// The launcher forwards SIGTERM to both ranks; both checkpoint the same step and exit 143, and
// so does the launcher.
TEST(SignalTrain, LaunchedJobCheckpointsOnSigtermAndReportsIt) {
  const fs::path dir = testing::TempDir("hoist_signal_train_", "launch");
  Background job(dir, LaunchTwo(dir));
  const int64_t step = StopAndExpectCheckpoint(job, dir, SIGTERM, "SIGTERM", 2);
  ASSERT_GE(step, 3);
  EXPECT_TRUE(Contains(job.err(), "got SIGTERM; forwarding it")) << job.err();
  EXPECT_TRUE(Contains(job.err(), "exited with code 143 (stopped by the forwarded SIGTERM)"))
      << job.err();
  ExpectResumeContinuesTheLosses(dir, step, " launch -n 2 --");
}

// A closed terminal sends SIGHUP to the launcher, which forwards it: both ranks checkpoint the
// same step and exit 129, and so does the launcher.
TEST(SignalTrain, LaunchedJobCheckpointsOnSighupAndReportsIt) {
  const fs::path dir = testing::TempDir("hoist_signal_train_", "launch_hup");
  Background job(dir, LaunchTwo(dir));
  EXPECT_GE(StopAndExpectCheckpoint(job, dir, SIGHUP, "SIGHUP", 2), 3);
  EXPECT_TRUE(Contains(job.err(), "exited with code 129 (stopped by the forwarded SIGHUP)"))
      << job.err();
}

}  // namespace
}  // namespace hoist::launcher
