// `hoist launch` through the built binary: flags, --dry-run, and the supervisor with /bin/sh
// workers (environment, output prefixes, failures, signals, no process left behind).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/launcher/launch_test_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

fs::path TempDir(const std::string& name) {
  return hoist::launcher::testing::TempDir("hoist_launch_", name);
}

using hoist::launcher::testing::Contains;
using hoist::launcher::testing::Lines;
using hoist::launcher::testing::WriteFile;

// `hoist ARGS` as a child with its stdout and stderr captured apart.
class Hoist {
 public:
  explicit Hoist(const std::vector<std::string>& args,
                 const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = {std::string(HOIST_BINARY_DIR) + "/hoist"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::set<std::string> replaced;
    for (const std::string& entry : extra_env) replaced.insert(entry.substr(0, entry.find('=')));
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry(*e);
      if (replaced.count(entry.substr(0, entry.find('='))) == 0) env.push_back(entry);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> argv_c, env_c;
    for (std::string& s : argv) argv_c.push_back(s.data());
    for (std::string& s : env) env_c.push_back(s.data());
    argv_c.push_back(nullptr);
    env_c.push_back(nullptr);
    int out[2], err[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    EXPECT_EQ(posix_spawn(&pid_, argv_c[0], &actions, nullptr, argv_c.data(), env_c.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
  }
  ~Hoist() {
    if (exit_code_ == kRunning) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

  // Reads output until `done()` holds or the process ends; false after `timeout_s`.
  bool ReadUntil(const std::function<bool()>& done, double timeout_s = 10) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (!done()) {
      if (Clock::now() > deadline) return false;
      if (!Pump(50) && fds_[0] < 0 && fds_[1] < 0) return done();
    }
    return true;
  }

  // The exit code (128 + signal for a signal), or -1 if it is still running after `timeout_s`.
  int Wait(double timeout_s = 10) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (exit_code_ == kRunning && Clock::now() < deadline) {
      Pump(50);
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        while (Pump(0)) {
        }
      }
    }
    return exit_code_ == kRunning ? -1 : exit_code_;
  }

 private:
  static constexpr int kRunning = -1000;

  // One poll round; true if anything was read.
  bool Pump(int timeout_ms) {
    pollfd fds[2];
    int n = 0;
    for (int i = 0; i < 2; ++i) {
      if (fds_[i] >= 0) fds[n++] = {fds_[i], POLLIN, 0};
    }
    if (n == 0) {
      if (timeout_ms > 0) usleep(timeout_ms * 1000);
      return false;
    }
    if (poll(fds, n, timeout_ms) <= 0) return false;
    bool got = false;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      int which = fds[i].fd == fds_[0] ? 0 : 1;
      char buffer[65536];
      ssize_t r = read(fds_[which], buffer, sizeof(buffer));
      if (r > 0) {
        (which == 0 ? out_ : err_).append(buffer, r);
        got = true;
      } else {
        close(fds_[which]);
        fds_[which] = -1;
      }
    }
    return got;
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::string out_, err_;
  int exit_code_ = kRunning;
};

// Gone or a zombie nobody has reaped yet (an orphan waits for init): either way not running.
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return true;
  char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

bool AllGoneWithin(const std::vector<pid_t>& pids, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    bool all = true;
    for (pid_t pid : pids) all = all && ProcessGone(pid);
    if (all) return true;
    if (Clock::now() > deadline) return false;
    usleep(20000);
  }
}

// Numbers that follow `word` on lines of `text`: "pid 123" -> 123.
std::vector<pid_t> NumbersAfter(const std::string& text, const std::string& word) {
  std::vector<pid_t> numbers;
  std::regex pattern(word + " ([0-9]+)( ([0-9]+))?");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    numbers.push_back(std::stoi((*it)[1]));
    if ((*it)[3].matched) numbers.push_back(std::stoi((*it)[3]));
  }
  return numbers;
}

