#include "runtime/observe/control.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/check.h"

namespace hoist::runtime {

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kStarting: return "starting";
    case JobState::kRunning: return "running";
    case JobState::kPaused: return "paused";
    case JobState::kStopping: return "stopping";
    case JobState::kFinished: return "finished";
    case JobState::kFailed: return "failed";
  }
  return "unknown";
}

namespace {

// "1e+39", "0.0003": the value as the operator wrote it, not std::to_string's fixed six decimals
// (which shows 1e-300 as 0.000000).
std::string Shortest(double value) {
  char buffer[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

// Why `value` cannot be carried to the ranks and applied as an fp32 (ExchangeCommands sends it
// as floats; the optimizer and the clipping use it as a float), or "" when it can. Zero is
// allowed only where `zero_allowed`.
std::string Fp32Problem(std::string_view key, double value, bool zero_allowed) {
  const std::string got = Shortest(value);
  if (!std::isfinite(value)) return std::string(key) + " must be a finite number, got " + got;
  if (value == 0 && zero_allowed) return "";
  const double magnitude = std::fabs(value);
  if (magnitude > static_cast<double>(FLT_MAX)) {
    return std::string(key) + " " + got +
           " is beyond the largest fp32 number (3.40282e+38); hoist sends it to the ranks and "
           "applies it in fp32, where it would be infinite";
  }
  if (value != 0 && magnitude < static_cast<double>(FLT_MIN)) {
    return std::string(key) + " " + got +
           " is below the smallest normal fp32 number (1.17549e-38); hoist applies it in fp32, "
           "where it would be 0 or lose its precision";
  }
  return "";
}

}  // namespace

std::string ValidateHyperparams(const HyperparamUpdate& update) {
  if (!update.lr && !update.gradient_clipping) {
    return "nothing to update: give lr or gradient_clipping";
  }
  if (update.lr) {
    const double lr = *update.lr;
    if (std::string problem = Fp32Problem("lr", lr, /*zero_allowed=*/false); !problem.empty()) {
      return problem;
    }
    if (lr <= 0 || lr > 10) return "lr must be in (0, 10], got " + Shortest(lr);
  }
  if (update.gradient_clipping) {
    const double clip = *update.gradient_clipping;
    if (std::string problem = Fp32Problem("gradient_clipping", clip, /*zero_allowed=*/true);
        !problem.empty()) {
      return problem + (clip > 0 ? "; to turn clipping off, set gradient_clipping=0" : "");
    }
    if (clip < 0) {
      return "gradient_clipping must be >= 0 (0 disables clipping), got " + Shortest(clip);
    }
  }
  return "";
}

bool ControlCommands::empty() const {
  return !pause && !resume && !checkpoint && !stop && !stop_checkpoint && !lr && !gradient_clipping;
}

JobController::JobController(int64_t total_steps, int world_size, bool can_checkpoint)
    : can_checkpoint_(can_checkpoint) {
  status_.total_steps = total_steps;
  status_.world_size = world_size;
}

JobStatus JobController::GetStatus() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void JobController::Bump() {
  ++status_.version;
  changed_.notify_all();
}

uint64_t JobController::Enqueue(Request request) {
  request.id = next_id_++;
  queue_.push_back(request);
  changed_.notify_all();
  return request.id;
}

Status JobController::Pause() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return UnavailableError("the job has ended; nothing to pause");
  Enqueue({Request::kPause, 0, {}});
  return Status::Ok();
}

Status JobController::Resume() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return UnavailableError("the job has ended; nothing to resume");
  Enqueue({Request::kResume, 0, {}});
  return Status::Ok();
}

StatusOr<std::string> JobController::Await(std::unique_lock<std::mutex>& lock, uint64_t id,
                                           Clock::time_point deadline, const char* what) {
  auto it = outcomes_.emplace(id, Outcome{}).first;
  while (!it->second.done) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !it->second.done) {
      // The command stays queued (or in progress); only this caller stops waiting.
      outcomes_.erase(it);
      return DeadlineExceededError(std::string(what) +
                                   " was requested but has not completed before the deadline; "
                                   "it will still be applied at a step boundary");
    }
  }
  Outcome outcome = std::move(it->second);
  outcomes_.erase(it);
  if (!outcome.status.ok()) return outcome.status;
  return outcome.result;
}

StatusOr<std::string> JobController::Checkpoint(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (shut_down_) return UnavailableError("the job has ended; no checkpoint can be taken");
  if (!can_checkpoint_) {
    return FailedPreconditionError(
        "the job has no checkpoint.dir; start it with checkpoint.dir set to take checkpoints");
  }
  const uint64_t id = Enqueue({Request::kCheckpoint, 0, {}});
  return Await(lock, id, deadline, "the checkpoint");
}

