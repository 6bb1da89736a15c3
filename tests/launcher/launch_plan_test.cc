// `hoist launch`'s plan, in-process: the hostfile, --include/--exclude, each worker's environment
// and the mpirun/srun command lines.
#include "launcher/launch_plan.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/launch_supervisor.h"
#include "tests/launcher/launch_test_util.h"

namespace hoist::launcher {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) { return testing::TempDir("hoist_launch_plan_", name); }

using testing::Contains;
using testing::Lines;
using testing::WriteFile;

// ---------------------------------------------------------------------------------------------
// Hostfile and --include/--exclude

TEST(Hostfile, ReadsDeepSpeedLinesCommentsAndBlankLines) {
  auto hosts = ParseHostfile(
      "# cluster\n\nworker-0 slots=4\n  worker-1   slots=2   # the small one\n", "hf");
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  ASSERT_EQ(hosts->size(), 2u);
  EXPECT_EQ((*hosts)[0].host, "worker-0");
  EXPECT_EQ((*hosts)[0].slots, 4);
  EXPECT_EQ((*hosts)[0].line, 3);
  EXPECT_EQ((*hosts)[1].host, "worker-1");
  EXPECT_EQ((*hosts)[1].slots, 2);
}

TEST(Hostfile, MalformedLinesAreNamedWithTheirLineNumber) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      {"worker-0 slots=4\nworker-1 slot=4\n", "line 2"},
      {"worker-0 slots=4\nworker-1 slot=4\n", "worker-1 slot=4"},
      {"worker-0\n", "no slots=N"},
      {"worker-0 slots=0\n", "slots='0'"},
      {"worker-0 slots=-2\n", "not a whole number"},
      {"worker-0 slots=four\n", "slots='four'"},
      {"worker-0 slots=4 max_slots=8\n", "unexpected 'max_slots=8'"},
      {"worker-0 slots=4\nworker-0 slots=2\n", "listed twice (first on line 1)"},
      {"worker:0 slots=4\n", "contains ':'"},
      {"# nothing\n\n", "lists no hosts"},
  };
  for (const Case& c : cases) {
    auto hosts = ParseHostfile(c.text, "jobs/hosts");
    ASSERT_FALSE(hosts.ok()) << c.text;
    EXPECT_TRUE(Contains(hosts.status().message(), c.expected))
        << c.text << " -> " << hosts.status().message();
    EXPECT_TRUE(Contains(hosts.status().message(), "jobs/hosts")) << hosts.status().message();
  }
}

TEST(Hostfile, MissingFileIsNamed) {
  auto hosts = ReadHostfile("/nonexistent/hostfile");
  ASSERT_FALSE(hosts.ok());
  EXPECT_EQ(hosts.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(hosts.status().message(), "/nonexistent/hostfile"));
}

std::vector<HostfileEntry> ThreeHosts() {
  return {{"worker-0", 4, 1}, {"worker-1", 4, 2}, {"worker-2", 2, 3}};
}

std::string Render(const std::vector<HostSlots>& hosts) {
  std::string text;
  for (const HostSlots& host : hosts) {
    text += host.host + ":";
    for (size_t i = 0; i < host.slots.size(); ++i) {
      if (i > 0) text += ",";
      text += std::to_string(host.slots[i]);
    }
    text += " ";
  }
  return text;
}

TEST(SelectSlots, NoFilterKeepsEverySlot) {
  auto hosts = SelectSlots(ThreeHosts(), "", "");
  ASSERT_TRUE(hosts.ok());
  EXPECT_EQ(Render(*hosts), "worker-0:0,1,2,3 worker-1:0,1,2,3 worker-2:0,1 ");
}

TEST(SelectSlots, IncludeKeepsNamedSlotsAndWholeHostsInHostfileOrder) {
  auto hosts = SelectSlots(ThreeHosts(), "worker-2@worker-0:2,0,2", "");
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  EXPECT_EQ(Render(*hosts), "worker-0:0,2 worker-2:0,1 ");
}

TEST(SelectSlots, ExcludeRemovesSlotsAndWholeHosts) {
  auto hosts = SelectSlots(ThreeHosts(), "", "worker-1@worker-0:1,3");
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  EXPECT_EQ(Render(*hosts), "worker-0:0,2 worker-2:0,1 ");
}

