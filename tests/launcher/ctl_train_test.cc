// `hoist ctl` against a real `hoist train` (one rank, and two under `hoist launch`): pausing
// holds the step, resuming continues it, a checkpoint and an lr set through the service land in
// the job, and a stop ends every rank with exit code 0.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/launcher/background_hoist.h"
#include "tests/launcher/ctl_test_util.h"
#include "tests/launcher/launch_test_util.h"

extern char** environ;

namespace hoist::launcher {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using testing::CtlResult;
using testing::RunCtl;

#if HOIST_HAVE_GRPC

using testing::Background;

// A small job that would run far longer than any test: the tests end it with a stop.
std::vector<std::string> JobArgs(const fs::path& dir) {
  std::vector<std::string> args = {"train"};
  for (const std::string set :
       {"model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.seq_len=32",
        "train_batch_size=8", "train_micro_batch_size_per_gpu=4",
        "gradient_accumulation_steps=null", "train.steps=1000000",
        "scheduler.params.total_num_steps=1000000", "scheduler.params.warmup_num_steps=2",
        "train.eval_interval=0", "steps_per_print=0", "checkpoint.interval_steps=0",
        "control.enabled=true", "control.port=0"}) {
    args.insert(args.end(), {"--set", set});
  }
  args.insert(args.end(), {"--set", "checkpoint.dir=" + (dir / "ck").string(), "--set",
                           "monitor.jsonl.path=" + (dir / "log_{rank}.jsonl").string()});
  return args;
}

// `hoist ctl`'s flags for the job: its address and its checkpoint.dir, where the job wrote its
// token.
std::string Target(const std::string& address, const fs::path& dir) {
  return "--addr " + address + " --checkpoint-dir '" + (dir / "ck").string() + "'";
}

// The job's status through `hoist ctl status --json`; null when the call failed.
nlohmann::json Status(const std::string& target) {
  CtlResult r = RunCtl(target + " --json status");
  if (r.exit_code != 0) {
    ADD_FAILURE() << r.all;
    return nullptr;
  }
  return nlohmann::json::parse(r.out);
}

// Polls the status until `pred` holds (up to 60 s); the last status seen.
template <typename Pred>
nlohmann::json StatusWhen(const std::string& target, Pred pred) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  nlohmann::json status = Status(target);
  while (!status.is_null() && !pred(status) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = Status(target);
  }
  return status;
}

void ExpectOk(const CtlResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 0) << what << ": " << r.all;
}

// Pausing holds the step on every rank; resuming continues it.
void PauseAndResume(const std::string& target) {
  ExpectOk(RunCtl(target + " pause"), "pause");
  const nlohmann::json paused =
      StatusWhen(target, [](const nlohmann::json& s) { return s["state"] == "paused"; });
  ASSERT_EQ(paused["state"], "paused");
  const int64_t held = paused["step"];
  // Time passes (several steps' worth) and the step does not move.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const nlohmann::json still = Status(target);
  EXPECT_EQ(still["state"], "paused");
  EXPECT_EQ(still["step"], held);
  ExpectOk(RunCtl(target + " resume"), "resume");
  const nlohmann::json moving = StatusWhen(
      target, [held](const nlohmann::json& s) { return s["step"].get<int64_t>() >= held + 3; });
  EXPECT_EQ(moving["state"], "running");
  EXPECT_GE(moving["step"].get<int64_t>(), held + 3);
}