StatusOr<std::string> JobController::Stop(bool checkpoint, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (shut_down_) return UnavailableError("the job has already ended");
  if (checkpoint && !can_checkpoint_) {
    return FailedPreconditionError(
        "stop with a checkpoint needs checkpoint.dir, which this job does not have; stop "
        "without --checkpoint, or restart the job with checkpoint.dir set");
  }
  if (!checkpoint) {
    Enqueue({Request::kStop, 0, {}});
    return std::string();
  }
  const uint64_t id = Enqueue({Request::kStopCheckpoint, 0, {}});
  return Await(lock, id, deadline, "the stop's checkpoint");
}

Status JobController::UpdateHyperparams(const HyperparamUpdate& update,
                                        Clock::time_point deadline) {
  const std::string invalid = ValidateHyperparams(update);
  if (!invalid.empty()) return InvalidArgumentError(invalid);
  std::unique_lock<std::mutex> lock(mu_);
  if (shut_down_) return UnavailableError("the job has ended; nothing to update");
  const uint64_t id = Enqueue({Request::kUpdate, 0, update});
  return Await(lock, id, deadline, "the update").status();
}

bool JobController::WaitForUpdate(uint64_t* version, Clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_until(lock, deadline, [&] { return shut_down_ || status_.version != *version; });
  if (shut_down_) return false;
  *version = status_.version;
  return true;
}

void JobController::Shutdown(JobState final_state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  shut_down_ = true;
  status_.state = final_state;
  const Status ended = UnavailableError("the job ended (" + std::string(JobStateName(final_state)) +
                                        ") before the request was carried out");
  for (auto& [id, outcome] : outcomes_) {
    if (!outcome.done) outcome = {true, ended, ""};
  }
  queue_.clear();
  Bump();
}

bool JobController::shut_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shut_down_;
}

void JobController::Publish(const JobStatus& status) {
  std::lock_guard<std::mutex> lock(mu_);
  JobStatus next = status;
  next.state = status_.state;
  next.lr_override = status_.lr_override;
  next.gradient_clipping = status_.gradient_clipping;
  next.last_checkpoint = status_.last_checkpoint;
  next.total_steps = status_.total_steps;
  next.world_size = status_.world_size;
  next.version = status_.version;
  status_ = std::move(next);
  Bump();
}

void JobController::SetState(JobState state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_ || status_.state == state) return;
  status_.state = state;
  Bump();
}

void JobController::SetLastCheckpoint(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  status_.last_checkpoint = path;
  Bump();
}

void JobController::SetHyperparams(std::optional<double> lr_override, double gradient_clipping) {
  std::lock_guard<std::mutex> lock(mu_);
  status_.lr_override = lr_override;
  status_.gradient_clipping = gradient_clipping;
  Bump();
}

ControlCommands JobController::TakeCommands() {
  std::lock_guard<std::mutex> lock(mu_);
  ControlCommands commands;
  for (const Request& request : queue_) {
    switch (request.kind) {
      // The later of pause and resume wins, as if each had been applied in turn.
      case Request::kPause:
        commands.pause = true;
        commands.resume = false;
        break;
      case Request::kResume:
        commands.resume = true;
        commands.pause = false;
        break;
      case Request::kCheckpoint:
        commands.checkpoint = true;
        commands.checkpoint_ids.push_back(request.id);
        break;
      case Request::kStop: commands.stop = true; break;
      case Request::kStopCheckpoint:
        commands.stop = true;
        commands.stop_checkpoint = true;
        commands.checkpoint_ids.push_back(request.id);
        break;
      case Request::kUpdate:
        if (request.update.lr) commands.lr = request.update.lr;
        if (request.update.gradient_clipping) {
          commands.gradient_clipping = request.update.gradient_clipping;
        }
        commands.update_ids.push_back(request.id);
        break;
    }
  }
  queue_.clear();
  return commands;
}

bool JobController::WaitForCommand(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_until(lock, deadline, [&] { return shut_down_ || !queue_.empty(); });
  return !queue_.empty();
}

void JobController::Complete(uint64_t id, Status status, std::string result) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = outcomes_.find(id);
  if (it == outcomes_.end()) return;  // nobody is waiting any more
  it->second = {true, std::move(status), std::move(result)};
  changed_.notify_all();
}

void JobController::FailPending(const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, outcome] : outcomes_) {
    if (!outcome.done) outcome = {true, status, ""};
  }
  queue_.clear();
  changed_.notify_all();
}

// ---- ExchangeCommands ----
//
// One fp32 sum all-reduce over a few slots: rank 0 writes its commands, the other ranks zeros, so
// the sum is rank 0's values exactly (x + 0 == x) and the signal slot counts the ranks that
// caught a stop signal. lr and clipping travel as two floats each, the value rounded and what
// the rounding lost, so that every rank gets the double the operator set (to about 48 bits).

