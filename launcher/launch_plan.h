// What `hoist launch` will start, decided before anything runs: the hostfile and the
// --include/--exclude filters (DeepSpeed's spelling), the ranks, each worker's environment and
// command, and for mpirun/srun the command line that hands the job to them.
//
// Everything here depends only on its arguments, the hostfile and (for --exec with the local
// launcher) where the program is on PATH, so tests build plans in-process. Thread-compatible;
// nothing blocks beyond reading the hostfile. Starting the workers is launch_supervisor.h's job.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hoist::launcher {

// Who starts the workers: this process (local), Open MPI's mpirun, or Slurm's srun.
enum class LauncherKind { kLocal, kMpirun, kSrun };

// Accepts local, mpirun, srun, and DeepSpeed's names openmpi and slurm, in any case.
StatusOr<LauncherKind> ParseLauncherKind(const std::string& text);
const char* LauncherKindName(LauncherKind kind);

// One line of a hostfile: `worker-0 slots=8`.
struct HostfileEntry {
  std::string host;
  int slots = 0;
  int line = 0;  // 1-based, for messages
};

// Parses hostfile text, DeepSpeed's format: one `HOST slots=N` per line, blank lines and `#`
// comments (whole-line or trailing) allowed. `origin` names the file in messages. A malformed
// line, slots < 1, a host listed twice or a file without hosts is an InvalidArgument error that
// names the line.
StatusOr<std::vector<HostfileEntry>> ParseHostfile(std::string_view text,
                                                   const std::string& origin);
StatusOr<std::vector<HostfileEntry>> ReadHostfile(const std::string& path);

// The slots chosen on one host, ascending; hosts keep the hostfile's order.
struct HostSlots {
  std::string host;
  std::vector<int> slots;
};

// Applies --include or --exclude (at most one may be non-empty) to the hostfile's hosts.
// Both take DeepSpeed's NODE_SPEC[@NODE_SPEC...] with NODE_SPEC = HOST[:SLOT[,SLOT...]]: include
// keeps only what it names (a bare HOST is all its slots), exclude removes it. Unknown hosts,
// slots outside [0, slots), malformed specs and a selection left empty are errors.
StatusOr<std::vector<HostSlots>> SelectSlots(const std::vector<HostfileEntry>& hosts,
                                             const std::string& include,
                                             const std::string& exclude);

constexpr int kDefaultMasterPort = 29500;
constexpr double kDefaultGracePeriodS = 30.0;

// The flags of `hoist launch`, as the user gave them.
struct LaunchRequest {
  int num_workers = 0;   // -n; 0: every selected slot of the hostfile
  std::string hostfile;  // empty: -n workers on this node
  std::string include;
  std::string exclude;
  int num_nodes = 0;  // 0: every host of the hostfile
  LauncherKind launcher = LauncherKind::kLocal;
  std::string master_addr;  // empty: 127.0.0.1 for local, the first host otherwise
  int master_port = kDefaultMasterPort;
  double grace_period_s = kDefaultGracePeriodS;
  // false: `command` is a hoist subcommand and its arguments, run by this same binary.
  // true (--exec): command[0] is any program.
  bool exec = false;
  std::vector<std::string> command;
  // OpenMP (and OpenBLAS) threads for each local worker; 0: the cores divided among the workers
  // of this node, unless OMP_NUM_THREADS is set (LaunchContext: then the workers keep it).
  int threads_per_rank = 0;
  // --max-restarts: times a failed local `train` job is started again with --resume.
  int max_restarts = 0;
};

// Facts about this process and machine that a plan depends on, gathered by the caller.
struct LaunchContext {
  std::string self_exe;                       // the hoist binary that workers run without --exec
  std::string job_id;                         // HOIST_JOB_ID for this launch
  std::vector<std::string> local_host_names;  // hostfile names that mean this node
  std::vector<std::string> subcommands;       // hoist subcommands a worker may run
  std::string path_env;  // PATH, for finding an --exec program for the local launcher
  // The cores this process may use (core/cpu_share.h: UsableCores) and how to say so
  // (DescribeCores); 0: unknown, and the workers' threads are left alone.
  int usable_cores = 0;
  std::string cores_text;
  // OMP_NUM_THREADS's value in the environment (empty: unset): the workers keep it, and it
  // counts against the cores in place of an equal share.
  std::string omp_num_threads;
  std::string omp_wait_policy;  // OMP_WAIT_POLICY's value in the environment; empty: unset
};

// One worker of the local launcher.
struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  int slot = 0;
  // Set on top of the launcher's own environment (after removing kInheritedRankVariables).
  std::vector<std::pair<std::string, std::string>> env;
};

struct LaunchPlan {
  LauncherKind launcher = LauncherKind::kLocal;
  std::string job_id;
  int world_size = 0;
  double grace_period_s = kDefaultGracePeriodS;
  std::vector<HostSlots> hosts;            // empty: left to mpirun or srun
  std::vector<std::string> worker_argv;    // the program and arguments every worker runs
  std::vector<WorkerSpec> workers;         // local launcher only
  std::vector<std::string> launcher_argv;  // mpirun or srun only: the whole command line
  // Local launcher: how the cores were shared among the workers, one line to print; "" when
  // the workers' threads were left alone.
  std::string threads_note;
  // Local launcher: after a rank fails (not when stopped by a signal), all ranks start again
  // with `restart_argv` (worker_argv with --resume) up to this many times.
  int max_restarts = 0;
  std::vector<std::string> restart_argv;
};

// Variables that name a rank for another launcher (core/rank_env.h reads them before RANK).
// The local launcher removes them from its workers' environment: a `hoist launch` started under
// srun or mpirun would otherwise hand every worker the launcher's own rank.
extern const char* const kInheritedRankVariables[];
extern const int kNumInheritedRankVariables;

// Checks the request against the hostfile and the context and decides everything. Every bad
// input is an InvalidArgument (or NotFound for files and programs) error naming the flag.
StatusOr<LaunchPlan> BuildLaunchPlan(const LaunchRequest& request, const LaunchContext& context);

// What --dry-run prints: for the local launcher one line per worker, its environment
// assignments then its command; for mpirun and srun their command line. Shell-quoted, so a line
// can be pasted into a shell.
std::string DescribePlan(const LaunchPlan& plan);

// `word` quoted for a POSIX shell where it needs quoting.
std::string ShellQuote(const std::string& word);

}  // namespace hoist::launcher
