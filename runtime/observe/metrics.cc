#include "runtime/observe/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "comm/counting_communicator.h"
#include "core/logging.h"
#include "runtime/observe/metrics_http.h"

#if HOIST_HAVE_PROMETHEUS
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#endif

namespace hoist::runtime {

namespace {

[[maybe_unused]] bool IsIpv6(const std::string& address) {
  return address.find(':') != std::string::npos;
}

// "127.0.0.1:9400" or "[::1]:9400": the HTTP server's listening_ports syntax, also fit for URLs.
[[maybe_unused]] std::string HostPort(const std::string& bind, int port) {
  const std::string host = IsIpv6(bind) ? "[" + bind + "]" : bind;
  return host + ":" + std::to_string(port);
}

[[maybe_unused]] std::string DescribePort(const MetricsConfig& config, int local_rank, int port) {
  if (config.port == 0) return "an ephemeral port (metrics.port 0)";
  return "port " + std::to_string(port) + " (metrics.port " + std::to_string(config.port) +
         " + local rank " + std::to_string(local_rank) + ")";
}

#if HOIST_HAVE_PROMETHEUS

struct ProcessStat {
  double resident_bytes = 0;
  double threads = 0;
  double cpu_seconds = 0;
};

// Reads /proc/self/stat (proc(5)); false where it cannot be read or parsed.
bool ReadProcessStat(ProcessStat* stat) {
  char buffer[2048];
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, buffer, sizeof(buffer) - 1);
  ::close(fd);
  if (n <= 0) return false;
  buffer[n] = '\0';
  // Field 2, the command name, is in parentheses and may hold spaces or parentheses itself, so
  // fields are counted from the last ')': field 3 follows it.
  const char* p = std::strrchr(buffer, ')');
  if (p == nullptr) return false;
  ++p;
  long long utime = -1, stime = -1, threads = -1, rss_pages = -1;
  for (int field = 3; field <= 24; ++field) {
    while (*p == ' ') ++p;
    if (*p == '\0') return false;
    // Field 3 (the state) is a letter; the fields read below are all numbers.
    const long long value = std::strtoll(p, nullptr, 10);
    if (field == 14) utime = value;
    if (field == 15) stime = value;
    if (field == 20) threads = value;
    if (field == 24) rss_pages = value;
    while (*p != ' ' && *p != '\0') ++p;
  }
  const long page = ::sysconf(_SC_PAGESIZE), ticks = ::sysconf(_SC_CLK_TCK);
  if (utime < 0 || stime < 0 || threads < 0 || rss_pages < 0 || page <= 0 || ticks <= 0) {
    return false;
  }
  stat->resident_bytes = static_cast<double>(rss_pages) * static_cast<double>(page);
  stat->threads = static_cast<double>(threads);
  stat->cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(ticks);
  return true;
}

prometheus::MetricFamily ProcessFamily(const char* name, const char* help,
                                       prometheus::MetricType type, const std::string& rank,
                                       double value) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  metric.label.push_back({"rank", rank});
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

// The process facts, read when a scrape asks (so they are current even during a long step or a
// pause), on the server's thread.
void AppendProcessFacts(const std::string& rank, std::vector<prometheus::MetricFamily>* out) {
  ProcessStat stat;
  if (!ReadProcessStat(&stat)) return;
  out->push_back(ProcessFamily("hoist_process_resident_memory_bytes",
                               "Resident memory of this rank's process in bytes",
                               prometheus::MetricType::Gauge, rank, stat.resident_bytes));
  out->push_back(ProcessFamily("hoist_process_threads", "Threads in this rank's process",
                               prometheus::MetricType::Gauge, rank, stat.threads));
  out->push_back(ProcessFamily("hoist_process_cpu_seconds_total",
                               "User and system CPU time of this rank's process in seconds",
                               prometheus::MetricType::Counter, rank, stat.cpu_seconds));
}

// Raises a counter to `total`; a smaller total leaves it (a counter never goes down).
void AdvanceTo(prometheus::Counter* counter, int64_t total) {
  const double delta = static_cast<double>(total) - counter->Value();
  if (delta > 0) counter->Increment(delta);
}

#endif  // HOIST_HAVE_PROMETHEUS

}  // namespace

#if HOIST_HAVE_PROMETHEUS

