// JobController: what a running job's operators may ask of it, between the control service's
// threads and the training loop of rank 0.
//
// The control service (runtime/observe/control_server.h) turns each RPC into a call here: GetStatus
// reads the status the loop last published; Pause, Resume, Checkpoint, Stop and UpdateHyperparams
// queue a command. The loop collects the queued commands at every step boundary (TakeCommands) and
// agrees on them with the other ranks (ControlSync below), so that every rank applies the same
// command after the same step; then it reports how each ended (Complete). The calls that return
// a result (Checkpoint, Stop with a checkpoint, UpdateHyperparams) block the calling service
// thread until their command has been applied, the job has ended, or their deadline passes.
//
// Semantics (what `hoist ctl` documents to operators):
//   - Pause: the job finishes its current step and waits at the boundary, keeping its memory and
//     its place in the data; it does not spin (rank 0 sleeps on a condition variable, the other
//     ranks in a collective that rank 0 renews every heartbeat). Checkpoint, UpdateHyperparams
//     and Stop work while paused. Pausing a paused job, or resuming a running one, is a no-op
//     that succeeds.
//   - Checkpoint: written at the next boundary (at once when paused) into checkpoint.dir, the
//     directory returned; without checkpoint.dir it fails with FailedPrecondition.
//   - Stop: every rank leaves the training loop at the next boundary and the job exits 0, after
//     a checkpoint when asked for one.
//   - UpdateHyperparams: `lr` replaces the learning-rate schedule from the next step on (a fixed
//     rate, until set again); `gradient_clipping` replaces the config's value (0 disables). A
//     value that is not finite, out of range, or not representable as a normal fp32 number
//     (the precision it travels between the ranks and is applied in: 1e39 would be infinite,
//     1e-300 zero) is refused at once with the reason, and nothing is applied. Overrides are saved
//     in checkpoints and hold after a resume.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/memory_tracker.h"
#include "core/status.h"

namespace hoist::runtime {

enum class JobState { kStarting, kRunning, kPaused, kStopping, kFinished, kFailed };
// "starting", "running", "paused", "stopping", "finished", "failed".
const char* JobStateName(JobState state);

// One rank's memory, as its tracker counted it at the last step boundary.
struct RankMemory {
  int rank = 0;
  MemorySnapshot::Table current{};
  MemorySnapshot::Table peak{};
};

// What GetStatus answers.
struct JobStatus {
  JobState state = JobState::kStarting;
  int64_t step = 0;         // optimizer steps taken
  int64_t total_steps = 0;  // train.steps
  int world_size = 1;
  double loss = 0;  // of the last step (mean over the global batch)
  double lr = 0;    // of the last step
  double grad_norm = 0;
  double loss_scale = 1;
  double tokens_per_s = 0;
  double step_s = 0;
  int64_t skipped_steps = 0;
  double gradient_clipping = 0;       // in force for the next step
  std::optional<double> lr_override;  // set by UpdateHyperparams; otherwise the schedule's
  std::string last_checkpoint;        // the newest step directory written by this run, or ""
  std::vector<RankMemory> memory;     // one per rank, in rank order
  // Grows with every published change (Watch uses it to wait for news).
  uint64_t version = 0;
};

struct HyperparamUpdate {
  // Both must be normal fp32 numbers (|v| in [FLT_MIN, FLT_MAX]); clipping may also be 0.
  std::optional<double> lr;                 // in (0, 10]
  std::optional<double> gradient_clipping;  // >= 0; 0 disables clipping
};

// "" when every value in `update` is acceptable, else why not (naming the key and the range).
std::string ValidateHyperparams(const HyperparamUpdate& update);

// The commands of one step boundary, as rank 0 hands them to ControlSync.
struct ControlCommands {
  bool pause = false;
  bool resume = false;
  bool checkpoint = false;
  bool stop = false;
  bool stop_checkpoint = false;  // checkpoint before stopping
  std::optional<double> lr;
  std::optional<double> gradient_clipping;
  // The requests waiting for an outcome, for Complete: checkpoints (plain or before a stop),
  // and hyperparameter updates.
  std::vector<uint64_t> checkpoint_ids;
  std::vector<uint64_t> update_ids;
  bool empty() const;
};

class JobController {
 public:
  using Clock = std::chrono::steady_clock;

