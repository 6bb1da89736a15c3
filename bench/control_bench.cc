// What watching a job costs it: training steps of a small model with the control service and the
// metrics endpoint idle, against the same steps while 50 clients poll GetStatus and Prometheus
// scrapes the endpoint at 10 Hz. Both kinds of run serve (the control server on the job's own
// JobController, the exporter on an ephemeral port); only the load differs. The clients run in a
// process of their own, so that the job's CPU counts serving alone. The two kinds of run
// alternate (ABBA), so that a slow spell of a shared machine falls on both, and each pair gives
// its own ratio. It prints what serving costs per request with the job idle (the job's process
// and the clients' apart), then the ratio loaded/idle of the median step time (the aim: < 1.02).
// On a machine whose every core trains, the clients' own CPU also comes out of the training, so
// the ratio there is an upper bound of what clients on other machines would cost.
//
//   control_bench [--steps N] [--reps R] [--clients C] [--client-hz H] [--scrape-hz S]
//
// --client-hz is each client's GetStatus rate (0: back to back, as fast as the server answers);
// --scrape-hz 0 scrapes nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/observe/control.h"
#include "runtime/observe/control_server.h"
#include "runtime/train/trainer.h"

#if HOIST_HAVE_GRPC
#include <grpcpp/grpcpp.h>

#include "hoist/v1/control.grpc.pb.h"
#endif

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int steps = 40;
  int reps = 4;
  int clients = 50;
  double client_hz = 10;
  double scrape_hz = 10;
};

#if HOIST_HAVE_GRPC

// One GET of 127.0.0.1:port/metrics; the bytes of the answer, or -1.
long Scrape(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  long total = -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const char request[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, request, sizeof(request) - 1) == static_cast<ssize_t>(sizeof(request) - 1)) {
      total = 0;
      char buffer[16384];
      ssize_t n;
      while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) total += n;
    }
  }
  ::close(fd);
  return total;
}

// The clients and the scraper of one loaded run; they stop when the object goes.
class Load {
 public:
  Load(const Options& options, const std::string& control_address, int metrics_port) {
    for (int c = 0; c < options.clients; ++c) {
      threads_.emplace_back([this, options, control_address] {
        // A subchannel of its own per client: 50 clients are 50 connections, as 50 dashboards
        // would be.
        grpc::ChannelArguments arguments;
        arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        auto stub = hoist::v1::JobControl::NewStub(grpc::CreateCustomChannel(
            control_address, grpc::InsecureChannelCredentials(), arguments));
        Pace(options.client_hz, [&] {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
          hoist::v1::JobStatus status;
          (stub->GetStatus(&context, hoist::v1::GetStatusRequest(), &status).ok() ? calls_
                                                                                  : failures_)++;
        });
      });
    }
    if (options.scrape_hz > 0) {
      threads_.emplace_back([this, options, metrics_port] {
        Pace(options.scrape_hz, [&] { (Scrape(metrics_port) > 0 ? scrapes_ : failures_)++; });
      });
    }
    // Connections are made before the clock starts: every client has been answered once.
    while (calls_.load() + failures_.load() < options.clients) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    calls_ = 0;
    scrapes_ = 0;
    failures_ = 0;
  }
  ~Load() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    stopped_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  int64_t calls() const { return calls_.load(); }
  int64_t scrapes() const { return scrapes_.load(); }
  int64_t failures() const { return failures_.load(); }

 private:
  // Calls fn `hz` times a second (back to back when 0) until Stop.
  template <typename Fn>
  void Pace(double hz, Fn fn) {
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(hz > 0 ? 1.0 / hz : 0.0));
    Clock::time_point next = Clock::now();
    while (!stop_.load()) {
      fn();
      if (hz <= 0) continue;
      next += period;
      std::unique_lock<std::mutex> lock(mu_);
      stopped_.wait_until(lock, next, [this] { return stop_.load(); });
    }
  }

  std::mutex mu_;
  std::condition_variable stopped_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> calls_{0}, scrapes_{0}, failures_{0};
  std::vector<std::thread> threads_;
};

double ProcessCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The clients and the scraper in a process of their own (this binary with --load), so that
// the job's process counts only what serving costs it; on the same machine they still compete
// for its cores, which makes the measured ratio an upper bound for clients elsewhere.
class LoadProcess {
 public:
  LoadProcess(const Options& options, const std::string& control_address, int metrics_port) {
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) Die("pipe");
    std::vector<std::string> args = {"/proc/self/exe",
                                     "--load",
                                     control_address,
                                     std::to_string(metrics_port),
                                     std::to_string(options.clients),
                                     std::to_string(options.client_hz),
                                     std::to_string(options.scrape_hz)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) Die("spawn");
    posix_spawn_file_actions_destroy(&actions);
    ::close(to_child[0]);
    ::close(from_child[1]);
    stdin_ = to_child[1];
    stdout_ = ::fdopen(from_child[0], "r");
    char line[64];
    if (std::fgets(line, sizeof(line), stdout_) == nullptr) Die("load process did not start");
  }

  struct Counts {
    double calls = 0, scrapes = 0, failures = 0;
    double cpu_s = 0;  // the load process's own CPU time
  };
  Counts Finish() {
    ::close(stdin_);
    Counts counts;
    if (std::fscanf(stdout_, "%lf %lf %lf", &counts.calls, &counts.scrapes, &counts.failures) != 3)
      Die("load process gave no counts");
    std::fclose(stdout_);
    int status = 0;
    rusage usage{};
    ::wait4(pid_, &status, 0, &usage);
    counts.cpu_s = Seconds(usage.ru_utime) + Seconds(usage.ru_stime);
    return counts;
  }

 private:
  static double Seconds(const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); }
  [[noreturn]] static void Die(const char* what) {
    std::fprintf(stderr, "control_bench: %s failed\n", what);
    std::exit(1);
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  FILE* stdout_ = nullptr;
};

// --load ADDRESS METRICS_PORT CLIENTS CLIENT_HZ SCRAPE_HZ: runs the load until stdin closes,
// then prints "calls scrapes failures".
int LoadMain(char** argv) {
  Options options;
  options.clients = std::atoi(argv[3]);
  options.client_hz = std::atof(argv[4]);
  options.scrape_hz = std::atof(argv[5]);
  auto load = std::make_unique<Load>(options, argv[1], std::atoi(argv[2]));
  std::printf("ready\n");
  std::fflush(stdout);
  char buffer[64];
  while (::read(0, buffer, sizeof(buffer)) > 0) {
  }
  const int64_t calls = load->calls(), scrapes = load->scrapes(), failures = load->failures();
  load.reset();
  std::printf("%lld %lld %lld\n", static_cast<long long>(calls), static_cast<long long>(scrapes),
              static_cast<long long>(failures));
  return 0;
}

hoist::runtime::Config BenchConfig(const Options& options) {
  const std::string steps = std::to_string(options.steps);
  auto config = hoist::runtime::LoadConfig(
      "",
      {"model.n_layer=4", "model.n_head=4", "model.n_embd=128", "model.seq_len=64",
       "train_micro_batch_size_per_gpu=4", "gradient_accumulation_steps=1", "train.steps=" + steps,
       "scheduler.params.total_num_steps=" + steps, "scheduler.params.warmup_num_steps=2",
       "train.eval_interval=0", "monitor.jsonl.path=\"\"", "steps_per_print=0",
       "checkpoint.dir=\"\"", "checkpoint.interval_steps=0", "metrics.enabled=true",
       "metrics.port=0"},
      1);
  if (!config.ok()) {
    std::fprintf(stderr, "control_bench: %s\n", config.status().ToString().c_str());
    std::exit(1);
  }
  return *config;
}

// A job as `hoist train` runs it, with its control server on its own controller.
struct Job {
  explicit Job(const hoist::runtime::Config& config) : controller(config.train.steps, 1, false) {
    hoist::runtime::ControlConfig control;
    control.enabled = true;
    control.port = 0;
    control.require_token = false;  // the clients measure serving, not the token check
    auto started = hoist::runtime::ControlServer::Start(control, &controller);
    hoist::runtime::TrainerOptions options;
    options.controller = &controller;
    auto created = hoist::runtime::Trainer::Create(config, options);
    if (!started.ok() || !created.ok()) {
      std::fprintf(stderr, "control_bench: %s\n",
                   (started.ok() ? created.status() : started.status()).ToString().c_str());
      std::exit(1);
    }
    server = std::move(started).value();
    trainer = std::move(created).value();
  }
  ~Job() { trainer.reset(); }  // shuts the controller down before its server goes

  hoist::runtime::JobController controller;
  std::unique_ptr<hoist::runtime::ControlServer> server;
  std::unique_ptr<hoist::runtime::Trainer> trainer;
};

struct RunResult {
  double step_s = 0;  // wall time of the run over its steps
  double cores = 0;   // the job's process: CPU seconds per second of the run
  double calls_per_s = 0, scrapes_per_s = 0, failures = 0;
};

RunResult RunOnce(const Options& options, const hoist::runtime::Config& config, bool loaded) {
  Job job(config);
  std::unique_ptr<LoadProcess> load;
  if (loaded) {
    load = std::make_unique<LoadProcess>(options, job.server->address(),
                                         job.trainer->metrics()->port());
  }
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  const hoist::Status status = job.trainer->Run();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_s = ProcessCpuSeconds() - cpu_start;
  if (!status.ok()) {
    std::fprintf(stderr, "control_bench: %s\n", status.ToString().c_str());
    std::exit(1);
  }
  RunResult result;
  result.step_s = seconds / options.steps;
  result.cores = cpu_s / seconds;
  if (load != nullptr) {
    const LoadProcess::Counts counts = load->Finish();
    result.calls_per_s = counts.calls / seconds;
    result.scrapes_per_s = counts.scrapes / seconds;
    result.failures = counts.failures;
  }
  return result;
}

