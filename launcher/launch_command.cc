// `hoist launch`: the flags, the facts about this machine a plan needs, and handing the plan to
// the local supervisor or to mpirun/srun.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_share.h"
#include "core/posix_error.h"
#include "launcher/commands.h"
#include "launcher/launch_plan.h"
#include "launcher/launch_supervisor.h"

namespace hoist::launcher {
namespace {

const char kLaunchFooter[] = R"(Examples:
  hoist launch -n 4 -- train -c job.json
  hoist launch -H hostfile --include worker-0:0,2@worker-1 --launcher mpirun -- train -c job.json
  hoist launch -n 2 --exec -- /bin/sh -c 'echo rank $RANK of $WORLD_SIZE'

Everything after -- is what each worker runs: a hoist subcommand and its arguments (run by this
same hoist binary), or with --exec any program. The hostfile has one `HOST slots=N` line per host
and # comments; --include/--exclude take HOST[:SLOT[,SLOT...]] joined by @.

The local launcher starts the workers on this node with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and HOIST_JOB_ID set (and CUDA_VISIBLE_DEVICES when the
selection skips slots; OMP_NUM_THREADS and OPENBLAS_NUM_THREADS to share the cores among the
ranks, unless OMP_NUM_THREADS is set; OMP_WAIT_POLICY=passive where the threads outnumber the
cores), prefixes each output line with [rank R], forwards SIGINT/SIGTERM/SIGHUP,
and when one worker fails stops the others (SIGTERM, then SIGKILL after --grace-period) and exits
with that worker's code; with --max-restarts N it then starts every rank again with
`train --resume`, at most N times. mpirun and srun get MASTER_ADDR (when known), MASTER_PORT and
HOIST_JOB_ID exported; ranks then come from their own variables.
)";

std::string SelfExecutable() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "hoist";
  path[n] = '\0';
  return path;
}

// Unique per launch and safe inside a shared-memory object name: no '/', short.
std::string NewJobId() {
  auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::random_device random;
  char id[64];
  std::snprintf(id, sizeof(id), "hoist-%llx-%d-%04x", static_cast<unsigned long long>(now_ms),
                static_cast<int>(::getpid()), static_cast<unsigned>(random() & 0xffff));
  return id;
}

std::vector<std::string> LocalHostNames() {
  std::vector<std::string> names = {"localhost", "127.0.0.1", "::1"};
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') {
    std::string full(host);
    names.push_back(full);
    size_t dot = full.find('.');
    if (dot != std::string::npos) names.push_back(full.substr(0, dot));
  }
  return names;
}

// Replaces this process with mpirun or srun, which then own the workers and their signals.
Status ExecLauncher(const LaunchPlan& plan) {
  std::vector<std::string> argv = plan.launcher_argv;
  std::vector<char*> pointers;
  for (std::string& word : argv) pointers.push_back(word.data());
  pointers.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  ::execvp(pointers[0], pointers.data());
  int error = errno;
  if (error == ENOENT) {
    return NotFoundError(argv.front() + " is not on PATH; install " +
                         (plan.launcher == LauncherKind::kMpirun ? "Open MPI" : "Slurm") +
                         " or load its module, or use --launcher local");
  }
  return PosixError("execvp", argv.front(), error);
}

}  // namespace

void AddLaunchCommand(CLI::App& app, int* exit_code) {
  struct Args {
    LaunchRequest request;
    std::string launcher = "local";
    bool dry_run = false;
  };
  auto args = std::make_shared<Args>();
  LaunchRequest& request = args->request;
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Start a job's ranks and supervise them: -n N -- <hoist subcommand and its arguments>");
  cmd->footer(kLaunchFooter);
  cmd->add_option("-n,--num_workers", request.num_workers,
                  "Workers (ranks) in all; with a hostfile, default: every selected slot")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-H,--hostfile", request.hostfile, "Hosts and their slots: `HOST slots=N` lines");
  cmd->add_option("-i,--include", request.include,
                  "Use only these hosts/slots of the hostfile, e.g. worker-0:0,2@worker-1");
  cmd->add_option("-e,--exclude", request.exclude,
                  "Use all hosts/slots of the hostfile but these, e.g. worker-1:0");
  cmd->add_option("--num_nodes", request.num_nodes, "Use the first K hosts of the hostfile")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--launcher", args->launcher,
                  "Who starts the workers: local (this node), mpirun or srun")
      ->capture_default_str();
  cmd->add_option("--master_addr", request.master_addr,
                  "MASTER_ADDR for the workers (default 127.0.0.1 locally, else the first host)");
  cmd->add_option("--master_port", request.master_port, "MASTER_PORT for the workers")
      ->capture_default_str();
  cmd->add_flag("--dry-run", args->dry_run,
                "Print what would run (each worker's environment and command, or the mpirun or "
                "srun command line) and exit");
  cmd->add_option("--grace-period", request.grace_period_s,
                  "Seconds the workers get to stop after SIGTERM before SIGKILL")
      ->capture_default_str();
  cmd->add_option("--threads-per-rank", request.threads_per_rank,
                  "OpenMP and OpenBLAS threads for each rank (default: this node's cores shared "
                  "among its ranks, unless OMP_NUM_THREADS is set)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-restarts", request.max_restarts,
                  "After a rank fails, start every rank again with `train --resume` (from the "
                  "newest complete checkpoint) at most this many times; not after a stop by a "
                  "signal")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--exec,--no_python", request.exec,
                "The command after -- is any program, not a hoist subcommand");
  cmd->add_option("command", request.command,
                  "After --: the hoist subcommand each worker runs and its arguments");
  cmd->callback([args, exit_code, &app] {
    StatusOr<LauncherKind> kind = ParseLauncherKind(args->launcher);
    if (!kind.ok()) {
      *exit_code = ReportError(kind.status());
      return;
    }
    args->request.launcher = *kind;
    LaunchContext context;
    context.self_exe = SelfExecutable();
    context.job_id = NewJobId();
    context.local_host_names = LocalHostNames();
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      context.subcommands.push_back(sub->get_name());
    }
    const char* path = std::getenv("PATH");
    context.path_env = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
    const CpuLimits cpus = ReadCpuLimits();
    context.usable_cores = UsableCores(cpus);
    context.cores_text = DescribeCores(cpus);
    const char* omp_threads = std::getenv("OMP_NUM_THREADS");
    context.omp_num_threads = omp_threads != nullptr ? omp_threads : "";
    const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
    context.omp_wait_policy = wait_policy != nullptr ? wait_policy : "";
    StatusOr<LaunchPlan> plan = BuildLaunchPlan(args->request, context);
    if (!plan.ok()) {
      *exit_code = ReportError(plan.status());
      return;
    }
    if (args->dry_run) {
      std::cout << DescribePlan(*plan) << std::flush;
      *exit_code = 0;
      return;
    }
    if (plan->launcher != LauncherKind::kLocal) {
      *exit_code = ReportError(ExecLauncher(*plan));
      return;
    }
    if (!plan->threads_note.empty()) std::cerr << "hoist launch: " << plan->threads_note << "\n";
    std::cout.flush();
    StatusOr<int> code = RunLocalWorkers(*plan);
    *exit_code = code.ok() ? *code : ReportError(code.status());
  });
}

}  // namespace hoist::launcher
