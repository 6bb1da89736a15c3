// The job controller and the trainer's step-boundary control: commands queue and complete as
// control.h says, every rank applies them after the same step, a paused job makes no progress
// and resumes on the same trajectory, checkpoints and stops land where asked, and hyperparameter
// overrides reach every rank and survive a resume.
#include "runtime/observe/control.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/memory_tracker.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/train/trainer.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

Clock::time_point In(std::chrono::milliseconds ms) { return Clock::now() + ms; }

// ---- JobController alone ----

TEST(JobController, RefusesInvalidHyperparamsWithTheReason) {
  JobController controller(10, 1, false);
  HyperparamUpdate update;
  Status none = controller.UpdateHyperparams(update, In(100ms));
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  update.lr = -1;
  Status negative = controller.UpdateHyperparams(update, In(100ms));
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("lr must be"), std::string::npos) << negative.message();
  update.lr = std::nan("");
  EXPECT_EQ(controller.UpdateHyperparams(update, In(100ms)).code(), StatusCode::kInvalidArgument);
  update.lr = 1e-3;
  update.gradient_clipping = -0.5;
  Status clip = controller.UpdateHyperparams(update, In(100ms));
  EXPECT_NE(clip.message().find("gradient_clipping"), std::string::npos) << clip.message();
  // Nothing was queued by the refusals.
  EXPECT_TRUE(controller.TakeCommands().empty());
}

// Every value travels to the ranks as fp32 and is applied as fp32: one that overflows fp32
// (1e39 would arrive as inf + -inf = NaN and turn clipping off) or underflows it (1e-300 would
// train at lr 0) is refused with its own number, not std::to_string's "0.000000".
TEST(JobController, RefusesValuesThatFp32CannotCarry) {
  JobController controller(10, 1, false);
  struct Bad {
    std::optional<double> lr, clip;
    const char* reason;
  };
  for (const Bad& bad :
       {Bad{std::nullopt, 1e39, "gradient_clipping 1e+39 is beyond the largest"},
        Bad{std::nullopt, 1e39, "set gradient_clipping=0"},
        Bad{std::nullopt, 1e-300, "gradient_clipping 1e-300 is below the smallest"},
        Bad{std::nullopt, 1e-39, "below the smallest normal fp32"},
        Bad{1e-300, std::nullopt, "lr 1e-300 is below the smallest normal fp32"},
        Bad{std::numeric_limits<double>::infinity(), std::nullopt,
            "lr must be a finite number, got inf"},
        Bad{std::nullopt, std::nan(""), "gradient_clipping must be a finite"}}) {
    HyperparamUpdate update;
    update.lr = bad.lr;
    update.gradient_clipping = bad.clip;
    Status status = controller.UpdateHyperparams(update, In(100ms));
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad.reason;
    EXPECT_NE(status.message().find(bad.reason), std::string::npos) << status.message();
  }
  EXPECT_TRUE(controller.TakeCommands().empty());
  // The edges of fp32's normal range are accepted.
  for (double clip : {0.0, static_cast<double>(FLT_MIN), static_cast<double>(FLT_MAX)}) {
    HyperparamUpdate update;
    update.gradient_clipping = clip;
    EXPECT_EQ(ValidateHyperparams(update), "") << clip;
  }
}

// What rank 0 accepted arrives on every rank as the fp32 it is applied in, finite, at the edges
// of the accepted range too.
TEST(ExchangeCommands, EveryRankGetsTheAcceptedValueInFp32) {
  for (double value : {static_cast<double>(FLT_MAX), static_cast<double>(FLT_MIN), 3e-4, 10.0}) {
    HyperparamUpdate update;
    update.gradient_clipping = value;
    ASSERT_EQ(ValidateHyperparams(update), "") << value;
    auto group = comm::ThreadGroup::Create(2, 30);
    ASSERT_TRUE(group.ok());
    std::vector<std::optional<double>> got(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        ControlCommands mine;
        if (r == 0) mine.gradient_clipping = value;
        StatusOr<AgreedCommands> agreed = ExchangeCommands((*group)->comm(r), mine, false);
        if (agreed.ok()) got[static_cast<size_t>(r)] = agreed->commands.gradient_clipping;
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(got[static_cast<size_t>(r)].has_value()) << "rank " << r;
      const float applied = static_cast<float>(*got[static_cast<size_t>(r)]);
      EXPECT_TRUE(std::isfinite(applied)) << value;
      EXPECT_EQ(applied, static_cast<float>(value)) << "rank " << r;
    }
  }
}