// What serving the load costs the job's process while it does not train, and what the clients
// cost theirs.
void MeasureServingCost(const Options& options, const hoist::runtime::Config& config) {
  Job job(config);
  hoist::runtime::JobStatus status;
  status.memory.resize(1);
  job.controller.Publish(status);
  LoadProcess load(options, job.server->address(), job.trainer->metrics()->port());
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double cpu_s = ProcessCpuSeconds() - cpu_start;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const LoadProcess::Counts counts = load.Finish();
  const double requests = std::max(1.0, counts.calls + counts.scrapes);
  std::printf(
      "serving alone (no training): %.0f GetStatus/s + %.1f scrapes/s cost the job %.3f "
      "cores (%.0f us per request); the clients %.3f cores (%.0f us per request)\n",
      counts.calls / seconds, counts.scrapes / seconds, cpu_s / seconds, 1e6 * cpu_s / requests,
      counts.cpu_s / seconds, 1e6 * counts.cpu_s / requests);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

int Bench(const Options& options) {
  const hoist::runtime::Config config = BenchConfig(options);
  std::printf(
      "control_bench: %d steps per run, %d runs of each kind (ABBA), GPT-2 %d layers x "
      "%d channels, T=%d, B=%lld, %u hardware threads\n",
      options.steps, options.reps, config.model.n_layer, config.model.n_embd, config.model.seq_len,
      static_cast<long long>(config.train_micro_batch_size_per_gpu),
      std::thread::hardware_concurrency());
  std::printf("load: %d GetStatus clients at %s, metrics scraped at %g Hz\n", options.clients,
              options.client_hz > 0 ? (std::to_string(options.client_hz) + " Hz each").c_str()
                                    : "full speed",
              options.scrape_hz);
  RunOnce(options, config, false);  // warm-up: first touch of pages, BLAS buffers, gRPC
  MeasureServingCost(options, config);
  std::vector<double> idle, loaded, pair_ratios;
  double calls_per_s = 0, scrapes_per_s = 0, failures = 0;
  for (int rep = 0; rep < options.reps; ++rep) {
    const bool loaded_first = rep % 2 == 1;
    RunResult a = RunOnce(options, config, loaded_first);
    RunResult b = RunOnce(options, config, !loaded_first);
    const RunResult& with = loaded_first ? a : b;
    const RunResult& without = loaded_first ? b : a;
    idle.push_back(without.step_s);
    loaded.push_back(with.step_s);
    pair_ratios.push_back(with.step_s / without.step_s);
    calls_per_s += with.calls_per_s / options.reps;
    scrapes_per_s += with.scrapes_per_s / options.reps;
    failures += with.failures;
    std::printf(
        "  pair %d: idle %.2f ms/step (job %.2f cores), loaded %.2f ms/step (job %.2f "
        "cores), ratio %.3f\n",
        rep + 1, without.step_s * 1e3, without.cores, with.step_s * 1e3, with.cores,
        with.step_s / without.step_s);
  }
  const double idle_s = Median(idle), loaded_s = Median(loaded);
  std::printf("served while training: %.0f GetStatus/s, %.1f scrapes/s, %.0f failed\n", calls_per_s,
              scrapes_per_s, failures);
  std::printf(
      "median step: idle %.2f ms, loaded %.2f ms; ratio loaded/idle %.3f (median of "
      "pair ratios %.3f; aim < 1.02)\n",
      idle_s * 1e3, loaded_s * 1e3, loaded_s / idle_s, Median(pair_ratios));
  return 0;
}

#endif  // HOIST_HAVE_GRPC

}  // namespace

int main(int argc, char** argv) {
#if HOIST_HAVE_GRPC
  if (argc == 7 && !std::strcmp(argv[1], "--load")) return LoadMain(argv + 1);
#endif
  Options options;
  const char* kUsage =
      "usage: control_bench [--steps N] [--reps R] [--clients C] [--client-hz H (0: full "
      "speed)] [--scrape-hz S (0: none)]\n";
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--steps") && has_value) {
      options.steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && has_value) {
      options.reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--clients") && has_value) {
      options.clients = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--client-hz") && has_value) {
      options.client_hz = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--scrape-hz") && has_value) {
      options.scrape_hz = std::atof(argv[++i]);
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (options.steps < 1 || options.reps < 1 || options.clients < 1 || options.client_hz < 0 ||
      options.scrape_hz < 0) {
    std::fputs(kUsage, stderr);
    return 2;
  }
#if HOIST_HAVE_GRPC
  return Bench(options);
#else
  std::fputs("control_bench: this build has no gRPC (HOIST_WITH_GRPC); nothing to measure\n",
             stderr);
  return 0;
#endif
}