TEST(SelectSlots, BadFiltersAreClearErrors) {
  struct Case {
    std::string include, exclude, expected;
  };
  const Case cases[] = {
      {"worker-0", "worker-1", "cannot be used together"},
      {"worker-9", "", "host 'worker-9', which is not in the hostfile"},
      {"", "worker-9:0", "--exclude names host 'worker-9'"},
      {"worker-2:2", "", "slot 2 on worker-2, which has slots 0-1"},
      {"worker-0:", "", "no slots after 'worker-0:'"},
      {"worker-0:x", "", "slot 'x'"},
      {"worker-0@@worker-1", "", "empty node spec"},
      {":1", "", "no host name"},
      {"", "worker-0@worker-1@worker-2", "leaves no slots"},
  };
  for (const Case& c : cases) {
    auto hosts = SelectSlots(ThreeHosts(), c.include, c.exclude);
    ASSERT_FALSE(hosts.ok()) << c.include << " / " << c.exclude;
    EXPECT_TRUE(Contains(hosts.status().message(), c.expected))
        << c.include << " / " << c.exclude << " -> " << hosts.status().message();
  }
}

// ---------------------------------------------------------------------------------------------
// The plan

LaunchContext TestContext() {
  LaunchContext context;
  context.self_exe = "/opt/hoist/bin/hoist";
  context.job_id = "hoist-test-1";
  context.local_host_names = {"localhost", "127.0.0.1", "node7"};
  context.subcommands = {"train", "data", "sample", "report", "launch"};
  context.path_env = "/usr/bin:/bin";
  return context;
}

LaunchRequest TrainRequest(int n) {
  LaunchRequest request;
  request.num_workers = n;
  request.command = {"train", "-c", "job.json"};
  return request;
}

std::map<std::string, std::string> EnvOf(const WorkerSpec& worker) {
  return {worker.env.begin(), worker.env.end()};
}

TEST(LaunchPlan, LocalWorkersGetRanksAndTheJobsVariables) {
  auto plan = BuildLaunchPlan(TrainRequest(3), TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->world_size, 3);
  EXPECT_EQ(plan->worker_argv,
            (std::vector<std::string>{"/opt/hoist/bin/hoist", "train", "-c", "job.json"}));
  ASSERT_EQ(plan->workers.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    auto env = EnvOf(plan->workers[r]);
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "29500");
    EXPECT_EQ(env["HOIST_JOB_ID"], "hoist-test-1");
    EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  }
  EXPECT_TRUE(plan->launcher_argv.empty());
}

// The cores of the launcher's node, divided among its workers (issue: two ranks of two OpenMP
// threads each on two cores spun 60-150 times slower than two of one).
LaunchContext OnCores(int cores) {
  LaunchContext context = TestContext();
  context.usable_cores = cores;
  context.cores_text = std::to_string(cores) + " cores";
  return context;
}

TEST(LaunchPlan, WorkersShareTheCoresOfTheNode) {
  auto plan = BuildLaunchPlan(TrainRequest(2), OnCores(2));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const WorkerSpec& worker : plan->workers) {
    auto env = EnvOf(worker);
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["OPENBLAS_NUM_THREADS"], "1");
    EXPECT_EQ(env.count("OMP_WAIT_POLICY"), 0u);
  }
  EXPECT_EQ(plan->threads_note,
            "2 ranks on 2 cores: 1 OpenMP thread each (set OMP_NUM_THREADS or "
            "--threads-per-rank to choose)");
  plan = BuildLaunchPlan(TrainRequest(4), OnCores(16));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[3])["OMP_NUM_THREADS"], "4");
}

TEST(LaunchPlan, MoreWorkersThanCoresWaitPassively) {
  auto plan = BuildLaunchPlan(TrainRequest(3), OnCores(2));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto env = EnvOf(plan->workers[2]);
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(env["OMP_WAIT_POLICY"], "passive");
  EXPECT_NE(plan->threads_note.find("wait passively"), std::string::npos) << plan->threads_note;
  // The user's own wait policy stays, and an active one is named as the cause of spinning.
  LaunchContext context = OnCores(2);
  context.omp_wait_policy = "ACTIVE";
  plan = BuildLaunchPlan(TrainRequest(3), context);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[0]).count("OMP_WAIT_POLICY"), 0u);
  EXPECT_EQ(plan->threads_note.find("wait passively"), std::string::npos) << plan->threads_note;
  EXPECT_NE(plan->threads_note.find("OMP_WAIT_POLICY=ACTIVE from your environment: waiting "
                                    "threads may spin"),
            std::string::npos)
      << plan->threads_note;
  context.omp_wait_policy = "passive";
  plan = BuildLaunchPlan(TrainRequest(3), context);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->threads_note.find("spin"), std::string::npos) << plan->threads_note;
}

