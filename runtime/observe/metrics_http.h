// MetricsHttpServer: the HTTP side of the Prometheus endpoint (runtime/observe/metrics.h). It
// answers GET and HEAD of /metrics, one request per connection (HTTP/1.1 with Connection: close),
// from one thread that multiplexes every open connection with poll(), so no client, however slow or
// idle, holds up another. Each connection has a whole-request deadline counted from its accept:
// one that has not sent its request and taken the whole answer by then is closed.
//
// At most max_connections are open at once. Beyond that, newcomers wait in the kernel's accept
// queue, in the order they came, until a connection ends or one that has sent nothing for
// idle_after_s is closed to let the next one in. A connection whose bytes have arrived is never
// closed to make room, and a newcomer's request is read as it is accepted, so a scrape (which
// sends its request with its connect) gets through a flood of clients that connect and say
// nothing: it waits its turn in the queue instead of being cut off before it could speak.
//
// It is hoist's own rather than a library's: Debian 12's civetweb, which prometheus-cpp's Exposer
// serves with, reads an uninitialised path buffer while checking authorisation for every
// handler-served request and can crash the process on a scrape; cpp-httplib's timeouts are per
// read, so a client sending a byte at a time holds one of its worker threads for as long as it
// likes; libmicrohttpd would do, but is one more package for ~300 lines that serve one path.
//
// Thread-safety: Start blocks until the port is bound; `body` is called on the server's thread,
// one call at a time. The destructor blocks until that thread has stopped (at most one `body`
// call in progress) and closes every connection.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"

namespace hoist::runtime {

struct MetricsHttpLimits {
  // From accept to the last byte of the answer. Prometheus' default scrape timeout is 10 s.
  double request_deadline_s = 5;
  // Connections open at once (>= 1).
  int max_connections = 32;
  // Beyond max_connections, a connection that has sent nothing for this long (since its accept
  // or its last byte) makes room for the next one waiting (> 0). Prometheus sends its request
  // at once, so this only needs to cover a round trip.
  double idle_after_s = 1;
};

class MetricsHttpServer {
 public:
  // The text served at /metrics; may throw (answered with 500 and the exception's message).
  using Body = std::function<std::string()>;

  // Binds and listens on `bind` (an IPv4 or IPv6 literal):`port` (0: the system picks) and starts
  // serving. Returns an InvalidArgument error for an address that is not a literal, Unavailable
  // with the reason for one that cannot be bound.
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& bind, int port,
                                                            Body body,
                                                            MetricsHttpLimits limits = {});

  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The port actually bound.
  int port() const;

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

// Whether `bind` is a loopback address (127.0.0.0/8 or ::1); false for anything unparsable.
bool IsLoopbackAddress(const std::string& bind);

}  // namespace hoist::runtime
