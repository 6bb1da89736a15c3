// The Prometheus endpoint: served over loopback, scraped here with a plain HTTP GET on a socket.
#include "runtime/observe/metrics.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/memory_tracker.h"
#include "runtime/config/config.h"
#include "runtime/train/trainer.h"

// Counts the calls to the global operator new made by this thread while counting is on, so a
// test can pin that recording a step allocates nothing. Everything else passes straight through.
namespace {
thread_local bool counting_allocations = false;
thread_local long allocations = 0;
}  // namespace

// GCC inlines these and then pairs the library's operator new call with free(); they are a
// matched malloc/free pair, so its -Wmismatched-new-delete finding does not apply here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  if (counting_allocations) ++allocations;
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

#define SKIP_WITHOUT_PROMETHEUS()                                                            \
  if (!MetricsExporter::Available()) {                                                       \
    GTEST_SKIP() << "built without prometheus-cpp (scripts/install-deps --prometheus, then " \
                    "reconfigure)";                                                          \
  }

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://<address>:<port><path> over a plain TCP socket (HTTP/1.0: the server closes the
// connection after the response). An error status has an empty body and status 0.
StatusOr<HttpResponse> HttpGet(const std::string& address, int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError("socket: " + std::string(std::strerror(errno)));
  // No test waits forever on a server that does not answer.
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &server.sin_addr);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&server), sizeof(server)) != 0) {
    const int error = errno;
    ::close(fd);
    return Status(
        error == ECONNREFUSED ? StatusCode::kUnavailable : StatusCode::kIoError,
        "connect to " + address + ":" + std::to_string(port) + ": " + std::strerror(error));
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return IoError("send failed");
  }
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  const int error = errno;
  ::close(fd);
  if (n < 0) return IoError("recv: " + std::string(std::strerror(error)));
  const size_t header_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || header_end == std::string::npos) {
    return IoError("not an HTTP response: " + response.substr(0, 200));
  }
  HttpResponse result;
  result.status = std::atoi(response.c_str() + response.find(' ') + 1);
  result.body = response.substr(header_end + 4);
  return result;
}

std::string Scrape(const MetricsExporter& exporter) {
  StatusOr<HttpResponse> response = HttpGet("127.0.0.1", exporter.port(), "/metrics");
  EXPECT_TRUE(response.ok()) << response.status().ToString();
  if (!response.ok()) return "";
  EXPECT_EQ(response->status, 200);
  return response->body;
}

