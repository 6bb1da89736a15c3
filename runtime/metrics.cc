#include "runtime/metrics.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "comm/counting_communicator.h"
#include "core/posix_error.h"

#if HOIST_HAVE_PROMETHEUS
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#endif

namespace hoist::runtime {

const char* StepPhaseName(StepPhase phase) {
  switch (phase) {
    case StepPhase::kData: return "data";
    case StepPhase::kForward: return "forward";
    case StepPhase::kBackward: return "backward";
    case StepPhase::kReduce: return "reduce";
    case StepPhase::kOptimizer: return "optimizer";
  }
  return "unknown";
}

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

// A socket or eventfd, closed on destruction.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Writes all of `data`; false when the peer went away or timed out.
bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The HTTP side of the endpoint: one thread that accepts a connection at a time, reads one
// request and answers it (HTTP/1.1 with Connection: close), so that a scrape costs one
// serialisation and nothing runs while nobody scrapes. Prometheus scrapes a target with one
// request at a time; a client that stalls is cut off by the socket timeouts. (Debian 12's
// civetweb, which prometheus-cpp's Exposer serves with, reads an uninitialised path buffer
// while checking authorisation for every handler-served request and can crash the process on
// a scrape, hence a server of our own.)
class HttpServer {
 public:
  using Body = std::function<std::string()>;

  // Binds and listens on `bind`:`port` (0: the system picks) and starts serving `body` at
  // /metrics. Returns the errno-derived error of the first failing call.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& bind, int port, Body body) {
    sockaddr_storage address{};
    socklen_t length = 0;
    if (IsIpv6(bind)) {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      if (::inet_pton(AF_INET6, bind.c_str(), &v6->sin6_addr) != 1) {
        return InvalidArgumentError("not an IPv6 address: " + bind);
      }
      length = sizeof(*v6);
    } else {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(port));
      if (::inet_pton(AF_INET, bind.c_str(), &v4->sin_addr) != 1) {
        return InvalidArgumentError("not an IPv4 address: " + bind);
      }
      length = sizeof(*v4);
    }
    FileDescriptor listener(::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (listener.get() < 0) return PosixError("socket()", "", errno);
    // A restarted job can take its port back while the old connections sit in TIME_WAIT.
    const int one = 1;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
        ::listen(listener.get(), 16) != 0) {
      return UnavailableError(errno == EADDRINUSE ? "the port is already in use (by another job "
                                                    "or service on this node?)"
                                                  : std::strerror(errno));
    }
    sockaddr_storage bound{};
    socklen_t bound_length = sizeof(bound);
    if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
      return PosixError("getsockname()", "", errno);
    }
    const int bound_port =
        ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    FileDescriptor wake(::eventfd(0, EFD_CLOEXEC));
    if (wake.get() < 0) return PosixError("eventfd()", "", errno);
    return std::unique_ptr<HttpServer>(
        new HttpServer(std::move(listener), std::move(wake), bound_port, std::move(body)));
  }

  ~HttpServer() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }

  int port() const { return port_; }

 private:
  HttpServer(FileDescriptor listener, FileDescriptor wake, int port, Body body)
      : listener_(std::move(listener)),
        wake_(std::move(wake)),
        port_(port),
        body_(std::move(body)) {
    thread_ = std::thread([this] { Serve(); });
  }

  void Serve() {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    while (true) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      if ((fds[0].revents & POLLIN) == 0) continue;
      FileDescriptor connection(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (connection.get() < 0) continue;
      Answer(connection.get());
    }
  }

  // Reads the request head and answers GET or HEAD of /metrics; no exception leaves here.
  void Answer(int fd) {
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    char head[8192];
    size_t size = 0;
    while (size < sizeof(head) - 1) {
      const ssize_t n = ::recv(fd, head + size, sizeof(head) - 1 - size, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      size += static_cast<size_t>(n);
      head[size] = '\0';
      if (std::strstr(head, "\r\n\r\n") != nullptr || std::strstr(head, "\n\n") != nullptr) {
        break;
      }
    }
    head[size] = '\0';
    const bool get = std::strncmp(head, "GET ", 4) == 0;
    const bool head_only = std::strncmp(head, "HEAD ", 5) == 0;
    const char* target = get ? head + 4 : head + 5;
    const size_t target_length = std::strcspn(target, " ?\r\n");
    std::string status = "200 OK", body;
    if (!get && !head_only) {
      status = "405 Method Not Allowed";
    } else if (std::string_view(target, target_length) != "/metrics") {
      status = "404 Not Found";
      body = "hoist serves its metrics at /metrics\n";
    } else {
      try {
        body = body_();
      } catch (const std::exception& e) {
        status = "500 Internal Server Error";
        body = std::string("could not collect the metrics: ") + e.what() + "\n";
      }
    }
    const std::string header = "HTTP/1.1 " + status +
                               "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"
                               "\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    if (!SendAll(fd, header.data(), header.size()) || head_only) return;
    SendAll(fd, body.data(), body.size());
  }

  FileDescriptor listener_;
  FileDescriptor wake_;  // written once by the destructor to end Serve
  const int port_;
  const Body body_;
  std::thread thread_;
};

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
  std::array<prometheus::Gauge*, kNumStepPhases> phase_s{};
  std::array<prometheus::Counter*, comm::kNumCollectiveOps> comm_bytes{};
  std::array<std::array<prometheus::Counter*, kNumOffloadTargets>, kNumOffloadDirections>
      offload_bytes{};
  std::array<std::array<prometheus::Gauge*, kNumCategories>, kNumPlaces> memory{};
  std::array<std::array<prometheus::Gauge*, kNumCategories>, kNumPlaces> memory_peak{};
  std::array<prometheus::Gauge*, kNumPlaces> memory_peak_total{};
  // Last, so that it is destroyed first: no scrape runs once the handles above go away.
  std::unique_ptr<HttpServer> server;
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
  for (int p = 0; p < kNumStepPhases; ++p) {
    impl->phase_s[p] = &phases.Add({{"phase", StepPhaseName(static_cast<StepPhase>(p))}});
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
  StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config.bind, port, [state] {
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
  for (int p = 0; p < kNumStepPhases; ++p) impl_->phase_s[p]->Set(step.phase_s[p]);
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
