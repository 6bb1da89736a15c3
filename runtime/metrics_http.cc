#include "runtime/metrics_http.h"

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

  void Serve();
  void AcceptAll();
  void Read(Connection& c);
  void Write(Connection& c);
};

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& bind,
                                                                      int port, Body body,
                                                                      MetricsHttpLimits limits) {
  HOIST_CHECK(limits.max_connections >= 1 && limits.request_deadline_s > 0);
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
  if (::bind(listener, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      ::listen(listener, 64) != 0) {
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
    fds.assign({{listener.get(), POLLIN, 0}, {wake.get(), POLLIN, 0}});
    Clock::time_point next_deadline = Clock::time_point::max();
    for (const Connection& c : connections) {
      fds.push_back({c.fd.get(), static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    int timeout_ms = -1;
    if (!connections.empty()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(next_deadline - Clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
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
    const Clock::time_point now = Clock::now();
    for (Connection& c : connections) {
      if (c.fd.get() >= 0 && now >= c.deadline) Abort(c);
    }
    std::erase_if(connections, [](const Connection& c) { return c.fd.get() < 0; });
    if ((fds[0].revents & POLLIN) != 0) AcceptAll();
  }
}

void MetricsHttpServer::Impl::AcceptAll() {
  const auto deadline_span = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(limits.request_deadline_s));
  while (true) {
    FileDescriptor fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.get() < 0) return;  // EAGAIN: none left; anything else: the client's loss
    if (connections.size() >= static_cast<size_t>(limits.max_connections)) {
      // The oldest one still without a complete request makes room; if every one is being
      // answered, the newcomer waits for none of them and is closed.
      auto idle = std::find_if(connections.begin(), connections.end(),
                               [](const Connection& c) { return !c.answering; });
      if (idle == connections.end()) continue;
      Abort(*idle);
      connections.erase(idle);
    }
    Connection c;
    c.fd = std::move(fd);
    c.deadline = Clock::now() + deadline_span;
    connections.push_back(std::move(c));
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
