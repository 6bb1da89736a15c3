#include "launcher/launch_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/posix_error.h"

extern char** environ;

namespace hoist::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxLineBytes = 1 << 20;
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

const char* SignalName(int signal_number) {
  switch (signal_number) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
  }
  return nullptr;
}

std::string SignalText(int signal_number) {
  const char* name = SignalName(signal_number);
  return "signal " + std::to_string(signal_number) + (name ? std::string(" (") + name + ")" : "");
}

// Writes all of `text` to `fd`. Our stdout may be a pipe whose reader went away: then output is
// dropped and supervision goes on, which is why SIGPIPE is ignored while workers run.
void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n > 0) {
      text.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd wait_for{fd, POLLOUT, 0};
      ::poll(&wait_for, 1, 1000);
    } else {
      return;
    }
  }
}

void Say(const std::string& line) { WriteAll(STDERR_FILENO, "hoist launch: " + line + "\n"); }

// One of a worker's output pipes and the line it is in the middle of.
struct LineStream {
  int fd = -1;  // read end, non-blocking; -1 once closed
  int out_fd = STDOUT_FILENO;
  std::string pending;
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  bool group_may_live = false;  // false once signalling the group found nobody
  int wait_status = 0;
  LineStream streams[2];
};

// Blocks the signals the supervisor reads from a signalfd, ignores SIGPIPE and makes sure
// SIGCHLD is not ignored (children would be reaped behind waitpid's back); undoes all of that
// when destroyed.
class SignalScope {
 public:
  SignalScope() {
    sigemptyset(&handled_);
    for (int s : kStopSignals) sigaddset(&handled_, s);
    sigaddset(&handled_, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &handled_, &old_mask_);
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_pipe_);
    struct sigaction by_default = {};
    by_default.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &by_default, &old_child_);
  }
  ~SignalScope() {
    if (fd_ >= 0) ::close(fd_);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    sigaction(SIGCHLD, &old_child_, nullptr);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  Status Open() {
    fd_ = ::signalfd(-1, &handled_, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd_ < 0) return PosixError("signalfd", "", errno);
    return Status::Ok();
  }
  int fd() const { return fd_; }
  // What a worker restores between fork and exec.
  const sigset_t& old_mask() const { return old_mask_; }

 private:
  sigset_t handled_;
  sigset_t old_mask_;
  struct sigaction old_pipe_ = {};
  struct sigaction old_child_ = {};
  int fd_ = -1;
};