std::vector<std::string> ShWorkers(int n, const std::string& script,
                                   const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args = {"launch", "-n", std::to_string(n), "--exec"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", "/bin/sh", "-c", script});
  return args;
}

TEST(LaunchCli, HelpDescribesTheCommand) {
  Hoist hoist({"launch", "--help"});
  ASSERT_EQ(hoist.Wait(), 0) << hoist.err();
  EXPECT_TRUE(Contains(hoist.out(), "--hostfile")) << hoist.out();
  EXPECT_TRUE(Contains(hoist.out(), "--exec")) << hoist.out();
}

TEST(LaunchCli, ArgumentErrorsEndInOneClearMessage) {
  fs::path dir = TempDir("cli_errors");
  const std::string hosts = WriteFile(dir / "hosts", "localhost slots=2\n");
  const std::string bad_hosts = WriteFile(dir / "bad", "localhost slots=2\nbroken line here\n");
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const Case cases[] = {
      {{"launch", "-H", hosts, "-i", "localhost", "-e", "localhost:1", "--", "train"},
       "--include and --exclude cannot be used together"},
      {{"launch", "-H", bad_hosts, "--", "train"}, "line 2"},
      {{"launch", "-H", hosts, "-i", "worker-3", "--", "train"}, "worker-3"},
      {{"launch", "-H", hosts, "-i", "localhost:2", "--", "train"}, "slot 2 on localhost"},
      {{"launch", "-n", "2"}, "after --"},
      {{"launch", "-n", "2", "--", "trian"}, "'trian' is not a hoist subcommand"},
      {{"launch", "-n", "2", "--launcher", "pdsh", "--", "train"}, "pdsh is not supported"},
      {{"launch", "-n", "2", "--exec", "--", "./not-here.sh"}, "not-here.sh"},
  };
  for (const Case& c : cases) {
    Hoist hoist(c.args);
    EXPECT_EQ(hoist.Wait(), 1) << c.expected << ": " << hoist.err();
    EXPECT_TRUE(Contains(hoist.err(), "hoist: error: ")) << hoist.err();
    EXPECT_TRUE(Contains(hoist.err(), c.expected))
        << "wanted '" << c.expected << "' in: " << hoist.err();
    EXPECT_EQ(Lines(hoist.err()).size(), 1u) << hoist.err();
  }
  Hoist zero({"launch", "-n", "0", "--", "train"});
  EXPECT_NE(zero.Wait(), 0);
  EXPECT_TRUE(Contains(zero.err(), "-n")) << zero.err();
}

std::string ResolvedHoist() { return fs::canonical(fs::path(HOIST_BINARY_DIR) / "hoist").string(); }

TEST(LaunchCli, LocalDryRunPrintsEachWorkersEnvironmentAndCommand) {
  // The threads as the environment sets them, so that the launcher adds none on any machine.
  Hoist hoist(
      {"launch", "-n", "2", "--master_port", "4242", "--dry-run", "--", "train", "-c", "job.json"},
      {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"});
  ASSERT_EQ(hoist.Wait(), 0) << hoist.err();
  std::vector<std::string> lines = Lines(hoist.out());
  ASSERT_EQ(lines.size(), 2u) << hoist.out();
  std::smatch match;
  std::set<std::string> job_ids;
  for (int r = 0; r < 2; ++r) {
    std::regex line("RANK=" + std::to_string(r) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(r) +
                    " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=4242 "
                    "HOIST_JOB_ID=(hoist-[0-9a-f]+-[0-9]+-[0-9a-f]+) (.*) train -c job.json");
    ASSERT_TRUE(std::regex_match(lines[r], match, line)) << lines[r];
    job_ids.insert(match[1]);
    EXPECT_EQ(match[2], ResolvedHoist());
  }
  EXPECT_EQ(job_ids.size(), 1u) << "one job id for all workers";
  Hoist again({"launch", "-n", "2", "--dry-run", "--", "train"});
  ASSERT_EQ(again.Wait(), 0);
  EXPECT_FALSE(Contains(again.out(), *job_ids.begin())) << "a new launch, a new job id";
}

TEST(LaunchCli, MpirunDryRunPrintsTheCommandLine) {
  fs::path dir = TempDir("dry_mpirun");
  const std::string hosts = WriteFile(dir / "hosts", "worker-0 slots=2\nworker-1 slots=2\n");
  Hoist hoist({"launch", "-H", hosts, "--launcher", "mpirun", "--dry-run", "--", "train", "-c",
               "job.json"});
  ASSERT_EQ(hoist.Wait(), 0) << hoist.err();
  std::regex line(
      "mpirun -np 4 --hostfile " + hosts +
      " -x MASTER_ADDR=worker-0 -x MASTER_PORT=29500 -x HOIST_JOB_ID=hoist-[-0-9a-f]+ " +
      ResolvedHoist() + " train -c job.json\n");
  EXPECT_TRUE(std::regex_match(hoist.out(), line)) << hoist.out();
}

TEST(LaunchCli, SrunDryRunPrintsTheCommandLine) {
  Hoist hoist({"launch", "-n", "16", "--num_nodes", "2", "--launcher", "srun", "--dry-run",
               "--exec", "--", "./prog", "a b"});
  ASSERT_EQ(hoist.Wait(), 0) << hoist.err();
  std::regex line(
      "srun -n 16 --kill-on-bad-exit=1 --nodes=2 "
      "--export=ALL,MASTER_PORT=29500,HOIST_JOB_ID=hoist-[-0-9a-f]+ ./prog 'a b'\n");
  EXPECT_TRUE(std::regex_match(hoist.out(), line)) << hoist.out();
}

TEST(LaunchCli, MissingMpirunIsNamed) {
  fs::path dir = TempDir("no_mpirun");
  Hoist hoist({"launch", "-n", "2", "--launcher", "mpirun", "--", "train"},
              {"PATH=" + dir.string()});
  EXPECT_EQ(hoist.Wait(), 1);
  EXPECT_TRUE(Contains(hoist.err(), "mpirun is not on PATH")) << hoist.err();
}

TEST(LaunchCli, LocalLauncherRefusesOtherHosts) {
  fs::path dir = TempDir("other_hosts");
  const std::string hosts = WriteFile(dir / "hosts", "localhost slots=2\nworker-1 slots=2\n");
  Hoist hoist({"launch", "-H", hosts, "--", "train"});
  EXPECT_EQ(hoist.Wait(), 1);
  EXPECT_TRUE(Contains(hoist.err(), "worker-1")) << hoist.err();
  EXPECT_TRUE(Contains(hoist.err(), "--launcher mpirun")) << hoist.err();
}

TEST(LaunchCli, WorkersGetTheirRankEnvironment) {
  // Variables of an outer launcher must not reach the workers: core/rank_env.h reads them first.
  Hoist hoist(ShWorkers(3,
                        "echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                        "$MASTER_PORT $HOIST_JOB_ID ${SLURM_PROCID-unset}\""),
              {"SLURM_PROCID=5", "SLURM_NTASKS=9"});
  ASSERT_EQ(hoist.Wait(), 0) << hoist.out() << hoist.err();
  std::set<std::string> job_ids;
  for (int r = 0; r < 3; ++r) {
    std::regex line("\\[rank " + std::to_string(r) + "\\] env " + std::to_string(r) + " 3 " +
                    std::to_string(r) + " 3 127.0.0.1 29500 (hoist-[-0-9a-f]+) unset");
    std::smatch match;
    bool found = false;
    for (const std::string& text : Lines(hoist.out())) {
      if (std::regex_match(text, match, line)) {
        found = true;
        job_ids.insert(match[1]);
      }
    }
    EXPECT_TRUE(found) << "rank " << r << " in:\n" << hoist.out();
  }
  EXPECT_EQ(job_ids.size(), 1u);
}

TEST(LaunchCli, OutputIsPrefixedPerWholeLine) {
  // Every line is written in three pieces, so unprefixed or mixed lines would show.
  Hoist hoist(ShWorkers(4,
                        "i=0; while [ $i -lt 200 ]; do printf \"r$RANK\"; printf \":a\"; "
                        "printf \":b\\n\"; i=$((i+1)); done; echo \"oops $RANK\" >&2; "
                        "printf \"tail $RANK\""));
  ASSERT_EQ(hoist.Wait(), 0) << hoist.err();
  std::map<int, int> counts;
  for (const std::string& line : Lines(hoist.out())) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, std::regex("\\[rank ([0-9])\\] (.*)"))) << line;
    const std::string rank = match[1];
    const std::string body = match[2];
    if (body == "tail " + rank) continue;
    ASSERT_EQ(body, "r" + rank + ":a:b") << line;
    ++counts[std::stoi(rank)];
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(counts[r], 200) << "rank " << r;
    EXPECT_TRUE(
        Contains(hoist.out(), "[rank " + std::to_string(r) + "] tail " + std::to_string(r) + "\n"));
    EXPECT_TRUE(
        Contains(hoist.err(), "[rank " + std::to_string(r) + "] oops " + std::to_string(r) + "\n"))
        << hoist.err();
  }
}

