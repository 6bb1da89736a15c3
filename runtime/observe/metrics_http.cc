#include "runtime/observe/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "core/posix_error.h"

namespace hoist::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// The most bytes of a request head read; a longer one is answered 431 and closed.
constexpr size_t kMaxHeadBytes = 8192;

bool IsIpv6(const std::string& address) { return address.find(':') != std::string::npos; }

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
  void reset() { FileDescriptor().swap(*this); }
  void swap(FileDescriptor& other) noexcept { std::swap(fd_, other.fd_); }

 private:
  int fd_;
};

// One client: reading its request head until `answer` is set, then writing `answer`.
struct Connection {
  FileDescriptor fd;
  Clock::time_point deadline;
  Clock::time_point last_heard;  // its accept, or the last byte it sent
  std::string head;
  std::string answer;
  size_t sent = 0;
  bool answering = false;
};

// Closes a connection that is cut off with a reset rather than an orderly close, so that the
// client learns at once (and what is queued for it is dropped, not sent on by the kernel).
void Abort(Connection& c) {
  const linger reset{1, 0};
  ::setsockopt(c.fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  c.fd.reset();
}

std::string Response(const std::string& status, const std::string& body, bool head_only) {
  std::string out = "HTTP/1.1 " + status +
                    "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"
                    "\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (!head_only) out += body;
  return out;
}

// The whole answer to a complete request head; no exception leaves here.
std::string Answer(std::string_view head, const MetricsHttpServer::Body& body) {
  const bool get = head.rfind("GET ", 0) == 0;
  const bool head_only = head.rfind("HEAD ", 0) == 0;
  if (!get && !head_only) return Response("405 Method Not Allowed", "", false);
  std::string_view target = head.substr(get ? 4 : 5);
  target = target.substr(0, target.find_first_of(" ?\r\n"));
  if (target != "/metrics") {
    return Response("404 Not Found", "hoist serves its metrics at /metrics\n", head_only);
  }
  try {
    return Response("200 OK", body(), head_only);
  } catch (const std::exception& e) {
    return Response("500 Internal Server Error",
                    std::string("could not collect the metrics: ") + e.what() + "\n", head_only);
  }
}

}  // namespace

