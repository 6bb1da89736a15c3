// ControlServer: the gRPC JobControl service (proto/hoist/v1/control.proto) through which
// operators watch and steer a running job; rank 0 serves it on control.bind:control.port. Each
// RPC becomes a call on the job's JobController (runtime/observe/control.h), whose Status becomes
// the gRPC status with the same message (InvalidArgument -> INVALID_ARGUMENT, FailedPrecondition ->
// FAILED_PRECONDITION, DeadlineExceeded -> DEADLINE_EXCEEDED, Unavailable -> UNAVAILABLE, ...).
//
// Security: on a loopback address every local user can connect, so calls need a bearer token
// there too unless control.require_token is false: a job with no token configured makes one
// (runtime/observe/control_token.h) and writes it, mode 0600, to
// ControlServerOptions::job_token_path, where `hoist ctl` reads it; the server removes the file
// when it goes. Any other address needs TLS (control.tls) and a configured token
// (control.token_file or HOIST_CONTROL_TOKEN); Start refuses to serve without them. Every RPC must
// carry the metadata `authorization: Bearer <token>`, compared in constant time; a missing or wrong
// one is UNAUTHENTICATED. The token is never logged and never put in an error message.
//
// Bounds, so that peers who may not steer the job cannot make it spend memory, threads or log
// lines either: a request larger than ControlServerLimits::max_request_bytes is refused by gRPC
// with RESOURCE_EXHAUSTED before it is parsed, and what gRPC buffers of incoming data is held
// under max_buffered_bytes (calls over it are reset with RESOURCE_EXHAUSTED, or their
// connection closed, UNAVAILABLE); beyond
// max_watch_streams open WatchStatus streams
// (each holds a server thread) another one is refused with RESOURCE_EXHAUSTED naming the cap; of
// the refused calls (missing or wrong token, streams over the cap) only the first few in each
// interval are logged one by one, the rest as a count (core/rate_limited_log.h).
//
// Blocking: Checkpoint, Stop with a checkpoint and UpdateHyperparams wait for the training loop
// to carry them out, until the client's deadline (at most an hour) or until the controller shuts
// down. WatchStatus streams until the client cancels, the controller shuts down or the server
// is destroyed; it notices the last two within a tenth of a second.
//
// Watching: WatchStatus sends a status at once and then one per interval (the newest, changed or
// not), and a last one when the job ends. The threads that serve RPCs run at the lowest CPU
// priority (nice 19), so that serving yields the cores to training.
//
// Thread-safety: the RPCs run on gRPC's threads; port() and address() may be called from any
// thread. The controller must outlive the server. The destructor ends open WatchStatus streams
// and waits for every RPC in progress, so the owner shuts the controller down (the job ended)
// before destroying the server: a Checkpoint waiting for a loop that no longer runs would
// otherwise hold the destructor until its deadline.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/observe/control.h"
#include "runtime/observe/control_token.h"

namespace hoist::runtime {

struct ControlServerLimits {
  // The largest request accepted. The largest one the protocol has (UpdateHyperparamsRequest,
  // two doubles) is 18 bytes; the rest is room for fields a later hoist may add.
  int max_request_bytes = 4096;
  // What gRPC may buffer of what peers send, all connections together (a soft bound: gRPC resets
  // calls, or closes connections, to get back under it). Operators' requests are a few bytes;
  // the room is for the read buffers of many connections.
  int64_t max_buffered_bytes = int64_t{8} << 20;
  // WatchStatus streams open at once (>= 1). `hoist ctl watch` holds one; dashboards poll.
  int max_watch_streams = 16;
  // Refused calls logged one by one per interval (>= 1), and the interval (> 0).
  int refusal_log_burst = 5;
  double refusal_log_interval_s = 60;
};

struct ControlServerOptions {
  // Where a loopback job that requires a token and has none configured writes the one it makes:
  // JobTokenPath(checkpoint.dir). Must be set when that case can arise.
  std::string job_token_path;
  ControlServerLimits limits;
};

class ControlServer {
 public:
  // Whether this build has gRPC (HOIST_WITH_GRPC found it).
  static bool Available();

  // Reads the token and the TLS files (or makes the job's token), binds
  // control.bind:control.port (a port of the system's choosing when it is 0), writes the job's
  // token file when it made one, and starts serving. Refused with InvalidArgument: a non-loopback
  // address without TLS or without a token; NotFound or IoError for a file that cannot be read or
  // written (named); Unavailable for an address and port that cannot be bound (in use, not
  // permitted, not this machine's); FailedPrecondition in a build without gRPC, naming what to
  // install.
  static StatusOr<std::unique_ptr<ControlServer>> Start(const ControlConfig& config,
                                                        JobController* controller,
                                                        ControlServerOptions options = {});

  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // The port actually bound.
  int port() const;
  // "127.0.0.1:7070", "[::1]:7070": what `hoist ctl --addr` takes.
  std::string address() const;
  // How clients must connect: over TLS, and with a bearer token.
  bool tls() const;
  bool requires_token() const;
  // The file holding the token this job made (absolute), or "" when it made none.
  const std::string& job_token_path() const;

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace hoist::runtime