TEST(LaunchPlan, AnExplicitThreadCountWins) {
  // OMP_NUM_THREADS in the launcher's environment reaches the workers untouched.
  LaunchContext context = OnCores(8);
  context.omp_num_threads = "4";
  auto plan = BuildLaunchPlan(TrainRequest(2), context);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[0]).count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(plan->threads_note, "");
  // --threads-per-rank wins over both.
  LaunchRequest request = TrainRequest(2);
  request.threads_per_rank = 3;
  plan = BuildLaunchPlan(request, context);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[1])["OMP_NUM_THREADS"], "3");
  EXPECT_EQ(EnvOf(plan->workers[1]).count("OMP_WAIT_POLICY"), 0u);  // 6 threads on 8 cores
  request.threads_per_rank = 5;
  plan = BuildLaunchPlan(request, context);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[1])["OMP_WAIT_POLICY"], "passive");  // 10 on 8
  request.threads_per_rank = -1;
  EXPECT_FALSE(BuildLaunchPlan(request, context).ok());
}

// Clusters often export OMP_NUM_THREADS: the workers keep the count, but where it oversubscribes
// the cores they still wait passively, and the launcher says so (issue 35: 2 ranks of 2 threads
// on 2 cores took 317-802 ms a step, against 7.5-10 ms shared).
TEST(LaunchPlan, AnInheritedThreadCountThatOversubscribesStillWaitsPassively) {
  LaunchContext context = OnCores(2);
  context.omp_num_threads = "2";
  auto plan = BuildLaunchPlan(TrainRequest(2), context);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const WorkerSpec& worker : plan->workers) {
    auto env = EnvOf(worker);
    EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);  // the environment's 2 reaches the worker
    EXPECT_EQ(env.count("OPENBLAS_NUM_THREADS"), 0u);
    EXPECT_EQ(env["OMP_WAIT_POLICY"], "passive");
  }
  EXPECT_EQ(plan->threads_note,
            "2 ranks on 2 cores: 2 OpenMP threads each (OMP_NUM_THREADS from your environment); "
            "more threads than cores, so they wait passively");
  // A nested list counts by its first level, as the OpenMP runtime reads it.
  context.omp_num_threads = " 3,2";
  plan = BuildLaunchPlan(TrainRequest(2), context);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[1])["OMP_WAIT_POLICY"], "passive");
  EXPECT_NE(plan->threads_note.find("3 OpenMP threads each"), std::string::npos)
      << plan->threads_note;
  // The user's own wait policy stays, named where it spins.
  context.omp_wait_policy = "active";
  plan = BuildLaunchPlan(TrainRequest(2), context);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[0]).count("OMP_WAIT_POLICY"), 0u);
  EXPECT_NE(plan->threads_note.find("OMP_WAIT_POLICY=active from your environment: waiting "
                                    "threads may spin"),
            std::string::npos)
      << plan->threads_note;
  // A count that fits the cores, or a value the OpenMP runtime would ignore, is left alone.
  context = OnCores(4);
  for (const char* value : {"2", "banana", "0"}) {
    context.omp_num_threads = value;
    plan = BuildLaunchPlan(TrainRequest(2), context);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(EnvOf(plan->workers[0]).count("OMP_WAIT_POLICY"), 0u) << value;
    EXPECT_EQ(EnvOf(plan->workers[0]).count("OMP_NUM_THREADS"), 0u) << value;
    EXPECT_EQ(plan->threads_note, "") << value;
  }
}

TEST(LaunchPlan, OneWorkerOrUnknownCoresLeaveThreadsAlone) {
  auto plan = BuildLaunchPlan(TrainRequest(1), OnCores(8));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[0]).count("OMP_NUM_THREADS"), 0u);
  plan = BuildLaunchPlan(TrainRequest(2), TestContext());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EnvOf(plan->workers[0]).count("OMP_NUM_THREADS"), 0u);
}

