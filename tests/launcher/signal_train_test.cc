// SIGTERM, as a scheduler preempting a job sends it, to a real `hoist train` (alone and under
// `hoist launch`): every rank checkpoints at the step boundary, the process exits 143 (128 +
// SIGTERM), the JSONL end record says so, and `--resume` continues the exact losses of the run
// that was never interrupted.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
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

TEST(SignalTrain, SigtermCheckpointsExits143AndResumeContinuesTheLosses) {
  const fs::path dir = testing::TempDir("hoist_signal_train_", "one");

  Background job(dir, TrainArgs(JobSets(dir, "log_{rank}.jsonl", 1000000)));
  ASSERT_TRUE(WaitForSteps(job, dir / "log_0.jsonl", 3)) << job.err();
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  ASSERT_EQ(job.Wait(60), 128 + SIGTERM) << job.err();

  const Log stopped = ReadLog(dir / "log_0.jsonl");
  ASSERT_TRUE(stopped.end.is_object()) << job.err();
  const int64_t step = stopped.end["steps"];
  ASSERT_GE(step, 3);
  const std::string reason = stopped.end.value("stopped", "");
  EXPECT_TRUE(Contains(reason, "SIGTERM")) << reason;
  EXPECT_TRUE(Contains(reason, "exit code 143")) << reason;
  const std::string latest = Latest(dir / "ck");
  ASSERT_FALSE(latest.empty()) << "no checkpoint was written on SIGTERM: " << job.err();
  EXPECT_TRUE(Contains(reason, latest)) << reason;
  EXPECT_TRUE(fs::exists(dir / "ck" / latest / "rank_00000.bin")) << latest;
  EXPECT_TRUE(Contains(job.out(), "stopped by SIGTERM")) << job.out();

  ExpectResumeContinuesTheLosses(dir, step);
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
  const std::string launch = " launch -n 2 --";

  std::vector<std::string> args = {"launch", "-n", "2", "--"};
  const std::vector<std::string> train = TrainArgs(JobSets(dir, "log_{rank}.jsonl", 1000000));
  args.insert(args.end(), train.begin(), train.end());
  Background job(dir, args);
  ASSERT_TRUE(WaitForSteps(job, dir / "log_1.jsonl", 3)) << job.err();
  ASSERT_EQ(::kill(job.pid(), SIGTERM), 0);
  ASSERT_EQ(job.Wait(60), 128 + SIGTERM) << job.err();
  EXPECT_TRUE(Contains(job.err(), "got SIGTERM; forwarding it")) << job.err();
  EXPECT_TRUE(Contains(job.err(), "exited with code 143 (stopped by the forwarded SIGTERM)"))
      << job.err();

  const Log rank0 = ReadLog(dir / "log_0.jsonl"), rank1 = ReadLog(dir / "log_1.jsonl");
  ASSERT_TRUE(rank0.end.is_object() && rank1.end.is_object()) << job.err();
  EXPECT_EQ(rank0.end["steps"], rank1.end["steps"]);
  const std::string latest = Latest(dir / "ck");
  ASSERT_FALSE(latest.empty()) << job.err();
  EXPECT_TRUE(fs::exists(dir / "ck" / latest / "rank_00001.bin")) << latest;

  ExpectResumeContinuesTheLosses(dir, rank0.end["steps"].get<int64_t>(), launch);
}

}  // namespace
}  // namespace hoist::launcher