struct MetricsExporter::Impl {
  std::shared_ptr<prometheus::Registry> registry;
  std::string rank;
  int port = 0;
  std::string url;
  prometheus::Counter* steps = nullptr;
  prometheus::Counter* skipped_steps = nullptr;
  prometheus::Gauge* loss = nullptr;
  prometheus::Gauge* lr = nullptr;
  prometheus::Gauge* grad_norm = nullptr;
  prometheus::Gauge* loss_scale = nullptr;
  prometheus::Gauge* tokens_per_s = nullptr;
  prometheus::Gauge* step_s = nullptr;
  prometheus::Gauge* paused = nullptr;
  std::array<prometheus::Gauge*, kNumTimedPhases> phase_s{};
  std::array<prometheus::Counter*, comm::kNumCollectiveOps> comm_bytes{};
  std::array<std::array<prometheus::Counter*, kNumOffloadTargets>, kNumOffloadDirections>
      offload_bytes{};
  std::array<std::array<prometheus::Gauge*, kNumCategories>, kNumPlaces> memory{};
  std::array<std::array<prometheus::Gauge*, kNumCategories>, kNumPlaces> memory_peak{};
  std::array<prometheus::Gauge*, kNumPlaces> memory_peak_total{};
  // Last, so that it is destroyed first: no scrape runs once the handles above go away.
  std::unique_ptr<MetricsHttpServer> server;
};

bool MetricsExporter::Available() { return true; }

StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(const MetricsConfig& config,
                                                                  int rank, int local_rank) {
  const int port = config.port == 0 ? 0 : config.port + local_rank;
  if (port > 65535) {
    return InvalidArgumentError("metrics: rank " + std::to_string(rank) + " would serve on " +
                                DescribePort(config, local_rank, port) +
                                ", above 65535; lower metrics.port");
  }
  auto impl = std::make_unique<Impl>();
  impl->registry = std::make_shared<prometheus::Registry>();
  prometheus::Registry& registry = *impl->registry;
  const std::string rank_text = std::to_string(rank);
  const prometheus::Labels rank_label = {{"rank", rank_text}};
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge()
                .Name(name)
                .Help(help)
                .Labels(rank_label)
                .Register(registry)
                .Add({});
  };
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter()
                .Name(name)
                .Help(help)
                .Labels(rank_label)
                .Register(registry)
                .Add({});
  };
  impl->steps = counter("hoist_steps_total", "Optimizer steps taken (resumed ones included)");
  impl->skipped_steps = counter("hoist_skipped_steps_total",
                                "Optimizer steps skipped because the gradients held inf or NaN");
  impl->loss = gauge("hoist_loss", "Loss of the last step, the mean over the global batch");
  impl->lr = gauge("hoist_lr", "Learning rate of the last step");
  impl->grad_norm =
      gauge("hoist_grad_norm", "Global gradient norm of the last step, before clipping");
  impl->loss_scale = gauge("hoist_loss_scale", "Loss scale of the last step (1 without fp16)");
  impl->tokens_per_s =
      gauge("hoist_tokens_per_second", "Tokens of the global batch per second in the last step");
  impl->step_s = gauge("hoist_step_seconds", "Wall time of the last optimizer step in seconds");
  impl->paused = gauge("hoist_paused", "1 while the job is paused by its control service, else 0");
  auto& phases = prometheus::BuildGauge()
                     .Name("hoist_step_phase_seconds")
                     .Help("Seconds the last optimizer step spent in each phase")
                     .Labels(rank_label)
                     .Register(registry);
  for (int p = 0; p < kNumTimedPhases; ++p) {
    impl->phase_s[p] = &phases.Add({{"phase", PhaseName(static_cast<Phase>(p))}});
  }
  auto& comm_bytes = prometheus::BuildCounter()
                         .Name("hoist_comm_bytes_total")
                         .Help("Bytes of the buffers this rank handed to collectives, by op")
                         .Labels(rank_label)
                         .Register(registry);
  for (int op = 0; op < comm::kNumCollectiveOps; ++op) {
    impl->comm_bytes[op] =
        &comm_bytes.Add({{"op", comm::CollectiveOpLabel(static_cast<comm::CollectiveOp>(op))}});
  }
  auto& offload_bytes = prometheus::BuildCounter()
                            .Name("hoist_offload_bytes_total")
                            .Help("Bytes this rank read from and wrote to offload storage")
                            .Labels(rank_label)
                            .Register(registry);
  static constexpr const char* kDirections[kNumOffloadDirections] = {"read", "write"};
  static constexpr const char* kTargets[kNumOffloadTargets] = {"host_pinned", "nvme"};
  for (int d = 0; d < kNumOffloadDirections; ++d) {
    for (int t = 0; t < kNumOffloadTargets; ++t) {
      impl->offload_bytes[d][t] =
          &offload_bytes.Add({{"direction", kDirections[d]}, {"target", kTargets[t]}});
    }
  }

  auto& memory = prometheus::BuildGauge()
                     .Name("hoist_memory_bytes")
                     .Help("Bytes this rank holds now, by place and category")
                     .Labels(rank_label)
                     .Register(registry);
  auto& memory_peak = prometheus::BuildGauge()
                          .Name("hoist_memory_peak_bytes")
                          .Help("The most bytes this rank has held, by place and category")
                          .Labels(rank_label)
                          .Register(registry);
  auto& memory_peak_total =
      prometheus::BuildGauge()
          .Name("hoist_memory_peak_total_bytes")
          .Help("The largest sum over categories this rank has held at once, by place")
          .Labels(rank_label)
          .Register(registry);
  for (int p = 0; p < kNumPlaces; ++p) {
    const std::string place = PlaceName(static_cast<Place>(p));
    impl->memory_peak_total[p] = &memory_peak_total.Add({{"place", place}});
    for (int c = 0; c < kNumCategories; ++c) {
      const prometheus::Labels labels = {{"place", place},
                                         {"category", CategoryName(static_cast<Category>(c))}};
      impl->memory[p][c] = &memory.Add(labels);
      impl->memory_peak[p][c] = &memory_peak.Add(labels);
    }
  }
  impl->rank = rank_text;

  Impl* state = impl.get();
  StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(config.bind, port, [state] {
        std::vector<prometheus::MetricFamily> families = state->registry->Collect();
        AppendProcessFacts(state->rank, &families);
        return prometheus::TextSerializer().Serialize(families);
      });
  if (!server.ok()) {
    const std::string& reason = server.status().message();
    return UnavailableError("metrics: rank " + rank_text + " cannot serve on " + config.bind + " " +
                            DescribePort(config, local_rank, port) + ": " + reason +
                            "; set metrics.port to a free range (each rank adds its local rank; "
                            "0 picks free ports) or set metrics.enabled=false");
  }
  impl->server = std::move(server).value();
  impl->port = impl->server->port();
  impl->url = "http://" + HostPort(config.bind, impl->port) + "/metrics";
  // Said once per node: every rank of it binds the same address.
  if (local_rank == 0 && !IsLoopbackAddress(config.bind)) {
    HOIST_LOG(WARN) << "metrics: metrics.bind is \"" << config.bind
                    << "\", which other machines can reach, and the metrics are served without "
                       "authentication; bind \"127.0.0.1\" unless the network is trusted";
  }
  return std::unique_ptr<MetricsExporter>(new MetricsExporter(std::move(impl)));
}

