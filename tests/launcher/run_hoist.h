// Running the hoist binary (or any shell command) from a CLI test and collecting what it printed
// and how it exited.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace hoist::launcher::testing {

struct CommandResult {
  int exit_code = -1;  // -1: the shell could not be started, or the command was killed
  std::string output;  // what the command wrote to its standard output
};

// Runs `command` through /bin/sh and reads its standard output to the end.
inline CommandResult RunShell(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// `env hoist ARGS` in `dir` with one OpenMP thread. The output holds stderr too, unless
// `merge_stderr` is false (then stderr is dropped and the output is stdout alone, for JSON).
inline CommandResult RunHoist(const std::string& args, const std::filesystem::path& dir,
                              const std::string& env = "", bool merge_stderr = true) {
  return RunShell("cd '" + dir.string() + "' && " + env + " OMP_NUM_THREADS=1 '" +
                  std::string(HOIST_BINARY_DIR) + "/hoist' " + args +
                  (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

}  // namespace hoist::launcher::testing
