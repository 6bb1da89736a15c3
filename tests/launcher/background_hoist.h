// `hoist ARGS` started in the background by a CLI test, its stdout and stderr in files, for
// tests that act on a running job (the control service, signals) and then wait for its end.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace hoist::launcher::testing {

inline std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `hoist ARGS` with one OpenMP thread, its stdout and stderr in files of `dir`. Killed (SIGKILL;
// the ranks of `hoist launch` die with it) if it is still running when the test ends.
class Background {
 public:
  using Clock = std::chrono::steady_clock;

  Background(const std::filesystem::path& dir, const std::vector<std::string>& args)
      : out_(dir / "stdout.txt"), err_(dir / "stderr.txt") {
    std::vector<std::string> argv = {std::string(HOIST_BINARY_DIR) + "/hoist"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::set<std::string> replaced = {"OMP_NUM_THREADS", "HOIST_CONTROL_TOKEN",
                                            "HOIST_LOG_LEVEL"};
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      if (replaced.count(entry.substr(0, entry.find('='))) == 0) env.push_back(entry);
    }
    env.push_back("OMP_NUM_THREADS=1");
    std::vector<char*> argv_c, env_c;
    for (std::string& s : argv) argv_c.push_back(s.data());
    for (std::string& s : env) env_c.push_back(s.data());
    argv_c.push_back(nullptr);
    env_c.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(posix_spawn(&pid_, argv_c[0], &actions, nullptr, argv_c.data(), env_c.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Background() {
    if (exit_code_ == kRunning && pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  std::string out() const { return ReadAll(out_); }
  std::string err() const { return ReadAll(err_); }

  // The exit code, or -1 while it still runs after `timeout_s`.
  int Wait(double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (exit_code_ == kRunning) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_code_;
  }

  // The address of the line "control: serving ADDR" rank 0 logs; "" if none within the time
  // or if the job ended first.
  std::string ControlAddress(double timeout_s = 60) {
    const std::regex serving("control: serving (\\S+)");
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < deadline && Wait(0) == -1) {
      std::smatch match;
      const std::string text = err();
      if (std::regex_search(text, match, serving)) return match[1];
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "";
  }

 private:
  static constexpr int kRunning = -1000;
  std::filesystem::path out_, err_;
  pid_t pid_ = -1;
  int exit_code_ = kRunning;
};

}  // namespace hoist::launcher::testing