TEST(LaunchPlan, IncludeThatSkipsSlotsMakesOnlyThoseVisible) {
  fs::path dir = TempDir("plan_include");
  LaunchRequest request = TrainRequest(0);
  request.hostfile = WriteFile(dir / "hosts", "node7 slots=4\n").string();
  request.include = "node7:1,3";
  request.master_port = 6000;
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->world_size, 2);
  auto env1 = EnvOf(plan->workers[1]);
  EXPECT_EQ(env1["RANK"], "1");
  EXPECT_EQ(env1["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env1["CUDA_VISIBLE_DEVICES"], "1,3");
  EXPECT_EQ(env1["MASTER_PORT"], "6000");
  EXPECT_EQ(plan->workers[1].slot, 3);
}

TEST(LaunchPlan, FewerWorkersThanSlotsTakesTheFirstSlots) {
  fs::path dir = TempDir("plan_fewer");
  LaunchRequest request = TrainRequest(2);
  request.hostfile = WriteFile(dir / "hosts", "localhost slots=8\n").string();
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->workers.size(), 2u);
  EXPECT_EQ(EnvOf(plan->workers[1])["LOCAL_WORLD_SIZE"], "2");
}

TEST(LaunchPlan, BadRequestsAreClearErrors) {
  fs::path dir = TempDir("plan_errors");
  const std::string two_hosts = WriteFile(dir / "two", "node7 slots=2\nworker-1 slots=2\n");
  struct Case {
    std::function<void(LaunchRequest&)> change;
    std::string expected;
  };
  const Case cases[] = {
      {[](LaunchRequest& r) { r.num_workers = 0; }, "needs -n N"},
      {[](LaunchRequest& r) { r.command.clear(); }, "after --"},
      {[](LaunchRequest& r) { r.command = {"trian"}; }, "'trian' is not a hoist subcommand"},
      {[](LaunchRequest& r) {
         r.command = {"launch", "-n", "2"};
       },
       "cannot start another"},
      {[](LaunchRequest& r) {
         r.command = {"-c", "job.json"};
       },
       "before --"},
      {[](LaunchRequest& r) { r.include = "localhost"; }, "picks slots of a --hostfile"},
      {[](LaunchRequest& r) { r.num_nodes = 2; }, "--num_nodes"},
      {[](LaunchRequest& r) { r.master_port = 70000; }, "--master_port 70000"},
      {[](LaunchRequest& r) { r.master_addr = "a b"; }, "--master_addr"},
      {[](LaunchRequest& r) { r.grace_period_s = -1; }, "--grace-period"},
      {[&](LaunchRequest& r) {
         r.hostfile = two_hosts;
         r.num_workers = 0;
       },
       "host 'worker-1'"},
      {[&](LaunchRequest& r) {
         r.hostfile = two_hosts;
         r.num_workers = 3;
       },
       "--launcher mpirun"},
      {[&](LaunchRequest& r) {
         r.hostfile = two_hosts;
         r.num_workers = 5;
       },
       "-n 5 asks for more workers than the 4 slots"},
      {[&](LaunchRequest& r) {
         r.hostfile = two_hosts;
         r.num_nodes = 3;
       },
       "--num_nodes 3"},
      {[&](LaunchRequest& r) {
         r.hostfile = two_hosts;
         r.num_nodes = 1;
         r.include = "node7";
       },
       "cannot be combined"},
      {[](LaunchRequest& r) { r.hostfile = "/nonexistent/hosts"; }, "/nonexistent/hosts"},
      {[](LaunchRequest& r) {
         r.exec = true;
         r.command = {"no-such-program-here"};
       },
       "not on PATH"},
      {[](LaunchRequest& r) {
         r.exec = true;
         r.command = {"/nonexistent/prog"};
       },
       "does not exist"},
  };
  for (const Case& c : cases) {
    LaunchRequest request = TrainRequest(2);
    c.change(request);
    auto plan = BuildLaunchPlan(request, TestContext());
    ASSERT_FALSE(plan.ok()) << c.expected;
    EXPECT_TRUE(Contains(plan.status().message(), c.expected))
        << "wanted '" << c.expected << "' in: " << plan.status().message();
  }
}

TEST(LaunchPlan, ExecRunsTheProgramFoundOnPath) {
  LaunchRequest request = TrainRequest(1);
  request.exec = true;
  request.command = {"sh", "-c", "true"};
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(plan->worker_argv[0] == "/usr/bin/sh" || plan->worker_argv[0] == "/bin/sh")
      << plan->worker_argv[0];
  EXPECT_EQ(plan->worker_argv[2], "true");
}