TEST(JobController, TheLaterOfPauseAndResumeWins) {
  JobController controller(10, 1, false);
  ASSERT_TRUE(controller.Pause().ok());
  ASSERT_TRUE(controller.Resume().ok());
  ControlCommands commands = controller.TakeCommands();
  EXPECT_TRUE(commands.resume);
  EXPECT_FALSE(commands.pause);
  ASSERT_TRUE(controller.Resume().ok());
  ASSERT_TRUE(controller.Pause().ok());
  commands = controller.TakeCommands();
  EXPECT_TRUE(commands.pause);
  EXPECT_FALSE(commands.resume);
  EXPECT_TRUE(controller.TakeCommands().empty());
}

TEST(JobController, CheckpointWithoutADirectoryIsRefused) {
  JobController controller(10, 1, /*can_checkpoint=*/false);
  StatusOr<std::string> path = controller.Checkpoint(In(100ms));
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(path.status().message().find("checkpoint.dir"), std::string::npos);
  EXPECT_FALSE(controller.Stop(true, In(100ms)).ok());
  EXPECT_TRUE(controller.TakeCommands().empty());
}

TEST(JobController, CheckpointReturnsThePathTheLoopReports) {
  JobController controller(10, 1, true);
  std::thread loop([&] {
    ControlCommands commands;
    while ((commands = controller.TakeCommands()).empty()) {
      controller.WaitForCommand(In(50ms));
    }
    ASSERT_TRUE(commands.checkpoint);
    ASSERT_EQ(commands.checkpoint_ids.size(), 1u);
    controller.Complete(commands.checkpoint_ids[0], Status::Ok(), "/ckpt/step_00000007");
  });
  StatusOr<std::string> path = controller.Checkpoint(In(10000ms));
  loop.join();
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(*path, "/ckpt/step_00000007");
}

TEST(JobController, AFailedCheckpointReturnsTheFailure) {
  JobController controller(10, 1, true);
  std::thread loop([&] {
    ControlCommands commands;
    while ((commands = controller.TakeCommands()).empty()) controller.WaitForCommand(In(50ms));
    controller.Complete(commands.checkpoint_ids.at(0), IoError("disk full on /ckpt"));
  });
  StatusOr<std::string> path = controller.Checkpoint(In(10000ms));
  loop.join();
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kIoError);
  EXPECT_NE(path.status().message().find("disk full"), std::string::npos);
}

TEST(JobController, ADeadlineEndsTheWaitButKeepsTheCommand) {
  JobController controller(10, 1, true);
  StatusOr<std::string> path = controller.Checkpoint(In(50ms));
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kDeadlineExceeded);
  ControlCommands commands = controller.TakeCommands();
  EXPECT_TRUE(commands.checkpoint);
  // Completing a request nobody waits for any more is harmless.
  controller.Complete(commands.checkpoint_ids.at(0), Status::Ok(), "/x");
}