TEST(LaunchCli, FailingWorkerStopsItsSiblingsAndGivesItsExitCode) {
  fs::path dir = TempDir("fail3");
  const std::string ready = (dir / "ready").string();
  Hoist hoist(ShWorkers(2, "if [ \"$RANK\" = 1 ]; then while [ ! -e " + ready +
                               " ]; do sleep 0.02; done; echo failing >&2; exit 3; fi; "
                               "echo \"pid $$\"; touch " +
                               ready + "; exec sleep 30"));
  ASSERT_EQ(hoist.Wait(), 3) << hoist.out() << hoist.err();
  EXPECT_TRUE(Contains(hoist.err(), "[rank 1] failing\n")) << hoist.err();
  EXPECT_TRUE(Contains(hoist.err(), "rank 1 (pid ")) << hoist.err();
  EXPECT_TRUE(Contains(hoist.err(), "exited with code 3; stopping the other 1 worker"))
      << hoist.err();
  std::vector<pid_t> pids = NumbersAfter(hoist.out(), "pid");
  ASSERT_EQ(pids.size(), 1u) << hoist.out();
  EXPECT_TRUE(AllGoneWithin(pids, 5)) << "rank 0 is still running";
}

TEST(LaunchCli, WorkerKilledMidRunEndsTheJobAndLeavesNoProcess) {
  // Each worker is a shell with a child; the shell of rank 1 gets kill -9.
  Hoist hoist(ShWorkers(3, "sleep 30 & echo \"pids $$ $!\"; wait"));
  ASSERT_TRUE(hoist.ReadUntil([&] { return NumbersAfter(hoist.out(), "pids").size() == 6; }))
      << hoist.out() << hoist.err();
  std::vector<pid_t> pids = NumbersAfter(hoist.out(), "pids");
  pid_t rank1_shell = 0;
  for (const std::string& line : Lines(hoist.out())) {
    if (line.rfind("[rank 1] pids ", 0) == 0) rank1_shell = NumbersAfter(line, "pids")[0];
  }
  ASSERT_GT(rank1_shell, 0);
  ASSERT_EQ(kill(rank1_shell, SIGKILL), 0);
  EXPECT_EQ(hoist.Wait(10), 128 + SIGKILL) << hoist.err();
  EXPECT_TRUE(Contains(hoist.err(), "rank 1 (pid " + std::to_string(rank1_shell) +
                                        ") was killed by signal 9 (SIGKILL)"))
      << hoist.err();
  EXPECT_TRUE(AllGoneWithin(pids, 5)) << "a worker or its child outlived the launcher";
}