TEST(CtlTrain, PauseResumeCheckpointSetAndStopAOneRankJob) {
  const fs::path dir = testing::TempDir("hoist_ctl_train_", "one");
  Background job(dir, JobArgs(dir));
  const std::string address = job.ControlAddress();
  ASSERT_FALSE(address.empty()) << job.err();
  EXPECT_THAT(address, ::testing::StartsWith("127.0.0.1:"));
  const std::string target = Target(address, dir);
  StatusWhen(target, [](const nlohmann::json& s) { return s["step"].get<int64_t>() >= 2; });

  // On loopback too, only who can read the job's token file may steer it.
  const fs::path token = dir / "ck" / "control.token";
  EXPECT_EQ(fs::status(token).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_THAT(job.err(), HasSubstr("token in " + token.string()));
  CtlResult without = RunCtl("--addr " + address + " stop", "HOIST_CONTROL_TOKEN=");
  EXPECT_EQ(without.exit_code, 1) << without.all;
  EXPECT_THAT(without.all,
              AllOf(HasSubstr("stop failed: UNAUTHENTICATED"), HasSubstr(token.string())));

  PauseAndResume(target);

  // A checkpoint through the service is a real step directory.
  CtlResult checkpoint = RunCtl(target + " --json checkpoint");
  ExpectOk(checkpoint, "checkpoint");
  const std::string path = nlohmann::json::parse(checkpoint.out)["path"];
  EXPECT_TRUE(fs::exists(fs::path(path) / "rank_00000.bin")) << path;

  // The lr set through the service is the one the next steps train with.
  ExpectOk(RunCtl(target + " set lr=1.5e-4 gradient_clipping=0.25"), "set");
  const nlohmann::json after = Status(target);
  // The ranks agree on the value in float, the precision the trainer computes in.
  EXPECT_NEAR(after["lr_override"].get<double>(), 1.5e-4, 1.5e-4 * 1e-6);
  EXPECT_DOUBLE_EQ(after["gradient_clipping"].get<double>(), 0.25);
  const int64_t set_at = after["step"];
  StatusWhen(target, [set_at](const nlohmann::json& s) { return s["step"] > set_at + 2; });

  ExpectOk(RunCtl(target + " stop"), "stop");
  ASSERT_EQ(job.Wait(60), 0) << job.err();
  EXPECT_THAT(job.err(), HasSubstr("stopped by the control service"));
  EXPECT_FALSE(fs::exists(token));  // the token dies with its job

  std::ifstream log(dir / "log_0.jsonl");
  int checked = 0;
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (!record.contains("step") || record["step"].get<int64_t>() <= set_at + 1) continue;
    EXPECT_NEAR(record["lr"].get<double>(), 1.5e-4, 1.5e-4 * 1e-6) << line;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(CtlTrain, StopEndsEveryRankOfALaunchedJobWithZero) {
  const fs::path dir = testing::TempDir("hoist_ctl_train_", "two");
  std::vector<std::string> args = {"launch", "-n", "2", "--"};
  const std::vector<std::string> job_args = JobArgs(dir);
  args.insert(args.end(), job_args.begin(), job_args.end());
  Background job(dir, args);
  const std::string address = job.ControlAddress();
  ASSERT_FALSE(address.empty()) << job.err();
  const std::string target = Target(address, dir);
  const nlohmann::json started =
      StatusWhen(target, [](const nlohmann::json& s) { return s["step"].get<int64_t>() >= 1; });
  EXPECT_EQ(started["world_size"], 2);
  ASSERT_EQ(started["memory"].size(), 2u);
  EXPECT_EQ(started["memory"][1]["rank"], 1);

  PauseAndResume(target);

  CtlResult stop = RunCtl(target + " --json stop --checkpoint");
  ExpectOk(stop, "stop --checkpoint");
  const std::string path = nlohmann::json::parse(stop.out)["checkpoint_path"];
  EXPECT_TRUE(fs::exists(fs::path(path) / "rank_00000.bin")) << path;
  EXPECT_TRUE(fs::exists(fs::path(path) / "rank_00001.bin")) << path;
  // hoist launch exits 0 only when every rank did.
  ASSERT_EQ(job.Wait(60), 0) << job.err();
}

#else  // !HOIST_HAVE_GRPC

TEST(CtlTrain, NeedsGrpc) {
  GTEST_SKIP() << "built without gRPC (HOIST_WITH_GRPC): hoist train serves no control service";
}

#endif  // HOIST_HAVE_GRPC

}  // namespace
}  // namespace hoist::launcher