TEST(LaunchPlan, MpirunGetsTheHostfileAndTheExportedVariables) {
  fs::path dir = TempDir("plan_mpirun");
  LaunchRequest request = TrainRequest(0);
  request.launcher = LauncherKind::kMpirun;
  request.hostfile = WriteFile(dir / "hosts", "worker-0 slots=2\nworker-1 slots=2\n").string();
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->launcher_argv,
            (std::vector<std::string>{"mpirun", "-np", "4", "--hostfile", request.hostfile, "-x",
                                      "MASTER_ADDR=worker-0", "-x", "MASTER_PORT=29500", "-x",
                                      "HOIST_JOB_ID=hoist-test-1", "/opt/hoist/bin/hoist", "train",
                                      "-c", "job.json"}));
  EXPECT_TRUE(plan->workers.empty());
}

TEST(LaunchPlan, MpirunWithAFilterNamesTheHostsAndTheirCounts) {
  fs::path dir = TempDir("plan_mpirun_filter");
  LaunchRequest request = TrainRequest(0);
  request.launcher = LauncherKind::kMpirun;
  request.hostfile = WriteFile(dir / "hosts", "worker-0 slots=4\nworker-1 slots=4\n").string();
  request.exclude = "worker-1:2,3";
  request.master_addr = "10.0.0.1";
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->launcher_argv,
            (std::vector<std::string>{"mpirun", "-np", "6", "--host", "worker-0:4,worker-1:2", "-x",
                                      "MASTER_ADDR=10.0.0.1", "-x", "MASTER_PORT=29500", "-x",
                                      "HOIST_JOB_ID=hoist-test-1", "/opt/hoist/bin/hoist", "train",
                                      "-c", "job.json"}));
  request.exclude = "worker-1:0";
  auto skipping = BuildLaunchPlan(request, TestContext());
  ASSERT_FALSE(skipping.ok());
  EXPECT_TRUE(Contains(skipping.status().message(), "skips a slot")) << skipping.status().message();
}

TEST(LaunchPlan, SrunWithoutAHostfileLeavesPlacementToSlurm) {
  LaunchRequest request = TrainRequest(8);
  request.launcher = LauncherKind::kSrun;
  request.num_nodes = 2;
  request.exec = true;
  request.command = {"./my_prog", "--flag"};
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->launcher_argv,
            (std::vector<std::string>{"srun", "-n", "8", "--kill-on-bad-exit=1", "--nodes=2",
                                      "--export=ALL,MASTER_PORT=29500,HOIST_JOB_ID=hoist-test-1",
                                      "./my_prog", "--flag"}));
}

TEST(LaunchPlan, SrunWithAHostfileNeedsTheSameCountOnEveryHost) {
  fs::path dir = TempDir("plan_srun");
  LaunchRequest request = TrainRequest(0);
  request.launcher = LauncherKind::kSrun;
  request.hostfile = WriteFile(dir / "hosts", "worker-0 slots=2\nworker-1 slots=2\n").string();
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->launcher_argv,
            (std::vector<std::string>{
                "srun", "-n", "4", "--kill-on-bad-exit=1", "--nodes=2",
                "--nodelist=worker-0,worker-1", "--ntasks-per-node=2",
                "--export=ALL,MASTER_ADDR=worker-0,MASTER_PORT=29500,HOIST_JOB_ID=hoist-test-1",
                "/opt/hoist/bin/hoist", "train", "-c", "job.json"}));
  request.num_workers = 3;
  auto uneven = BuildLaunchPlan(request, TestContext());
  ASSERT_FALSE(uneven.ok());
  EXPECT_TRUE(Contains(uneven.status().message(), "worker-0: 2, worker-1: 1"))
      << uneven.status().message();
}

TEST(LaunchPlan, LauncherNamesIncludeDeepSpeedsSpellings) {
  EXPECT_EQ(*ParseLauncherKind("local"), LauncherKind::kLocal);
  EXPECT_EQ(*ParseLauncherKind("OpenMPI"), LauncherKind::kMpirun);
  EXPECT_EQ(*ParseLauncherKind("slurm"), LauncherKind::kSrun);
  EXPECT_EQ(ParseLauncherKind("pdsh").status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(ParseLauncherKind("mpi").status().message(), "local, mpirun, srun"));
}