TEST(JobController, ShutdownFailsWaitersAndLaterRequests) {
  JobController controller(10, 1, true);
  std::atomic<bool> waiting{false};
  Status outcome;
  std::thread client([&] {
    waiting = true;
    outcome = controller.Checkpoint(In(10000ms)).status();
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(20ms);
  controller.Shutdown(JobState::kFinished);
  client.join();
  EXPECT_EQ(outcome.code(), StatusCode::kUnavailable) << outcome.ToString();
  EXPECT_EQ(controller.Pause().code(), StatusCode::kUnavailable);
  EXPECT_EQ(controller.GetStatus().state, JobState::kFinished);
  uint64_t version = 0;
  EXPECT_FALSE(controller.WaitForUpdate(&version, In(1000ms)));
}

TEST(JobController, WaitForUpdateSeesPublishedSteps) {
  JobController controller(10, 2, false);
  uint64_t version = controller.GetStatus().version;
  std::thread loop([&] {
    std::this_thread::sleep_for(20ms);
    JobStatus status;
    status.step = 3;
    status.loss = 2.5;
    controller.Publish(status);
  });
  ASSERT_TRUE(controller.WaitForUpdate(&version, In(10000ms)));
  loop.join();
  const JobStatus status = controller.GetStatus();
  EXPECT_EQ(status.version, version);
  EXPECT_EQ(status.step, 3);
  EXPECT_EQ(status.total_steps, 10);
  EXPECT_EQ(status.world_size, 2);
}

// ---- The trainer under control ----

Config Job(int world, int64_t steps, const std::vector<std::string>& extra = {}) {
  return testing_util::TinyJob(world, steps, extra);
}

struct RankResult {
  Status status;
  std::vector<float> losses;
  bool stopped = false;
  int64_t step = 0;
  std::optional<double> lr_override;
  float clip = 0;
};

// Runs `config` on `world` thread ranks with `controller` on rank 0, while `drive` (on the
// calling thread) steers it; returns each rank's result.
template <typename Drive>
std::vector<RankResult> RunControlled(const Config& config, int world, JobController* controller,
                                      Drive drive) {
  auto group = comm::ThreadGroup::Create(world, config.comm.timeout_s);
  HOIST_CHECK(group.ok());
  std::vector<RankResult> results(static_cast<size_t>(world));
  std::vector<MemoryTracker> trackers(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      RankResult& result = results[static_cast<size_t>(r)];
      TrainerOptions options;
      options.comm = &(*group)->comm(r);
      options.tracker = &trackers[static_cast<size_t>(r)];
      options.controller = controller;
      auto trainer = Trainer::Create(config, options);
      if (!trainer.ok()) {
        result.status = trainer.status();
        return;
      }
      result.status = (*trainer)->Run();
      result.losses = (*trainer)->losses();
      result.stopped = (*trainer)->stopped();
      result.step = (*trainer)->step();
      result.lr_override = (*trainer)->lr_override();
      result.clip = (*trainer)->gradient_clipping();
    });
  }
  drive();
  for (auto& t : ranks) t.join();
  return results;
}

// Waits until `predicate(status)` holds (fails the test after 30 s).
template <typename Predicate>
JobStatus WaitFor(JobController& controller, Predicate predicate) {
  const auto deadline = In(30000ms);
  uint64_t version = 0;
  for (;;) {
    JobStatus status = controller.GetStatus();
    if (predicate(status)) return status;
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "timed out; state " << JobStateName(status.state) << " step " << status.step;
      return status;
    }
    controller.WaitForUpdate(&version, In(200ms));
  }
}

TEST(TrainerControl, PauseStopsProgressAndResumeContinuesTheSameTrajectory) {
  constexpr int64_t kSteps = 12;
  const Config config = Job(2, kSteps);
  JobController controller(kSteps, 2, false);
  int64_t paused_at = 0;
  std::vector<RankResult> controlled = RunControlled(config, 2, &controller, [&] {
    WaitFor(controller, [](const JobStatus& s) { return s.step >= 3; });
    ASSERT_TRUE(controller.Pause().ok());
    const JobStatus paused =
        WaitFor(controller, [](const JobStatus& s) { return s.state == JobState::kPaused; });
    paused_at = paused.step;
    // Longer than a few heartbeats of the paused loop: no step is taken meanwhile.
    std::this_thread::sleep_for(1500ms);
    EXPECT_EQ(controller.GetStatus().step, paused_at);
    EXPECT_EQ(controller.GetStatus().state, JobState::kPaused);
    ASSERT_EQ(controller.GetStatus().memory.size(), 2u);
    ASSERT_TRUE(controller.Resume().ok());
  });
  EXPECT_GE(paused_at, 3);
  EXPECT_LT(paused_at, kSteps);
  JobController quiet(kSteps, 2, false);
  std::vector<RankResult> plain = RunControlled(config, 2, &quiet, [] {});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(controlled[r].status.ok()) << controlled[r].status.ToString();
    EXPECT_FALSE(controlled[r].stopped);
    EXPECT_EQ(controlled[r].step, kSteps);
    // A pause keeps the job's place in the data and its state: the same losses bit for bit.
    EXPECT_EQ(controlled[r].losses, plain[r].losses);
  }
  EXPECT_EQ(controller.GetStatus().state, JobState::kFinished);
}