TEST(LaunchCli, SigtermToTheLauncherReachesEveryWorker) {
  Hoist hoist(ShWorkers(3, "trap 'echo \"got TERM\"; exit 7' TERM; echo ready; sleep 30 & wait"));
  ASSERT_TRUE(hoist.ReadUntil([&] { return Lines(hoist.out()).size() == 3; }))
      << hoist.out() << hoist.err();
  ASSERT_EQ(kill(hoist.pid(), SIGTERM), 0);
  EXPECT_EQ(hoist.Wait(10), 7) << hoist.err();
  EXPECT_TRUE(Contains(hoist.err(), "got SIGTERM; forwarding it to the 3 running workers"))
      << hoist.err();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(Contains(hoist.out(), "[rank " + std::to_string(r) + "] got TERM\n"))
        << hoist.out();
  }
}

TEST(LaunchCli, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  fs::path dir = TempDir("grace");
  const std::string ready = (dir / "ready").string();
  Hoist hoist(ShWorkers(2,
                        "if [ \"$RANK\" = 1 ]; then while [ ! -e " + ready +
                            " ]; do sleep 0.02; done; exit 4; fi; trap '' TERM; echo \"pid $$\"; "
                            "touch " +
                            ready + "; while :; do sleep 0.05; done",
                        {"--grace-period", "0.3"}));
  EXPECT_EQ(hoist.Wait(10), 4) << hoist.err();
  EXPECT_TRUE(Contains(hoist.err(), "rank 0 still running 0.3 s after being asked to stop"))
      << hoist.err();
  std::vector<pid_t> pids = NumbersAfter(hoist.out(), "pid");
  ASSERT_EQ(pids.size(), 1u) << hoist.out();
  EXPECT_TRUE(AllGoneWithin(pids, 5));
}

TEST(LaunchCli, KilledLauncherTakesItsWorkersWithIt) {
  Hoist hoist(ShWorkers(2, "echo \"pid $$\"; exec sleep 30"));
  ASSERT_TRUE(hoist.ReadUntil([&] { return NumbersAfter(hoist.out(), "pid").size() == 2; }))
      << hoist.out() << hoist.err();
  std::vector<pid_t> pids = NumbersAfter(hoist.out(), "pid");
  ASSERT_EQ(kill(hoist.pid(), SIGKILL), 0);
  EXPECT_EQ(hoist.Wait(10), 128 + SIGKILL);
  EXPECT_TRUE(AllGoneWithin(pids, 5)) << "workers outlived a killed launcher";
}

TEST(LaunchCli, AllWorkersSucceedingIsSuccess) {
  Hoist hoist(ShWorkers(4, "exit 0"));
  EXPECT_EQ(hoist.Wait(), 0) << hoist.err();
  // Nothing from the launcher but, on a machine of fewer than 4 x OMP_NUM_THREADS cores, how the
  // ranks' threads share them.
  for (const std::string& line : Lines(hoist.err())) {
    EXPECT_TRUE(Contains(line, "hoist launch: 4 ranks on ")) << line;
  }
}

}  // namespace