namespace {

enum Slot {
  kPauseSlot,
  kResumeSlot,
  kCheckpointSlot,
  kStopSlot,
  kStopCheckpointSlot,
  kHasLrSlot,
  kLrSlot,
  kLrRestSlot,
  kHasClipSlot,
  kClipSlot,
  kClipRestSlot,
  kSignalSlot,
  kSigtermSlot,
  kSighupSlot,
  kNumSlots
};

void Split(double value, float* rounded, float* rest) {
  *rounded = static_cast<float>(value);
  // ValidateHyperparams keeps every value within fp32's range; outside it the two floats would
  // be inf and -inf, and their sum NaN on every rank.
  HOIST_CHECK(std::isfinite(*rounded)) << "hyperparameter " << value << " does not fit in fp32";
  *rest = static_cast<float>(value - static_cast<double>(*rounded));
}

}  // namespace

StatusOr<AgreedCommands> ExchangeCommands(comm::Communicator& comm, const ControlCommands& mine,
                                          int signal_number) {
  std::array<float, kNumSlots> slots{};
  if (comm.rank() == 0) {
    slots[kPauseSlot] = mine.pause ? 1.0f : 0.0f;
    slots[kResumeSlot] = mine.resume ? 1.0f : 0.0f;
    slots[kCheckpointSlot] = mine.checkpoint ? 1.0f : 0.0f;
    slots[kStopSlot] = mine.stop ? 1.0f : 0.0f;
    slots[kStopCheckpointSlot] = mine.stop_checkpoint ? 1.0f : 0.0f;
    slots[kHasLrSlot] = mine.lr ? 1.0f : 0.0f;
    if (mine.lr) Split(*mine.lr, &slots[kLrSlot], &slots[kLrRestSlot]);
    slots[kHasClipSlot] = mine.gradient_clipping ? 1.0f : 0.0f;
    if (mine.gradient_clipping) {
      Split(*mine.gradient_clipping, &slots[kClipSlot], &slots[kClipRestSlot]);
    }
  }
  slots[kSignalSlot] = signal_number != 0 ? 1.0f : 0.0f;
  slots[kSigtermSlot] = signal_number == SIGTERM ? 1.0f : 0.0f;
  slots[kSighupSlot] = signal_number == SIGHUP ? 1.0f : 0.0f;
  HOIST_RETURN_IF_ERROR(
      comm.AllReduce(slots.data(), kNumSlots, DType::kFloat32, comm::ReduceOp::kSum));
  AgreedCommands agreed;
  ControlCommands& c = agreed.commands;
  c.pause = slots[kPauseSlot] != 0;
  c.resume = slots[kResumeSlot] != 0;
  c.checkpoint = slots[kCheckpointSlot] != 0;
  c.stop = slots[kStopSlot] != 0;
  c.stop_checkpoint = slots[kStopCheckpointSlot] != 0;
  auto join = [&](int slot, int rest) {
    return static_cast<double>(slots[slot]) + static_cast<double>(slots[rest]);
  };
  if (slots[kHasLrSlot] != 0) c.lr = join(kLrSlot, kLrRestSlot);
  if (slots[kHasClipSlot] != 0) c.gradient_clipping = join(kClipSlot, kClipRestSlot);
  if (comm.rank() == 0) {
    c.checkpoint_ids = mine.checkpoint_ids;
    c.update_ids = mine.update_ids;
  }
  agreed.signalled = slots[kSignalSlot] != 0;
  if (agreed.signalled) {
    agreed.signal_number = slots[kSigtermSlot] != 0  ? SIGTERM
                           : slots[kSighupSlot] != 0 ? SIGHUP
                                                     : SIGINT;
  }
  return agreed;
}

// ---- Stop signals ----

namespace {

std::atomic<int> g_stop_signals{0};
std::atomic<int> g_stop_signal_number{0};

void OnStopSignal(int signo) {
  // Recorded before the count, so that whoever sees the request also sees which signal it was.
  int none = 0;
  g_stop_signal_number.compare_exchange_strong(none, signo);
  if (g_stop_signals.fetch_add(1) == 0) {
    static const char kMessage[] =
        "hoist: stop requested; stopping after the current step, with a checkpoint when "
        "checkpoint.dir is set (send it again to exit at once)\n";
    ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    (void)ignored;
    return;
  }
  // A second request: the default action, at once.
  std::signal(signo, SIG_DFL);
  std::raise(signo);
}

}  // namespace

void InstallStopSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  // SIGHUP is a closed terminal or ssh session (and what `hoist launch` forwards of one): the
  // operator is gone, not the job broken, so it stops the job as SIGTERM does.
  for (int signo : {SIGINT, SIGTERM, SIGHUP}) sigaction(signo, &action, nullptr);
}

const char* StopSignalName(int signal_number) {
  switch (signal_number) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
  }
  return "a signal";
}

bool StopSignalled() { return g_stop_signals.load() > 0; }

int StopSignalNumber() { return g_stop_signal_number.load(); }

void ResetStopSignal() {
  g_stop_signals.store(0);
  g_stop_signal_number.store(0);
}

}  // namespace hoist::runtime