TEST(TrainerControl, StopEndsEveryRankAtTheSameStep) {
  const Config config = Job(2, 100000);
  JobController controller(100000, 2, false);
  std::vector<RankResult> results = RunControlled(config, 2, &controller, [&] {
    WaitFor(controller, [](const JobStatus& s) { return s.step >= 2; });
    StatusOr<std::string> stopped = controller.Stop(false, In(10000ms));
    ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
    EXPECT_EQ(*stopped, "");
  });
  for (const RankResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.step, results[0].step);
    EXPECT_LT(r.step, 100000);
  }
}

TEST(TrainerControl, StopWhilePausedEndsTheJob) {
  const Config config = Job(2, 100000);
  JobController controller(100000, 2, false);
  std::vector<RankResult> results = RunControlled(config, 2, &controller, [&] {
    WaitFor(controller, [](const JobStatus& s) { return s.step >= 1; });
    ASSERT_TRUE(controller.Pause().ok());
    WaitFor(controller, [](const JobStatus& s) { return s.state == JobState::kPaused; });
    ASSERT_TRUE(controller.Stop(false, In(10000ms)).ok());
  });
  for (const RankResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_TRUE(r.stopped);
  }
}

TEST(TrainerControl, CheckpointAndStopWithCheckpointWriteWhereTheyAnswer) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_control_checkpoint";
  fs::remove_all(dir);
  const Config config = Job(2, 100000, {"checkpoint.dir=\"" + dir.string() + "\""});
  JobController controller(100000, 2, true);
  std::string first, last;
  std::vector<RankResult> results = RunControlled(config, 2, &controller, [&] {
    WaitFor(controller, [](const JobStatus& s) { return s.step >= 2; });
    StatusOr<std::string> path = controller.Checkpoint(In(20000ms));
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    first = *path;
    EXPECT_EQ(controller.GetStatus().last_checkpoint, first);
    StatusOr<std::string> stopped = controller.Stop(true, In(20000ms));
    ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
    last = *stopped;
  });
  ASSERT_TRUE(results[0].status.ok()) << results[0].status.ToString();
  ASSERT_TRUE(results[1].status.ok()) << results[1].status.ToString();
  EXPECT_TRUE(fs::exists(fs::path(first) / "manifest.json")) << first;
  EXPECT_EQ(last, dir.string() + "/" + CheckpointStepDirName(results[0].step));
  StatusOr<std::string> latest = FindLatestCheckpoint(dir.string());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(fs::path(*latest), fs::path(last));
  fs::remove_all(dir);
}

