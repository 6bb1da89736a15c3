// The local launcher's supervisor: starts a plan's workers on this node and watches them until
// every one has ended.
//
// - Each worker runs in its own process group with stdin from /dev/null. Every line it writes to
//   stdout or stderr reaches the launcher's stdout or stderr prefixed with `[rank R] `, one whole
//   line per write, so lines of different ranks never mix. A line longer than 1 MiB is cut into
//   pieces of that size; a last line without a newline gets one.
// - SIGINT, SIGTERM and SIGHUP sent to the launcher are forwarded to every worker's process
//   group; workers still running a grace period later get SIGKILL, and so does everything at
//   once on a second such signal.
// - The first worker to exit non-zero or by a signal ends the job: one line names its rank and
//   how it ended, the other workers get SIGTERM, then SIGKILL after the grace period, and the
//   launcher's exit code is that worker's (128 + the signal number for a signal, as shells do).
//   All workers exiting 0 gives 0, also after a forwarded signal. (`hoist train` stopped by a
//   signal exits 128 + its number, after a checkpoint: the launcher then reports and exits the
//   same.)
// - With `plan.max_restarts` > 0, a failure (not a stop: no forwarded signal, and the failing
//   worker did not exit 128 + SIGINT, SIGTERM or SIGHUP) is followed, once every worker has
//   ended, by one line naming the restart and its cause and a fresh start of every worker with
//   `plan.restart_argv`, at most that many times; the exit code is then the last run's.
// - Each worker asks the kernel for SIGKILL when the launcher dies (PR_SET_PDEATHSIG, checked
//   against the launcher having died already), so a killed launcher leaves no worker behind.
//   Processes a worker starts itself are its own to stop in that case; while the launcher lives,
//   stopping a worker signals its whole process group.
//
// Blocks until the workers have ended. Temporarily blocks those signals and SIGCHLD for the
// calling thread and ignores SIGPIPE; call it from the main thread of a process that has no other
// threads that could take those signals.
#pragma once

#include "core/status.h"
#include "launcher/launch_plan.h"

namespace hoist::launcher {

// Runs `plan.workers` (a local plan) and returns the exit code the launcher should end with; a
// Status error only when the workers could not be started (pipes, fork), after stopping any
// that were.
StatusOr<int> RunLocalWorkers(const LaunchPlan& plan);

// How a worker ended, for the launcher's message and exit code: "exited with code 3" or "was
// killed by signal 9 (SIGKILL)". `wait_status` is from waitpid.
std::string DescribeWaitStatus(int wait_status);
int ExitCodeOf(int wait_status);

}  // namespace hoist::launcher
