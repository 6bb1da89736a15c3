// Runs `hoist ctl` for the launcher's tests: its exit code, its stdout alone (for JSON) and
// everything it printed.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "tests/launcher/run_hoist.h"

namespace hoist::launcher::testing {

struct CtlResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string all;  // stdout, then stderr
};

// `env hoist ctl ARGS`; stderr goes through a file so that stdout stays clean for JSON.
inline CtlResult RunCtl(const std::string& args, const std::string& env = "") {
  // Named by the process: CTest runs tests of this binary in parallel processes.
  const std::string err =
      ::testing::TempDir() + "/hoist_ctl_stderr_" + std::to_string(::getpid()) + ".txt";
  const std::string command =
      env + " '" + std::string(HOIST_BINARY_DIR) + "/hoist' ctl " + args + " 2>'" + err + "'";
  const CommandResult run = RunShell(command);
  CtlResult result;
  result.exit_code = run.exit_code;
  result.out = run.output;
  char buffer[4096];
  size_t n;
  std::string err_text;
  if (FILE* f = std::fopen(err.c_str(), "r")) {
    while ((n = fread(buffer, 1, sizeof(buffer), f)) > 0) err_text.append(buffer, n);
    std::fclose(f);
  }
  result.all = result.out + err_text;
  return result;
}

}  // namespace hoist::launcher::testing