  // Without `can_checkpoint` (no checkpoint.dir), Checkpoint and Stop-with-checkpoint are
  // refused with FailedPrecondition.
  JobController(int64_t total_steps, int world_size, bool can_checkpoint);
  JobController(const JobController&) = delete;
  JobController& operator=(const JobController&) = delete;

  // ---- The control service's side ----
  JobStatus GetStatus() const;
  Status Pause();
  Status Resume();
  // Returns the checkpoint's step directory once every rank has written its shard.
  StatusOr<std::string> Checkpoint(Clock::time_point deadline);
  // Returns once the stop is queued; with `checkpoint`, once the checkpoint is written (its path
  // returned; "" without one).
  StatusOr<std::string> Stop(bool checkpoint, Clock::time_point deadline);
  // Validates, queues, and returns once every rank has applied the update.
  Status UpdateHyperparams(const HyperparamUpdate& update, Clock::time_point deadline);
  // Blocks until the status version passes `*version` (then sets it to the new one and returns
  // true), until `deadline` (returns true, status unchanged), or until Shutdown (returns false).
  bool WaitForUpdate(uint64_t* version, Clock::time_point deadline) const;
  // Wakes every waiter; every later request fails with Unavailable. Called when the job ends.
  void Shutdown(JobState final_state);
  bool shut_down() const;

  // ---- The training loop's side (rank 0) ----
  // Publishes the status after a step (keeps the controller's own fields: state, overrides,
  // last checkpoint, version).
  void Publish(const JobStatus& status);
  void SetState(JobState state);
  void SetLastCheckpoint(const std::string& path);
  void SetHyperparams(std::optional<double> lr_override, double gradient_clipping);
  // Takes the commands queued since the last call.
  ControlCommands TakeCommands();
  // Sleeps until a command is queued or `deadline`; returns whether one is.
  bool WaitForCommand(Clock::time_point deadline);
  // Reports how the request `id` ended; `result` carries a checkpoint path where there is one.
  void Complete(uint64_t id, Status status, std::string result = "");
  // Completes every request still waiting (the job ended) with `status`.
  void FailPending(const Status& status);

 private:
  struct Request {
    enum Kind { kPause, kResume, kCheckpoint, kStop, kStopCheckpoint, kUpdate } kind;
    uint64_t id = 0;
    HyperparamUpdate update;
  };
  struct Outcome {
    bool done = false;
    Status status;
    std::string result;
  };

  uint64_t Enqueue(Request request);  // mu_ held
  // Waits for `id`'s outcome until `deadline`; the outcome is removed once read.
  StatusOr<std::string> Await(std::unique_lock<std::mutex>& lock, uint64_t id,
                              Clock::time_point deadline, const char* what);
  void Bump();  // mu_ held: a new version, waiters woken

  const bool can_checkpoint_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;  // status versions, outcomes, new commands
  JobStatus status_;
  std::deque<Request> queue_;
  std::map<uint64_t, Outcome> outcomes_;
  uint64_t next_id_ = 1;
  bool shut_down_ = false;
};

// ControlSync: the step-boundary agreement. Every rank calls Exchange at the same boundary; rank
// 0 passes the commands it took from its controller (the others pass nothing) and every rank
// gets the same commands back, plus whether any rank caught SIGINT, SIGTERM or SIGHUP and which.
// One small all-reduce.
struct AgreedCommands {
  ControlCommands commands;  // request ids only on rank 0
  bool signalled = false;    // some rank was asked to stop by a signal
  // The same on every rank: SIGTERM when any rank caught one, else SIGHUP when any did, else
  // SIGINT when any did, else 0.
  int signal_number = 0;
};
// `signal_number`: the stop signal this rank caught (StopSignalNumber()), 0 for none.
StatusOr<AgreedCommands> ExchangeCommands(comm::Communicator& comm, const ControlCommands& mine,
                                          int signal_number);

// Process-wide stop requests from SIGINT, SIGTERM and SIGHUP (a closed terminal): the first sets
// a flag the training loop checks at each step boundary; a second one ends the process at once.
// Installed by `hoist train`.
void InstallStopSignalHandlers();
bool StopSignalled();
// The first stop signal caught (SIGINT, SIGTERM or SIGHUP), 0 before any.
int StopSignalNumber();
// "SIGINT", "SIGTERM" or "SIGHUP".
const char* StopSignalName(int signal_number);
// Clears the flag (for tests).
void ResetStopSignal();

}  // namespace hoist::runtime