// One sample line of the text format: name{label="value",...} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> ParseSamples(const std::string& text) {
  std::vector<Sample> samples;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    Sample sample;
    size_t i = line.find_first_of("{ ");
    sample.name = line.substr(0, i);
    if (i != std::string::npos && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        const size_t close = line.find('"', eq + 2);
        sample.labels[line.substr(i, eq - i)] = line.substr(eq + 2, close - eq - 2);
        i = close + 1;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    const std::string value = line.substr(line.find_first_not_of(' ', i));
    sample.value =
        value == "Nan" || value == "NaN" ? std::nan("") : std::strtod(value.c_str(), nullptr);
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::optional<double> Find(const std::vector<Sample>& samples, const std::string& name,
                           const std::map<std::string, std::string>& labels) {
  for (const Sample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

MetricsConfig OnEphemeralPort() {
  MetricsConfig config;
  config.enabled = true;
  config.port = 0;
  return config;
}

std::unique_ptr<MetricsExporter> StartOk(const MetricsConfig& config, int rank, int local_rank) {
  StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start(config, rank, local_rank);
  HOIST_CHECK(exporter.ok()) << exporter.status().ToString();
  return std::move(exporter).value();
}

StepMetrics SomeStep() {
  StepMetrics step;
  step.steps = 7;
  step.skipped_steps = 2;
  step.loss = 2.5;
  step.lr = 3e-4;
  step.grad_norm = 0.75;
  step.loss_scale = 65536;
  step.tokens_per_s = 12345.5;
  step.step_s = 0.125;
  return step;
}

TEST(MetricsExporter, ServesTheLastStepWithTheRankLabel) {
  SKIP_WITHOUT_PROMETHEUS();
  auto exporter = StartOk(OnEphemeralPort(), /*rank=*/3, /*local_rank=*/1);
  ASSERT_GT(exporter->port(), 0);
  exporter->RecordStep(SomeStep());
  const std::vector<Sample> samples = ParseSamples(Scrape(*exporter));
  const std::map<std::string, std::string> rank = {{"rank", "3"}};
  EXPECT_EQ(Find(samples, "hoist_steps_total", rank), 7.0);
  EXPECT_EQ(Find(samples, "hoist_skipped_steps_total", rank), 2.0);
  EXPECT_EQ(Find(samples, "hoist_loss", rank), 2.5);
  std::optional<double> lr = Find(samples, "hoist_lr", rank);
  ASSERT_TRUE(lr.has_value());
  EXPECT_NEAR(*lr, 3e-4, 1e-12);
  EXPECT_EQ(Find(samples, "hoist_grad_norm", rank), 0.75);
  EXPECT_EQ(Find(samples, "hoist_loss_scale", rank), 65536.0);
  EXPECT_EQ(Find(samples, "hoist_tokens_per_second", rank), 12345.5);
  EXPECT_EQ(Find(samples, "hoist_step_seconds", rank), 0.125);
}

TEST(MetricsExporter, ServesPhasesCommAndOffloadBytesAndThePausedFlag) {
  SKIP_WITHOUT_PROMETHEUS();
  auto exporter = StartOk(OnEphemeralPort(), 1, 0);
  StepMetrics step = SomeStep();
  step.phase_s = {0.5, 1.5, 2.5, 0.25, 0.125};
  step.comm_bytes = {4096, 2048, 1024, 8};
  step.offload_bytes = {{{10, 20}, {30, 40}}};
  exporter->RecordStep(step);
  exporter->RecordPaused(true);
  std::vector<Sample> samples = ParseSamples(Scrape(*exporter));
  auto phase = [&](const char* name) {
    return Find(samples, "hoist_step_phase_seconds", {{"rank", "1"}, {"phase", name}});
  };
  EXPECT_EQ(phase("data"), 0.5);
  EXPECT_EQ(phase("forward"), 1.5);
  EXPECT_EQ(phase("backward"), 2.5);
  EXPECT_EQ(phase("reduce"), 0.25);
  EXPECT_EQ(phase("optimizer"), 0.125);
  auto comm = [&](const char* op) {
    return Find(samples, "hoist_comm_bytes_total", {{"rank", "1"}, {"op", op}});
  };
  EXPECT_EQ(comm("all_reduce"), 4096.0);
  EXPECT_EQ(comm("reduce_scatter"), 2048.0);
  EXPECT_EQ(comm("all_gather"), 1024.0);
  EXPECT_EQ(comm("broadcast"), 8.0);
  auto offload = [&](const char* direction, const char* target) {
    return Find(samples, "hoist_offload_bytes_total",
                {{"rank", "1"}, {"direction", direction}, {"target", target}});
  };
  EXPECT_EQ(offload("read", "host_pinned"), 10.0);
  EXPECT_EQ(offload("read", "nvme"), 20.0);
  EXPECT_EQ(offload("write", "host_pinned"), 30.0);
  EXPECT_EQ(offload("write", "nvme"), 40.0);
  EXPECT_EQ(Find(samples, "hoist_paused", {{"rank", "1"}}), 1.0);
  exporter->RecordPaused(false);
  samples = ParseSamples(Scrape(*exporter));
  EXPECT_EQ(Find(samples, "hoist_paused", {{"rank", "1"}}), 0.0);
}

TEST(MetricsExporter, ServesMemoryByPlaceAndCategory) {
  SKIP_WITHOUT_PROMETHEUS();
  auto exporter = StartOk(OnEphemeralPort(), 0, 0);
  MemoryTracker tracker;
  tracker.Add(Place::kDevice, Category::kParam, 4096);
  tracker.Add(Place::kDevice, Category::kGrad, 1000);
  tracker.Remove(Place::kDevice, Category::kGrad, 1000);
  tracker.Add(Place::kHostPinned, Category::kOptimizer, 12288);
  exporter->RecordMemory(tracker.Snapshot());
  const std::vector<Sample> samples = ParseSamples(Scrape(*exporter));
  auto labels = [](const char* place, const char* category) {
    return std::map<std::string, std::string>{
        {"rank", "0"}, {"place", place}, {"category", category}};
  };
  EXPECT_EQ(Find(samples, "hoist_memory_bytes", labels("device", "param")), 4096.0);
  EXPECT_EQ(Find(samples, "hoist_memory_bytes", labels("device", "grad")), 0.0);
  EXPECT_EQ(Find(samples, "hoist_memory_peak_bytes", labels("device", "grad")), 1000.0);
  EXPECT_EQ(Find(samples, "hoist_memory_bytes", labels("host_pinned", "optimizer")), 12288.0);
  EXPECT_EQ(Find(samples, "hoist_memory_peak_total_bytes", {{"rank", "0"}, {"place", "device"}}),
            5096.0);
  // Every place and category is served from the start, zeros included.
  for (int p = 0; p < kNumPlaces; ++p) {
    for (int c = 0; c < kNumCategories; ++c) {
      const auto l = labels(PlaceName(Place(p)), CategoryName(Category(c)));
      EXPECT_TRUE(Find(samples, "hoist_memory_bytes", l).has_value()) << l.at("place");
      EXPECT_TRUE(Find(samples, "hoist_memory_peak_bytes", l).has_value()) << l.at("category");
    }
  }
}

TEST(MetricsExporter, ServesProcessFacts) {
  SKIP_WITHOUT_PROMETHEUS();
  auto exporter = StartOk(OnEphemeralPort(), 2, 0);
  const std::vector<Sample> samples = ParseSamples(Scrape(*exporter));
  const std::map<std::string, std::string> rank = {{"rank", "2"}};
  std::optional<double> rss = Find(samples, "hoist_process_resident_memory_bytes", rank);
  std::optional<double> threads = Find(samples, "hoist_process_threads", rank);
  ASSERT_TRUE(rss.has_value());
  ASSERT_TRUE(threads.has_value());
  EXPECT_GT(*rss, 1 << 20);
  // The test's thread and the exporter's server threads at least.
  EXPECT_GE(*threads, 2.0);
  EXPECT_TRUE(Find(samples, "hoist_process_cpu_seconds_total", rank).has_value());
}

// Every series is hoist's, carries the rank and only the low-cardinality labels of DESIGN.md.
TEST(MetricsExporter, EverySeriesHasTheRankLabelAndNoStepLabel) {
  SKIP_WITHOUT_PROMETHEUS();
  auto exporter = StartOk(OnEphemeralPort(), 5, 0);
  exporter->RecordStep(SomeStep());
  const std::vector<Sample> samples = ParseSamples(Scrape(*exporter));
  int hoist_series = 0;
  for (const Sample& s : samples) {
    ++hoist_series;
    EXPECT_THAT(s.name, StartsWith("hoist_"));
    EXPECT_EQ(s.labels.count("rank"), 1u) << s.name;
    if (s.labels.count("rank")) {
      EXPECT_EQ(s.labels.at("rank"), "5") << s.name;
    }
    for (const auto& [name, value] : s.labels) {
      EXPECT_TRUE(name == "rank" || name == "place" || name == "category" || name == "phase" ||
                  name == "op" || name == "direction" || name == "target")
          << s.name << " " << name;
    }
  }
  // 8 step series, the paused flag, 5 phases, 4 comm ops, 2 x 2 offload series, 2 x 24 memory
  // rows, 4 place totals, 3 process facts.
  EXPECT_EQ(hoist_series, 8 + 1 + 5 + 4 + 4 + 48 + 4 + 3);
}

TEST(MetricsExporter, CountersFollowTheTotalsAndNeverGoDown) {
  SKIP_WITHOUT_PROMETHEUS();
  auto exporter = StartOk(OnEphemeralPort(), 0, 0);
  StepMetrics step = SomeStep();
  step.steps = 5;
  exporter->RecordStep(step);
  step.steps = 3;
  exporter->RecordStep(step);
  EXPECT_EQ(Find(ParseSamples(Scrape(*exporter)), "hoist_steps_total", {{"rank", "0"}}), 5.0);
  step.steps = 9;
  exporter->RecordStep(step);
  EXPECT_EQ(Find(ParseSamples(Scrape(*exporter)), "hoist_steps_total", {{"rank", "0"}}), 9.0);
}

TEST(MetricsExporter, RecordingAStepAllocatesNothing) {
  SKIP_WITHOUT_PROMETHEUS();
  auto exporter = StartOk(OnEphemeralPort(), 0, 0);
  MemoryTracker tracker;
  tracker.Add(Place::kDevice, Category::kParam, 4096);
  const MemorySnapshot memory = tracker.Snapshot();
  StepMetrics step = SomeStep();
  allocations = 0;
  counting_allocations = true;
  for (int i = 0; i < 100; ++i) {
    step.steps = 10 + i;
    exporter->RecordStep(step);
    exporter->RecordMemory(memory);
  }
  counting_allocations = false;
  EXPECT_EQ(allocations, 0);
  // The counter is live: an allocation here is seen.
  counting_allocations = true;
  auto probe = std::make_unique<int>(1);
  counting_allocations = false;
  EXPECT_EQ(allocations, 1);
}

TEST(MetricsExporter, PassesPromtoolCheckMetrics) {
  SKIP_WITHOUT_PROMETHEUS();
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not found (Debian package prometheus; scripts/install-deps "
                    "--prometheus installs it)";
  }
  auto exporter = StartOk(OnEphemeralPort(), 1, 0);
  exporter->RecordStep(SomeStep());
  MemoryTracker tracker;
  tracker.Add(Place::kDevice, Category::kActivation, 1 << 20);
  exporter->RecordMemory(tracker.Snapshot());
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_metrics_promtool";
  fs::create_directories(dir);
  { std::ofstream(dir / "metrics.txt") << Scrape(*exporter); }
  const std::string command = "promtool check metrics < " + (dir / "metrics.txt").string() + " > " +
                              (dir / "promtool.txt").string() + " 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream in(dir / "promtool.txt");
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << output;
  // Lint findings (units, suffixes, help text) are printed even where the exit status is 0.
  EXPECT_EQ(output, "");
}

TEST(MetricsExporter, BindsLoopbackByDefault) {
  SKIP_WITHOUT_PROMETHEUS();
  MetricsConfig config;
  EXPECT_EQ(config.bind, "127.0.0.1");
  config.enabled = true;
  config.port = 0;
  auto exporter = StartOk(config, 0, 0);
  EXPECT_THAT(exporter->url(), AllOf(StartsWith("http://127.0.0.1:"), HasSubstr("/metrics")));
  EXPECT_TRUE(HttpGet("127.0.0.1", exporter->port(), "/metrics").ok());
  // Not reachable on this machine's other addresses, where it has one.
  ifaddrs* interfaces = nullptr;
  ASSERT_EQ(::getifaddrs(&interfaces), 0);
  std::string other;
  for (ifaddrs* i = interfaces; i != nullptr && other.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                sizeof(text));
    if (std::string(text).rfind("127.", 0) != 0) other = text;
  }
  ::freeifaddrs(interfaces);
  if (other.empty()) GTEST_SKIP() << "this machine has no IPv4 address besides loopback";
  StatusOr<HttpResponse> outside = HttpGet(other, exporter->port(), "/metrics");
  EXPECT_FALSE(outside.ok()) << "served on " << other;
  EXPECT_EQ(outside.status().code(), StatusCode::kUnavailable) << outside.status().ToString();
}

TEST(MetricsExporter, PortIsMetricsPortPlusLocalRank) {
  SKIP_WITHOUT_PROMETHEUS();
  // A port that was free a moment ago: the system's choice for one exporter, then released.
  int free_port = 0;
  {
    auto probe = StartOk(OnEphemeralPort(), 0, 0);
    free_port = probe->port();
  }
  ASSERT_GT(free_port, 3);
  MetricsConfig config = OnEphemeralPort();
  config.port = free_port - 3;
  auto exporter = StartOk(config, 7, 3);
  EXPECT_EQ(exporter->port(), free_port);
  EXPECT_EQ(exporter->url(), "http://127.0.0.1:" + std::to_string(free_port) + "/metrics");
  EXPECT_TRUE(HttpGet("127.0.0.1", free_port, "/metrics").ok());
}

TEST(MetricsExporter, PortInUseIsAClearErrorNamingThePort) {
  SKIP_WITHOUT_PROMETHEUS();
  auto first = StartOk(OnEphemeralPort(), 0, 0);
  const int port = first->port();
  MetricsConfig config = OnEphemeralPort();
  config.port = port - 1;
  StatusOr<std::unique_ptr<MetricsExporter>> second = MetricsExporter::Start(config, 1, 1);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              AllOf(HasSubstr("rank 1"), HasSubstr("127.0.0.1 port " + std::to_string(port)),
                    HasSubstr("metrics.port " + std::to_string(port - 1) + " + local rank 1"),
                    HasSubstr("already in use"), HasSubstr("metrics.enabled=false")));
  // The first one still serves.
  EXPECT_TRUE(HttpGet("127.0.0.1", port, "/metrics").ok());
}

TEST(MetricsExporter, PortPastTheLastIsRefused) {
  SKIP_WITHOUT_PROMETHEUS();
  MetricsConfig config = OnEphemeralPort();
  config.port = 65535;
  StatusOr<std::unique_ptr<MetricsExporter>> exporter = MetricsExporter::Start(config, 2, 2);
  ASSERT_FALSE(exporter.ok());
  EXPECT_THAT(exporter.status().message(),
              AllOf(HasSubstr("65537"), HasSubstr("above 65535"), HasSubstr("metrics.port")));
}

TEST(MetricsExporter, WithoutPrometheusStartNamesWhatToInstall) {
  if (MetricsExporter::Available()) {
    GTEST_SKIP() << "this build has prometheus-cpp; the error exists only in builds without it";
  }
  StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start(OnEphemeralPort(), 0, 0);
  ASSERT_FALSE(exporter.ok());
  EXPECT_THAT(exporter.status().message(),
              AllOf(HasSubstr("prometheus-cpp"), HasSubstr("metrics.enabled=false"),
                    HasSubstr("HOIST_WITH_PROMETHEUS")));
}

// ---- the trainer serves its steps ----

Config SmallJob(const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {"model.n_layer=2",
                                        "model.n_head=2",
                                        "model.n_embd=32",
                                        "model.seq_len=32",
                                        "train_micro_batch_size_per_gpu=4",
                                        "gradient_accumulation_steps=1",
                                        "train.steps=5",
                                        "train.eval_interval=0",
                                        "scheduler.params.total_num_steps=5",
                                        "scheduler.params.warmup_num_steps=1",
                                        "monitor.jsonl.path=\"\"",
                                        "steps_per_print=0",
                                        "checkpoint.dir=\"\"",
                                        "checkpoint.interval_steps=0"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  StatusOr<Config> config = LoadConfig("", overrides, 1);
  HOIST_CHECK(config.ok()) << config.status().ToString();
  return *config;
}

TEST(TrainerMetrics, ServesTheStepCountAndLossOfTheLastStep) {
  SKIP_WITHOUT_PROMETHEUS();
  MemoryTracker tracker;
  TrainerOptions options;
  options.tracker = &tracker;
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(SmallJob({"metrics.enabled=true", "metrics.port=0"}), options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  ASSERT_NE((*trainer)->metrics(), nullptr);
  ASSERT_TRUE((*trainer)->Run().ok());
  const std::vector<Sample> samples = ParseSamples(Scrape(*(*trainer)->metrics()));
  const std::map<std::string, std::string> rank = {{"rank", "0"}};
  EXPECT_EQ(Find(samples, "hoist_steps_total", rank), 5.0);
  const double last_loss = (*trainer)->losses().back();
  std::optional<double> loss = Find(samples, "hoist_loss", rank);
  ASSERT_TRUE(loss.has_value());
  EXPECT_NEAR(*loss, last_loss, 1e-6 * std::abs(last_loss));
  EXPECT_NE(*loss, 0.0);
  std::optional<double> params = Find(samples, "hoist_memory_bytes",
                                      {{"rank", "0"}, {"place", "device"}, {"category", "param"}});
  ASSERT_TRUE(params.has_value());
  EXPECT_EQ(*params,
            static_cast<double>(tracker.Snapshot().Current(Place::kDevice, Category::kParam)));
  EXPECT_GT(*params, 0.0);
  EXPECT_GT(Find(samples, "hoist_tokens_per_second", rank).value_or(0), 0.0);
}

// The step's phases and the bytes of its collectives reach the metrics: forward, backward and
// optimizer take time, the phases fit in the step, and the all-gather of the per-rank memory
// tables (two 4 x 6 tables of int64 per step, gathered after the step's metrics are recorded, so
// the last step's is not counted yet) shows in hoist_comm_bytes_total.
TEST(TrainerMetrics, ServesPhaseTimesAndCommBytes) {
  SKIP_WITHOUT_PROMETHEUS();
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(SmallJob({"metrics.enabled=true", "metrics.port=0"}), {});
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  ASSERT_TRUE((*trainer)->Run().ok());
  const std::vector<Sample> samples = ParseSamples(Scrape(*(*trainer)->metrics()));
  const std::map<std::string, std::string> rank = {{"rank", "0"}};
  double phases = 0;
  for (const char* name : {"data", "forward", "backward", "reduce", "optimizer"}) {
    std::optional<double> seconds =
        Find(samples, "hoist_step_phase_seconds", {{"rank", "0"}, {"phase", name}});
    ASSERT_TRUE(seconds.has_value()) << name;
    EXPECT_GE(*seconds, 0.0) << name;
    phases += *seconds;
  }
  EXPECT_GT(*Find(samples, "hoist_step_phase_seconds", {{"rank", "0"}, {"phase", "forward"}}), 0.0);
  EXPECT_GT(*Find(samples, "hoist_step_phase_seconds", {{"rank", "0"}, {"phase", "backward"}}),
            0.0);
  EXPECT_GT(*Find(samples, "hoist_step_phase_seconds", {{"rank", "0"}, {"phase", "optimizer"}}),
            0.0);
  EXPECT_LE(phases, *Find(samples, "hoist_step_seconds", rank) * 1.0001);
  const double memory_tables = 2.0 * kNumPlaces * kNumCategories * sizeof(int64_t);
  EXPECT_GE(*Find(samples, "hoist_comm_bytes_total", {{"rank", "0"}, {"op", "all_gather"}}),
            4 * memory_tables);
  // At least the loss of each step is all-reduced.
  EXPECT_GE(*Find(samples, "hoist_comm_bytes_total", {{"rank", "0"}, {"op", "all_reduce"}}),
            5 * sizeof(float));
  EXPECT_EQ(Find(samples, "hoist_paused", rank), 0.0);
}

// Scrapes from another thread while the trainer steps: every one answers, and the step counter
// only ever goes up.
TEST(TrainerMetrics, ScrapesDuringTrainingAnswer) {
  SKIP_WITHOUT_PROMETHEUS();
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(SmallJob({"metrics.enabled=true", "metrics.port=0", "train.steps=40",
                                "scheduler.params.total_num_steps=40"}),
                      {});
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  const int port = (*trainer)->metrics()->port();
  std::atomic<bool> done{false};
  int scrapes = 0, failures = 0;
  bool went_down = false;
  std::thread scraper([&] {
    double last = 0;
    // At least a few scrapes, however fast the run.
    while (!done.load() || scrapes < 5) {
      StatusOr<HttpResponse> response = HttpGet("127.0.0.1", port, "/metrics");
      ++scrapes;
      if (!response.ok() || response->status != 200) {
        ++failures;
        continue;
      }
      const double steps =
          Find(ParseSamples(response->body), "hoist_steps_total", {{"rank", "0"}}).value_or(-1);
      went_down = went_down || steps < last;
      last = steps;
    }
  });
  const Status status = (*trainer)->Run();
  done = true;
  scraper.join();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(failures, 0) << "of " << scrapes;
  EXPECT_FALSE(went_down);
  EXPECT_EQ(
      Find(ParseSamples(Scrape(*(*trainer)->metrics())), "hoist_steps_total", {{"rank", "0"}}),
      40.0);
}

TEST(TrainerMetrics, OffByDefault) {
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(SmallJob({}), {});
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  EXPECT_EQ((*trainer)->metrics(), nullptr);
}

TEST(TrainerMetrics, WithoutPrometheusEnablingMetricsFailsTheStart) {
  if (MetricsExporter::Available()) {
    GTEST_SKIP() << "this build has prometheus-cpp; the error exists only in builds without it";
  }
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(SmallJob({"metrics.enabled=true", "metrics.port=0"}), {});
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(trainer.status().message(), HasSubstr("prometheus-cpp"));
}

}  // namespace
}  // namespace hoist::runtime