// The launcher's environment without the variables of other launchers and those the worker
// gets from its spec, then the spec's.
std::vector<std::string> WorkerEnvironment(const WorkerSpec& spec) {
  std::set<std::string> replaced(kInheritedRankVariables,
                                 kInheritedRankVariables + kNumInheritedRankVariables);
  for (const auto& [name, value] : spec.env) replaced.insert(name);
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (replaced.count(std::string(text.substr(0, text.find('=')))) == 0) {
      env.emplace_back(text);
    }
  }
  for (const auto& [name, value] : spec.env) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& words) {
  std::vector<char*> pointers;
  for (std::string& word : words) pointers.push_back(word.data());
  pointers.push_back(nullptr);
  return pointers;
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchPlan& plan) : plan_(plan) {}
  ~Supervisor() {
    for (Worker& worker : workers_) {
      for (LineStream& stream : worker.streams) CloseStream(stream);
    }
    if (dev_null_ >= 0) ::close(dev_null_);
  }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  StatusOr<int> Run() {
    HOIST_RETURN_IF_ERROR(signals_.Open());
    dev_null_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (dev_null_ < 0) return PosixError("open", "/dev/null", errno);
    for (int restarts = 0;; ++restarts) {
      HOIST_ASSIGN_OR_RETURN(const int code,
                             RunOnce(restarts == 0 ? plan_.worker_argv : plan_.restart_argv));
      // A job asked to stop stays stopped: by a signal the launcher forwarded, or by one a
      // rank got directly (hoist train then exits 128 + its number).
      if (!failed_ || forwarded_signal_ != 0 || StoppedBySignal(failure_status_)) return code;
      if (restarts >= plan_.max_restarts) {
        if (plan_.max_restarts > 0) {
          Say("rank " + std::to_string(failed_rank_) + " failed again and all " +
              std::to_string(plan_.max_restarts) + " restarts (--max-restarts) are used; " +
              "exiting with its code " + std::to_string(code));
        }
        return code;
      }
      Say("restart " + std::to_string(restarts + 1) + " of " + std::to_string(plan_.max_restarts) +
          ": rank " + std::to_string(failed_rank_) + " " + DescribeWaitStatus(failure_status_) +
          "; starting all " + std::to_string(plan_.workers.size()) +
          " ranks again with --resume (from the newest complete checkpoint, or from the start "
          "without one)");
      for (Worker& worker : workers_) {
        for (LineStream& stream : worker.streams) CloseStream(stream);
      }
      workers_.clear();
      stopping_ = killed_ = failed_ = false;
      exit_code_ = 0;
    }
  }

 private:
  static bool StoppedBySignal(int wait_status) {
    if (!WIFEXITED(wait_status)) return false;
    for (int s : kStopSignals) {
      if (WEXITSTATUS(wait_status) == 128 + s) return true;
    }
    return false;
  }

  // Starts every worker with `argv` and supervises them until all have ended.
  StatusOr<int> RunOnce(const std::vector<std::string>& argv) {
    workers_.reserve(plan_.workers.size());
    for (const WorkerSpec& spec : plan_.workers) {
      Status started = Spawn(spec, argv);
      if (!started.ok()) {
        Say("could not start rank " + std::to_string(spec.rank) + "; stopping the others");
        SignalAll(SIGKILL);
        while (CountRunning() > 0) WaitForEvents();
        return started.WithContext("starting rank " + std::to_string(spec.rank));
      }
    }
    while (CountRunning() > 0) WaitForEvents();
    // Output the workers wrote before exiting is in the pipes by now; leftover children of a
    // worker may hold a pipe open, so take what is there without waiting for its end.
    for (Worker& worker : workers_) {
      for (LineStream& stream : worker.streams) {
        Drain(worker, stream);
        FlushPartial(worker, stream);
        CloseStream(stream);
      }
    }
    // After a failure or a stop, whatever a worker left in its process group goes too.
    if (stopping_) SignalAll(SIGKILL);
    return failed_ ? exit_code_ : 0;
  }

  Status Spawn(const WorkerSpec& spec, std::vector<std::string> argv) {
    std::vector<std::string> env = WorkerEnvironment(spec);
    std::vector<char*> env_pointers = CStrings(env);
    std::vector<char*> argv_pointers = CStrings(argv);
    const std::string exec_failed = "hoist launch: cannot execute '" + argv.front() + "'\n";

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) return PosixError("pipe2", "", errno);
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      int error = errno;
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      return PosixError("pipe2", "", error);
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Only async-signal-safe calls from here to exec: the parent may have other threads.
      ::setpgid(0, 0);
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) ::_exit(127);
      // The launcher may have died between fork and prctl; then nobody would kill this worker.
      if (::getppid() != parent) ::_exit(127);
      ::dup2(dev_null_, STDIN_FILENO);
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      struct sigaction by_default = {};
      by_default.sa_handler = SIG_DFL;
      ::sigaction(SIGPIPE, &by_default, nullptr);
      ::sigprocmask(SIG_SETMASK, &signals_.old_mask(), nullptr);
      ::execve(argv_pointers[0], argv_pointers.data(), env_pointers.data());
      ssize_t ignored = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
      (void)ignored;
      ::_exit(127);
    }
    int fork_error = errno;
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (pid < 0) {
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      return PosixError("fork", "", fork_error);
    }
    // Also here, so that the group exists before the first signal whichever side runs first;
    // EACCES after the worker's exec means the worker already did it.
    ::setpgid(pid, pid);
    Worker worker;
    worker.rank = spec.rank;
    worker.pid = pid;
    worker.running = true;
    worker.group_may_live = true;
    worker.streams[0].fd = out_pipe[0];
    worker.streams[0].out_fd = STDOUT_FILENO;
    worker.streams[1].fd = err_pipe[0];
    worker.streams[1].out_fd = STDERR_FILENO;
    for (LineStream& stream : worker.streams) {
      ::fcntl(stream.fd, F_SETFL, ::fcntl(stream.fd, F_GETFL) | O_NONBLOCK);
    }
    workers_.push_back(std::move(worker));
    return Status::Ok();
  }

  int CountRunning() const {
    return static_cast<int>(
        std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; }));
  }

  // One round of poll over the signalfd and every open pipe, then what it found.
  void WaitForEvents() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, LineStream*>> owners;
    fds.push_back({signals_.fd(), POLLIN, 0});
    owners.emplace_back(nullptr, nullptr);
    for (Worker& worker : workers_) {
      for (LineStream& stream : worker.streams) {
        if (stream.fd < 0) continue;
        fds.push_back({stream.fd, POLLIN, 0});
        owners.emplace_back(&worker, &stream);
      }
    }
    int timeout_ms = -1;
    if (stopping_ && !killed_) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(kill_deadline_ - Clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count() + 1));
    }
    int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      // Cannot happen with valid descriptors; do not spin, and let the deadline logic run.
      ::usleep(10000);
    }
    for (size_t i = 1; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents != 0) ReadStream(*owners[i].first, *owners[i].second);
    }
    if (ready > 0 && fds[0].revents != 0) ReadSignals();
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) KillAfterGrace();
  }

  void ReadStream(Worker& worker, LineStream& stream) {
    char buffer[65536];
    ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
    if (n > 0) {
      stream.pending.append(buffer, static_cast<size_t>(n));
      EmitLines(worker, stream);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
      FlushPartial(worker, stream);
      CloseStream(stream);
    }
  }

  // Reads what is in the pipe now, without waiting for more.
  void Drain(Worker& worker, LineStream& stream) {
    for (int round = 0; stream.fd >= 0 && round < 1024; ++round) {
      pollfd ready{stream.fd, POLLIN, 0};
      if (::poll(&ready, 1, 0) <= 0) return;
      ReadStream(worker, stream);
    }
  }

  void EmitLines(const Worker& worker, LineStream& stream) {
    const std::string prefix = "[rank " + std::to_string(worker.rank) + "] ";
    size_t start = 0;
    while (true) {
      size_t newline = stream.pending.find('\n', start);
      if (newline == std::string::npos) {
        if (stream.pending.size() - start >= kMaxLineBytes) {
          WriteAll(stream.out_fd, prefix + stream.pending.substr(start, kMaxLineBytes) + "\n");
          start += kMaxLineBytes;
          continue;
        }
        break;
      }
      WriteAll(stream.out_fd, prefix + stream.pending.substr(start, newline + 1 - start));
      start = newline + 1;
    }
    stream.pending.erase(0, start);
  }

  void FlushPartial(const Worker& worker, LineStream& stream) {
    if (stream.pending.empty()) return;
    WriteAll(stream.out_fd, "[rank " + std::to_string(worker.rank) + "] " + stream.pending + "\n");
    stream.pending.clear();
  }

  static void CloseStream(LineStream& stream) {
    if (stream.fd >= 0) ::close(stream.fd);
    stream.fd = -1;
  }

  void ReadSignals() {
    signalfd_siginfo info;
    bool child = false;
    while (::read(signals_.fd(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      if (static_cast<int>(info.ssi_signo) == SIGCHLD) {
        child = true;
      } else {
        OnStopSignal(static_cast<int>(info.ssi_signo));
      }
    }
    // SIGCHLDs merge, so look at every running worker.
    if (child) Reap();
  }

  void Reap() {
    for (Worker& worker : workers_) {
      if (!worker.running) continue;
      int status = 0;
      pid_t done = ::waitpid(worker.pid, &status, WNOHANG);
      if (done != worker.pid) continue;
      worker.running = false;
      worker.wait_status = status;
      // Its last words come before the launcher's line about it.
      for (LineStream& stream : worker.streams) Drain(worker, stream);
      if (ExitCodeOf(status) != 0) OnFailure(worker);
    }
  }

  void OnFailure(const Worker& worker) {
    if (failed_) return;
    failed_ = true;
    exit_code_ = ExitCodeOf(worker.wait_status);
    failed_rank_ = worker.rank;
    failure_status_ = worker.wait_status;
    std::string line = "rank " + std::to_string(worker.rank) + " (pid " +
                       std::to_string(worker.pid) + ") " + DescribeWaitStatus(worker.wait_status);
    // hoist train stopped by a signal exits 128 + its number, after a checkpoint: the job was
    // stopped, not broken, and the launcher ends with the same code.
    if (forwarded_signal_ != 0 && WIFEXITED(worker.wait_status) &&
        exit_code_ == 128 + forwarded_signal_) {
      line += " (stopped by the forwarded " + std::string(SignalName(forwarded_signal_)) + ")";
    }
    const int others = CountRunning();
    if (!stopping_ && others > 0) {
      line +=
          "; stopping the other " + std::to_string(others) + " worker" + (others == 1 ? "" : "s");
    }
    Say(line);
    if (!stopping_) StartStopping(SIGTERM);
  }

  void OnStopSignal(int signal_number) {
    if (!stopping_) {
      Say(std::string("got ") + SignalName(signal_number) + "; forwarding it to the " +
          std::to_string(CountRunning()) + " running workers");
      forwarded_signal_ = signal_number;
      StartStopping(signal_number);
    } else if (!killed_) {
      Say(std::string("got ") + SignalName(signal_number) + " again; killing the workers now");
      KillAfterGrace();
    }
  }

  void StartStopping(int signal_number) {
    stopping_ = true;
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(plan_.grace_period_s));
    SignalAll(signal_number);
  }

  void KillAfterGrace() {
    killed_ = true;
    std::string ranks;
    for (const Worker& worker : workers_) {
      if (!worker.running) continue;
      if (!ranks.empty()) ranks += ", ";
      ranks += std::to_string(worker.rank);
    }
    if (!ranks.empty()) {
      char grace[32];
      std::snprintf(grace, sizeof(grace), "%g", plan_.grace_period_s);
      Say("rank " + ranks + " still running " + grace + " s after being asked to stop; " +
          "sending SIGKILL");
    }
    SignalAll(SIGKILL);
  }

  // Signals every worker's process group, including those of workers that have exited but may
  // have left children behind.
  void SignalAll(int signal_number) {
    for (Worker& worker : workers_) {
      if (!worker.group_may_live) continue;
      if (::kill(-worker.pid, signal_number) != 0 && errno == ESRCH) {
        worker.group_may_live = false;
        // A worker that has not yet joined its own group still gets the signal.
        if (worker.running) ::kill(worker.pid, signal_number);
      }
    }
  }

  const LaunchPlan& plan_;
  SignalScope signals_;
  int dev_null_ = -1;
  std::vector<Worker> workers_;
  bool stopping_ = false;  // workers have been asked to stop
  bool killed_ = false;    // SIGKILL has been sent
  Clock::time_point kill_deadline_;
  bool failed_ = false;
  int exit_code_ = 0;
  int failed_rank_ = 0;  // the first worker to fail in the last run, and its wait status
  int failure_status_ = 0;
  int forwarded_signal_ = 0;  // the stop signal the launcher got and passed on, 0 before one
};

}  // namespace

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "was killed by " + SignalText(WTERMSIG(wait_status));
  return "ended with wait status " + std::to_string(wait_status);
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

StatusOr<int> RunLocalWorkers(const LaunchPlan& plan) {
  HOIST_CHECK(plan.launcher == LauncherKind::kLocal && !plan.workers.empty())
      << "RunLocalWorkers needs a local plan with workers";
  Supervisor supervisor(plan);
  return supervisor.Run();
}

}  // namespace hoist::launcher
