// ControlServer: the gRPC JobControl service (proto/hoist/v1/control.proto) through which
// operators watch and steer a running job; rank 0 serves it on control.bind:control.port. Each
// RPC becomes a call on the job's JobController (runtime/control.h), whose Status becomes the
// gRPC status with the same message (InvalidArgument -> INVALID_ARGUMENT, FailedPrecondition ->
// FAILED_PRECONDITION, DeadlineExceeded -> DEADLINE_EXCEEDED, Unavailable -> UNAVAILABLE, ...).
//
// Security: on a loopback address the service is open to this machine's users unless a token
// is configured. Any other address needs TLS (control.tls) and a bearer token (control.token_file
// or HOIST_CONTROL_TOKEN); Start refuses to serve without them. With a token every RPC must
// carry the metadata `authorization: Bearer <token>`, compared in constant time; a missing or
// wrong one is UNAUTHENTICATED. The token is never logged and never put in an error message.
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

#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/config.h"
#include "runtime/control.h"

namespace hoist::runtime {

class ControlServer {
 public:
  // Whether this build has gRPC (HOIST_WITH_GRPC found it).
  static bool Available();

  // Reads the token and the TLS files, binds control.bind:control.port (a port of the system's
  // choosing when it is 0) and starts serving. Refused with InvalidArgument: a non-loopback
  // address without TLS or without a token; NotFound or IoError for a file that cannot be read;
  // Unavailable for an address and port that cannot be bound (in use, not permitted, not this
  // machine's); FailedPrecondition in a build without gRPC, naming what to install.
  static StatusOr<std::unique_ptr<ControlServer>> Start(const ControlConfig& config,
                                                        JobController* controller);

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

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

// The bearer token of the service: the contents of control.token_file when it is set (trailing
// newlines removed), else the environment variable HOIST_CONTROL_TOKEN, else "" (no token). An
// empty or unreadable token file is an error naming the file; a file that group or others may
// read is served with a warning. Blocks on the file read.
StatusOr<std::string> LoadControlToken(const ControlConfig& config);

// The token in `path`, trailing newlines removed; `what` names the file's role in errors and in
// the warning about permissions ("control.token_file", "--token-file"). Shared with `hoist ctl`.
StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& what);

}  // namespace hoist::runtime