TEST(TrainerControl, HyperparamUpdatesReachEveryRankAndSurviveAResume) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_control_hyperparams";
  fs::remove_all(dir);
  const Config config = Job(2, 100000, {"checkpoint.dir=\"" + dir.string() + "\""});
  JobController controller(100000, 2, true);
  std::vector<RankResult> results = RunControlled(config, 2, &controller, [&] {
    WaitFor(controller, [](const JobStatus& s) { return s.step >= 1; });
    HyperparamUpdate update;
    update.lr = 2e-3;
    update.gradient_clipping = 0.25;
    Status applied = controller.UpdateHyperparams(update, In(20000ms));
    ASSERT_TRUE(applied.ok()) << applied.ToString();
    const JobStatus status = controller.GetStatus();
    ASSERT_TRUE(status.lr_override.has_value());
    EXPECT_FLOAT_EQ(static_cast<float>(*status.lr_override), 2e-3f);
    EXPECT_FLOAT_EQ(static_cast<float>(status.gradient_clipping), 0.25f);
    // The next step runs at the new rate.
    const int64_t at = status.step;
    const JobStatus later = WaitFor(controller, [&](const JobStatus& s) { return s.step > at; });
    EXPECT_FLOAT_EQ(static_cast<float>(later.lr), 2e-3f);
    ASSERT_TRUE(controller.Stop(true, In(20000ms)).ok());
  });
  for (const RankResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    ASSERT_TRUE(r.lr_override.has_value());
    // The operator's double reaches every rank, not just its float rounding.
    EXPECT_NEAR(*r.lr_override, 2e-3, 1e-13);
    EXPECT_FLOAT_EQ(r.clip, 0.25f);
  }
  // A resumed job keeps the overrides.
  JobController resumed_controller(100000, 2, true);
  auto group = comm::ThreadGroup::Create(2, 20.0);
  ASSERT_TRUE(group.ok());
  std::vector<std::thread> ranks;
  std::vector<std::optional<double>> lr(2);
  std::vector<float> clip(2);
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      TrainerOptions options;
      options.comm = &(*group)->comm(r);
      options.resume = true;
      options.controller = &resumed_controller;
      MemoryTracker tracker;
      options.tracker = &tracker;
      auto trainer = Trainer::Create(config, options);
      ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
      lr[r] = (*trainer)->lr_override();
      clip[r] = (*trainer)->gradient_clipping();
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(lr[r].has_value());
    EXPECT_FLOAT_EQ(static_cast<float>(*lr[r]), 2e-3f);
    EXPECT_FLOAT_EQ(clip[r], 0.25f);
  }
  EXPECT_FLOAT_EQ(static_cast<float>(*resumed_controller.GetStatus().lr_override), 2e-3f);
  fs::remove_all(dir);
}

// A scheduler's signal may reach one rank only: every rank learns of it at the same boundary,
// and all stop with the same signal (SIGTERM over SIGHUP over SIGINT), so that all exit with the
// same code.
TEST(ControlSync, EveryRankAgreesOnTheStopSignalOfAnyRank) {
  struct Case {
    std::vector<int> caught;  // by rank
    int agreed;
  };
  const Case cases[] = {{{0, 0, 0}, 0},
                        {{0, SIGINT, 0}, SIGINT},
                        {{0, 0, SIGTERM}, SIGTERM},
                        {{SIGINT, 0, SIGTERM}, SIGTERM},
                        {{0, SIGHUP, 0}, SIGHUP},
                        {{SIGHUP, SIGINT, 0}, SIGHUP},
                        {{SIGHUP, 0, SIGTERM}, SIGTERM}};
  for (const Case& c : cases) {
    auto group = comm::ThreadGroup::Create(3, 20.0);
    ASSERT_TRUE(group.ok());
    std::vector<AgreedCommands> agreed(3);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        auto result = ExchangeCommands((*group)->comm(r), ControlCommands{}, c.caught[r]);
        ASSERT_TRUE(result.ok()) << result.status().ToString();
        agreed[r] = *result;
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(agreed[r].signal_number, c.agreed) << "rank " << r;
      EXPECT_EQ(agreed[r].signalled, c.agreed != 0) << "rank " << r;
    }
  }
}

TEST(TrainerControl, AStopSignalEndsTheJobGracefully) {
  const Config config = Job(2, 100000);
  JobController controller(100000, 2, false);
  ResetStopSignal();
  InstallStopSignalHandlers();
  std::vector<RankResult> results = RunControlled(config, 2, &controller, [&] {
    WaitFor(controller, [](const JobStatus& s) { return s.step >= 2; });
    std::raise(SIGTERM);
  });
  ResetStopSignal();
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  for (const RankResult& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.step, results[0].step);
  }
}

}  // namespace
}  // namespace hoist::runtime