void MetricsExporter::RecordStep(const StepMetrics& step) {
  AdvanceTo(impl_->steps, step.steps);
  AdvanceTo(impl_->skipped_steps, step.skipped_steps);
  impl_->loss->Set(step.loss);
  impl_->lr->Set(step.lr);
  impl_->grad_norm->Set(step.grad_norm);
  impl_->loss_scale->Set(step.loss_scale);
  impl_->tokens_per_s->Set(step.tokens_per_s);
  impl_->step_s->Set(step.step_s);
  for (int p = 0; p < kNumTimedPhases; ++p) impl_->phase_s[p]->Set(step.phase_s[p]);
  for (int op = 0; op < comm::kNumCollectiveOps; ++op) {
    AdvanceTo(impl_->comm_bytes[op], step.comm_bytes[op]);
  }
  for (int d = 0; d < kNumOffloadDirections; ++d) {
    for (int t = 0; t < kNumOffloadTargets; ++t) {
      AdvanceTo(impl_->offload_bytes[d][t], step.offload_bytes[d][t]);
    }
  }
}

void MetricsExporter::RecordPaused(bool paused) { impl_->paused->Set(paused ? 1.0 : 0.0); }

void MetricsExporter::RecordMemory(const MemorySnapshot& memory) {
  for (int p = 0; p < kNumPlaces; ++p) {
    impl_->memory_peak_total[p]->Set(static_cast<double>(memory.peak_total[p]));
    for (int c = 0; c < kNumCategories; ++c) {
      impl_->memory[p][c]->Set(static_cast<double>(memory.current[p][c]));
      impl_->memory_peak[p][c]->Set(static_cast<double>(memory.peak[p][c]));
    }
  }
}

#else  // !HOIST_HAVE_PROMETHEUS

struct MetricsExporter::Impl {
  int port = 0;
  std::string url;
};

bool MetricsExporter::Available() { return false; }

StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(const MetricsConfig&, int, int) {
  return FailedPreconditionError(
      "metrics.enabled is true but this hoist was built without Prometheus support: install "
      "prometheus-cpp (Debian: prometheus-cpp-dev, or scripts/install-deps --prometheus) and "
      "rebuild with HOIST_WITH_PROMETHEUS=AUTO or ON, or set metrics.enabled=false");
}

void MetricsExporter::RecordStep(const StepMetrics&) {}
void MetricsExporter::RecordMemory(const MemorySnapshot&) {}
void MetricsExporter::RecordPaused(bool) {}

#endif  // HOIST_HAVE_PROMETHEUS

MetricsExporter::MetricsExporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsExporter::~MetricsExporter() = default;

int MetricsExporter::port() const { return impl_->port; }

const std::string& MetricsExporter::url() const { return impl_->url; }

}  // namespace hoist::runtime
