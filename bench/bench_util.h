// Helpers shared by the CPU benchmarks: a warmed-up median timer, seeded random inputs, and the
// Python child that measures an anchor.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/random.h"

extern char** environ;

namespace hoist::bench {

// Median of `runs` timings of fn(), after one untimed warm-up call (first touch of pages, BLAS
// buffers, the kernels' scratch).
template <typename Fn>
double MedianSeconds(int runs, Fn fn) {
  using Clock = std::chrono::steady_clock;
  fn();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// n values uniform in [lo, hi), deterministic in `seed`.
inline std::vector<float> RandomVector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + static_cast<float>(rng.Uniform()) * (hi - lo);
  return v;
}

// The --set overrides that make the demo job a quiet run of `steps` steps for a benchmark: no
// evaluation, no JSONL log, no progress lines, no checkpoints, the warm-up schedule over the run.
inline std::vector<std::string> QuietRunOverrides(int64_t steps) {
  const std::string n = std::to_string(steps);
  return {"train.steps=" + n,
          "train.eval_interval=0",
          "data.val=\"\"",
          "scheduler.params.total_num_steps=" + n,
          "scheduler.params.warmup_num_steps=1",
          "monitor.jsonl.path=\"\"",
          "steps_per_print=0",
          "checkpoint.dir=\"\"",
          "checkpoint.interval_steps=0"};
}

// One command-line flag: "--name VALUE" handed to `set`, or (with `on`) a switch without a value.
struct Flag {
  const char* name;
  std::function<void(const std::string& value)> set;
  bool* on = nullptr;
};

// Applies argv to `flags`; anything else, or a missing value, prints `usage` and exits 2.
inline void ParseFlags(int argc, char** argv, const std::vector<Flag>& flags, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    const auto match = std::find_if(flags.begin(), flags.end(),
                                    [&](const Flag& f) { return std::string(f.name) == argv[i]; });
    if (match == flags.end() || (match->on == nullptr && i + 1 >= argc)) {
      std::fprintf(stderr, "usage: %s\n", usage);
      std::exit(2);
    }
    if (match->on != nullptr) {
      *match->on = true;
    } else {
      match->set(argv[++i]);
    }
  }
}

// Where benchmarks put scratch files by default: $TMPDIR, else /var/tmp (on disk, unlike /tmp
// on some systems).
inline std::string ScratchParent() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr ? tmp : "/var/tmp";
}

// Runs `python -c script args...` and returns what it wrote to stdout ("" when it could not be
// started); its stderr is the bench's.
inline std::string RunPythonScript(const std::string& python, const char* script,
                                   const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> all = {python, "-c", script};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  if (rc == 0) {
    char buf[256];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(got));
    int status = 0;
    waitpid(pid, &status, 0);
  }
  close(fds[0]);
  return out;
}

}  // namespace hoist::bench