bool IsLoopbackAddress(const std::string& bind) {
  in_addr v4{};
  if (::inet_pton(AF_INET, bind.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, bind.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

struct MetricsHttpServer::Impl {
  FileDescriptor listener;
  FileDescriptor wake;  // written once by the destructor to end Serve
  int port = 0;
  Body body;
  MetricsHttpLimits limits;
  std::vector<Connection> connections;  // in the order they were accepted
  std::thread thread;

  Clock::duration IdleSpan() const {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(limits.idle_after_s));
  }
  void Serve();
  void AcceptAll();
  // The oldest connection that may make room at `now`, or connections.end().
  std::vector<Connection>::iterator FindIdle(Clock::time_point now);
  void Read(Connection& c);
  void Write(Connection& c);
};

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& bind,
                                                                      int port, Body body,
                                                                      MetricsHttpLimits limits) {
  HOIST_CHECK(limits.max_connections >= 1 && limits.request_deadline_s > 0 &&
              limits.idle_after_s > 0);
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
  auto impl = std::make_unique<Impl>();
  impl->listener =
      FileDescriptor(::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const int listener = impl->listener.get();
  if (listener < 0) return PosixError("socket()", "", errno);
  // A restarted job can take its port back while the old connections sit in TIME_WAIT.
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // A deep accept queue: beyond max_connections newcomers wait there, and one that overflows
  // drops connection attempts, which their clients retry only after a second or more.
  if (::bind(listener, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      ::listen(listener, 1024) != 0) {
    return UnavailableError(errno == EADDRINUSE ? "the port is already in use (by another job "
                                                  "or service on this node?)"
                                                : std::strerror(errno));
  }
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  if (::getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    return PosixError("getsockname()", "", errno);
  }
  impl->port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  impl->wake = FileDescriptor(::eventfd(0, EFD_CLOEXEC));
  if (impl->wake.get() < 0) return PosixError("eventfd()", "", errno);
  impl->body = std::move(body);
  impl->limits = limits;
  Impl* state = impl.get();
  impl->thread = std::thread([state] { state->Serve(); });
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsHttpServer::~MetricsHttpServer() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake.get(), &one, sizeof(one));
  impl_->thread.join();
}

int MetricsHttpServer::port() const { return impl_->port; }

void MetricsHttpServer::Impl::Serve() {
  std::vector<pollfd> fds;
  while (true) {
    // When full, the listener is watched only once some connection may make room; until then
    // newcomers wait in the accept queue, and poll wakes when the first connection turns idle.
    const Clock::time_point now = Clock::now();
    const bool full = connections.size() >= static_cast<size_t>(limits.max_connections);
    Clock::time_point next_idle = Clock::time_point::max();
    if (full) {
      for (const Connection& c : connections) {
        if (!c.answering) next_idle = std::min(next_idle, c.last_heard + IdleSpan());
      }
    }
    const bool may_accept = !full || next_idle <= now;
    fds.assign({{listener.get(), static_cast<short>(may_accept ? POLLIN : 0), 0},
                {wake.get(), POLLIN, 0}});
    Clock::time_point wake_at = may_accept ? Clock::time_point::max() : next_idle;
    for (const Connection& c : connections) {
      fds.push_back({c.fd.get(), static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake_at - now);
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      HOIST_LOG(ERROR) << "metrics: the HTTP server stops: poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;
    // fds[2 + i] is connections[i]: new ones are appended only after this loop.
    for (size_t i = 0; i < connections.size(); ++i) {
      if (fds[2 + i].revents == 0) continue;
      if (connections[i].answering) {
        Write(connections[i]);
      } else {
        Read(connections[i]);
      }
    }
    const Clock::time_point after = Clock::now();
    for (Connection& c : connections) {
      if (c.fd.get() >= 0 && after >= c.deadline) Abort(c);
    }
    std::erase_if(connections, [](const Connection& c) { return c.fd.get() < 0; });
    if ((fds[0].revents & POLLIN) != 0) AcceptAll();
  }
}

std::vector<Connection>::iterator MetricsHttpServer::Impl::FindIdle(Clock::time_point now) {
  for (auto it = connections.begin(); it != connections.end(); ++it) {
    if (it->answering || now - it->last_heard < IdleSpan()) continue;
    // Bytes that arrived since the last poll make it a client that speaks after all: it is read
    // on the next turn, not cut off.
    char byte;
    if (::recv(it->fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0) continue;
    return it;
  }
  return connections.end();
}

void MetricsHttpServer::Impl::AcceptAll() {
  const auto deadline_span = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(limits.request_deadline_s));
  while (true) {
    auto idle = connections.end();
    if (connections.size() >= static_cast<size_t>(limits.max_connections)) {
      idle = FindIdle(Clock::now());
      if (idle == connections.end()) return;  // the rest wait in the accept queue
    }
    FileDescriptor fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.get() < 0) return;  // EAGAIN: none left; anything else: the client's loss
    if (idle != connections.end()) {
      Abort(*idle);
      connections.erase(idle);
    }
    Connection c;
    c.fd = std::move(fd);
    c.last_heard = Clock::now();
    c.deadline = c.last_heard + deadline_span;
    connections.push_back(std::move(c));
    // A client that sent its request with its connect, as a scraper does, is answered now, and
    // its place is free again before the next one in the queue is let in.
    Read(connections.back());
    if (connections.back().fd.get() < 0) connections.pop_back();
  }
}

void MetricsHttpServer::Impl::Read(Connection& c) {
  char buffer[2048];
  while (true) {
    const ssize_t n = ::recv(c.fd.get(), buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // the client went away before finishing its request
      c.fd.reset();
      return;
    }
    c.last_heard = Clock::now();
    c.head.append(buffer, static_cast<size_t>(n));
    const size_t end = std::min(c.head.find("\r\n\r\n"), c.head.find("\n\n"));
    if (end != std::string::npos) {
      c.answer = Answer(std::string_view(c.head).substr(0, end), body);
      break;
    }
    if (c.head.size() > kMaxHeadBytes) {
      c.answer = Response("431 Request Header Fields Too Large", "", false);
      break;
    }
  }
  c.answering = true;
  c.head.clear();
  Write(c);
}

void MetricsHttpServer::Impl::Write(Connection& c) {
  while (c.sent < c.answer.size()) {
    const ssize_t n =
        ::send(c.fd.get(), c.answer.data() + c.sent, c.answer.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) break;  // the client went away
    c.sent += static_cast<size_t>(n);
  }
  c.fd.reset();
}

}  // namespace hoist::runtime