TEST(LaunchPlan, DryRunLinesCanBePastedIntoAShell) {
  EXPECT_EQ(ShellQuote("train"), "train");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("it's here"), "'it'\\''s here'");
  LaunchRequest request = TrainRequest(2);
  request.command = {"train", "--set", "monitor.jsonl.path=log {rank}.jsonl"};
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(Lines(DescribePlan(*plan))[1],
            "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
            "MASTER_PORT=29500 HOIST_JOB_ID=hoist-test-1 /opt/hoist/bin/hoist train --set "
            "'monitor.jsonl.path=log {rank}.jsonl'");
}

TEST(LaunchPlan, RestartsRunTrainWithResume) {
  LaunchRequest request = TrainRequest(2);
  auto plain = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->max_restarts, 0);
  EXPECT_TRUE(plain->restart_argv.empty());
  EXPECT_FALSE(Contains(DescribePlan(*plain), "starts again"));

  request.max_restarts = 3;
  auto plan = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->max_restarts, 3);
  EXPECT_EQ(plan->restart_argv, (std::vector<std::string>{"/opt/hoist/bin/hoist", "train",
                                                          "--resume", "-c", "job.json"}));
  EXPECT_EQ(Lines(DescribePlan(*plan)).back(),
            "# after a rank fails, every rank starts again (at most 3 times) running "
            "/opt/hoist/bin/hoist train --resume -c job.json");

  // Already resuming: once is enough. --resume-from would go back to the same step every time.
  request.command = {"train", "-c", "job.json", "--resume"};
  EXPECT_EQ(
      BuildLaunchPlan(request, TestContext())->restart_argv,
      (std::vector<std::string>{"/opt/hoist/bin/hoist", "train", "-c", "job.json", "--resume"}));
  request.command = {"train", "--resume-from", "ck/step_4",
                     "-c",    "job.json",      "--resume-from=ck/step_2"};
  auto from = BuildLaunchPlan(request, TestContext());
  ASSERT_TRUE(from.ok());
  EXPECT_EQ(from->worker_argv[2], "--resume-from");
  EXPECT_EQ(from->restart_argv, (std::vector<std::string>{"/opt/hoist/bin/hoist", "train",
                                                          "--resume", "-c", "job.json"}));
}

TEST(LaunchPlan, RestartsNeedALocalTrainJob) {
  LaunchRequest request = TrainRequest(2);
  request.max_restarts = 1;
  request.command = {"sample", "-c", "job.json"};
  auto other = BuildLaunchPlan(request, TestContext());
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(Contains(other.status().message(), "the workers run 'sample'"))
      << other.status().message();
  request.command = {"/bin/sh", "-c", "exit 1"};
  request.exec = true;
  EXPECT_FALSE(BuildLaunchPlan(request, TestContext()).ok());
  request = TrainRequest(2);
  request.max_restarts = 1;
  request.launcher = LauncherKind::kMpirun;
  auto mpirun = BuildLaunchPlan(request, TestContext());
  ASSERT_FALSE(mpirun.ok());
  EXPECT_TRUE(Contains(mpirun.status().message(), "--max-restarts needs --launcher local"))
      << mpirun.status().message();
  request = TrainRequest(2);
  request.max_restarts = -1;
  auto negative = BuildLaunchPlan(request, TestContext());
  ASSERT_FALSE(negative.ok());
  EXPECT_TRUE(Contains(negative.status().message(), "--max-restarts -1"))
      << negative.status().message();
}

TEST(LaunchPlan, WaitStatusesBecomeShellExitCodes) {
  int exited_3 = 0, killed_9 = 0;
  for (int* status : {&exited_3, &killed_9}) {
    pid_t pid = fork();
    if (pid == 0) {
      if (status == &exited_3) _exit(3);
      raise(SIGKILL);
    }
    ASSERT_EQ(waitpid(pid, status, 0), pid);
  }
  EXPECT_EQ(ExitCodeOf(exited_3), 3);
  EXPECT_EQ(DescribeWaitStatus(exited_3), "exited with code 3");
  EXPECT_EQ(ExitCodeOf(killed_9), 137);
  EXPECT_EQ(DescribeWaitStatus(killed_9), "was killed by signal 9 (SIGKILL)");
}

}  // namespace
}  // namespace hoist::launcher
