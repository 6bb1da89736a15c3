#include "runtime/observe/control_server.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <utility>

#include "core/file_system.h"
#include "core/logging.h"
#include "core/memory_tracker.h"
#include "core/rate_limited_log.h"

#if HOIST_HAVE_GRPC
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>

#include "hoist/v1/control.grpc.pb.h"
#endif

namespace hoist::runtime {

namespace {

// "[::1]:7070" for IPv6, "127.0.0.1:7070" for IPv4: gRPC's and `hoist ctl`'s address syntax.
[[maybe_unused]] std::string HostPort(const std::string& bind, int port) {
  const bool v6 = bind.find(':') != std::string::npos;
  return (v6 ? "[" + bind + "]" : bind) + ":" + std::to_string(port);
}

// The checks that Start makes whatever ParseConfig did: a ControlConfig may also be built in code.
[[maybe_unused]] Status CheckExposure(const ControlConfig& config, bool have_token) {
  if (config.loopback()) return Status::Ok();
  const std::string where = "control.bind is \"" + config.bind +
                            "\", which other machines can reach, so the control service ";
  if (config.tls.cert.empty() || config.tls.key.empty()) {
    return InvalidArgumentError(where +
                                "needs TLS there: set control.tls.cert and control.tls.key "
                                "(PEM files), or bind \"127.0.0.1\"");
  }
  if (!have_token) {
    return InvalidArgumentError(where +
                                "needs a bearer token there: set control.token_file to a file "
                                "holding it, or the environment variable HOIST_CONTROL_TOKEN");
  }
  return Status::Ok();
}

// The token the service requires ("" for none), and whether the job made it.
struct ServiceToken {
  std::string token;
  bool made = false;
};

[[maybe_unused]] StatusOr<ServiceToken> ResolveToken(const ControlConfig& config,
                                                     const ControlServerOptions& options) {
  ServiceToken resolved;
  HOIST_ASSIGN_OR_RETURN(resolved.token, LoadControlToken(config));
  if (config.loopback() && !config.require_token) {
    if (!config.token_file.empty()) {
      return InvalidArgumentError(
          "control.require_token is false but control.token_file is set; remove token_file to "
          "serve without a token, or require_token to serve with the token in the file");
    }
    if (!resolved.token.empty()) {
      HOIST_LOG(WARN) << "control: HOIST_CONTROL_TOKEN is set but control.require_token is "
                         "false, so calls need no token (any user of this machine may steer "
                         "the job)";
      resolved.token.clear();
    }
    return resolved;
  }
  HOIST_RETURN_IF_ERROR(CheckExposure(config, !resolved.token.empty()));
  if (resolved.token.empty()) {
    HOIST_CHECK(!options.job_token_path.empty())
        << "ControlServer::Start needs options.job_token_path to write the job's token";
    HOIST_ASSIGN_OR_RETURN(resolved.token, NewControlToken());
    resolved.made = true;
  }
  return resolved;
}

}  // namespace

#if HOIST_HAVE_GRPC

namespace {

namespace v1 = ::hoist::v1;
using Clock = JobController::Clock;

// How long a blocking RPC waits when its client set no deadline (or a longer one).
constexpr std::chrono::hours kMaxWait{1};
// How often a WatchStatus stream looks for a cancelled client or a server shutting down.
constexpr std::chrono::milliseconds kPollSlice{100};
constexpr double kMinWatchInterval_s = 0.05;
constexpr double kMaxWatchInterval_s = 3600;
// How long the destructor lets RPCs in progress finish before gRPC cancels them.
constexpr std::chrono::milliseconds kShutdownGrace{500};

grpc::StatusCode GrpcCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return grpc::StatusCode::OK;
    case StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kDataLoss: return grpc::StatusCode::DATA_LOSS;
    case StatusCode::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kDeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case StatusCode::kUnimplemented: return grpc::StatusCode::UNIMPLEMENTED;
    // An I/O error on the job's side (a checkpoint that could not be written) is no fault of
    // the request, and retrying it blindly would not help either.
    case StatusCode::kIoError: return grpc::StatusCode::INTERNAL;
    case StatusCode::kInternal: return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(GrpcCode(status.code()), status.message());
}

v1::JobState ToProto(JobState state) {
  switch (state) {
    case JobState::kStarting: return v1::JOB_STATE_STARTING;
    case JobState::kRunning: return v1::JOB_STATE_RUNNING;
    case JobState::kPaused: return v1::JOB_STATE_PAUSED;
    case JobState::kStopping: return v1::JOB_STATE_STOPPING;
    case JobState::kFinished: return v1::JOB_STATE_FINISHED;
    case JobState::kFailed: return v1::JOB_STATE_FAILED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

void ToProto(const JobStatus& s, v1::JobStatus* out) {
  out->set_state(ToProto(s.state));
  out->set_step(s.step);
  out->set_total_steps(s.total_steps);
  out->set_loss(s.loss);
  out->set_lr(s.lr);
  out->set_grad_norm(s.grad_norm);
  out->set_loss_scale(s.loss_scale);
  out->set_tokens_per_s(s.tokens_per_s);
  out->set_step_s(s.step_s);
  out->set_skipped_steps(s.skipped_steps);
  out->set_gradient_clipping(s.gradient_clipping);
  if (s.lr_override) out->set_lr_override(*s.lr_override);
  out->set_last_checkpoint(s.last_checkpoint);
  out->set_world_size(s.world_size);
  out->set_version(s.version);
  for (const RankMemory& rank : s.memory) {
    v1::RankMemory* r = out->add_memory();
    r->set_rank(rank.rank);
    for (int p = 0; p < kNumPlaces; ++p) {
      for (int c = 0; c < kNumCategories; ++c) {
        const int64_t current = rank.current[p][c], peak = rank.peak[p][c];
        if (current == 0 && peak == 0) continue;
        v1::MemoryEntry* e = r->add_entries();
        e->set_place(PlaceName(static_cast<Place>(p)));
        e->set_category(CategoryName(static_cast<Category>(c)));
        e->set_current_bytes(current);
        e->set_peak_bytes(peak);
      }
    }
  }
}

// Equal strings in time that depends on their lengths only, so that timing the replies to wrong
// tokens tells nothing about how much of a guess was right.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// The client's deadline as a steady-clock point, capped at kMaxWait from now.
Clock::time_point DeadlineOf(const grpc::ServerContext& context) {
  const auto remaining = context.deadline() - std::chrono::system_clock::now();
  const auto capped = std::clamp<std::chrono::system_clock::duration>(
      remaining, std::chrono::system_clock::duration::zero(), kMaxWait);
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(capped);
}

// The control service must not slow the training it watches: on a machine whose cores the
// training threads keep busy, a burst of RPCs would otherwise take their share of the cores, and a
// descheduled OpenMP thread stalls its whole team. gRPC runs the handlers on its own threads, so
// each one lowers itself to the least CPU priority (nice 19, Linux's per-thread nice) the first
// time it serves a call: it then runs when the training threads leave a core free, and still
// gets a small share when they never do. Failure only leaves the priority as it was.
void YieldToTraining() {
  thread_local bool lowered = false;
  if (lowered) return;
  lowered = true;
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
}

class JobControlService final : public v1::JobControl::Service {
 public:
  // `job_token_path`: where the job wrote `token` when it made it ("" when it was configured),
  // for the refusals to point at.
  JobControlService(JobController* controller, std::string token, std::string job_token_path,
                    const ControlServerLimits& limits)
      : controller_(controller),
        token_(std::move(token)),
        job_token_path_(std::move(job_token_path)),
        max_watch_streams_(limits.max_watch_streams),
        refusals_("control: refused calls", limits.refusal_log_burst,
                  std::chrono::duration_cast<RateLimitedLog::Clock::duration>(
                      std::chrono::duration<double>(limits.refusal_log_interval_s))) {}

  // Makes open streams end; RPCs that arrive from now on are refused.
  void BeginShutdown() { stopping_.store(true); }

  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest*,
                         v1::JobStatus* response) override {
    if (grpc::Status denied = Authorize(*context); !denied.ok()) return denied;
    ToProto(controller_->GetStatus(), response);
    return grpc::Status::OK;
  }

  grpc::Status Pause(grpc::ServerContext* context, const v1::PauseRequest*,
                     v1::PauseResponse*) override {
    if (grpc::Status denied = Authorize(*context); !denied.ok()) return denied;
    HOIST_LOG(INFO) << "control: pause requested by " << context->peer();
    return ToGrpc(controller_->Pause());
  }

  grpc::Status Resume(grpc::ServerContext* context, const v1::ResumeRequest*,
                      v1::ResumeResponse*) override {
    if (grpc::Status denied = Authorize(*context); !denied.ok()) return denied;
    HOIST_LOG(INFO) << "control: resume requested by " << context->peer();
    return ToGrpc(controller_->Resume());
  }

  grpc::Status Checkpoint(grpc::ServerContext* context, const v1::CheckpointRequest*,
                          v1::CheckpointResponse* response) override {
    if (grpc::Status denied = Authorize(*context); !denied.ok()) return denied;
    HOIST_LOG(INFO) << "control: checkpoint requested by " << context->peer();
    StatusOr<std::string> path = controller_->Checkpoint(DeadlineOf(*context));
    if (!path.ok()) return ToGrpc(path.status());
    response->set_path(*path);
    return grpc::Status::OK;
  }

  grpc::Status Stop(grpc::ServerContext* context, const v1::StopRequest* request,
                    v1::StopResponse* response) override {
    if (grpc::Status denied = Authorize(*context); !denied.ok()) return denied;
    HOIST_LOG(INFO) << "control: stop" << (request->checkpoint() ? " with a checkpoint" : "")
                    << " requested by " << context->peer();
    StatusOr<std::string> path = controller_->Stop(request->checkpoint(), DeadlineOf(*context));
    if (!path.ok()) return ToGrpc(path.status());
    response->set_checkpoint_path(*path);
    return grpc::Status::OK;
  }

  grpc::Status UpdateHyperparams(grpc::ServerContext* context,
                                 const v1::UpdateHyperparamsRequest* request,
                                 v1::UpdateHyperparamsResponse* response) override {
    if (grpc::Status denied = Authorize(*context); !denied.ok()) return denied;
    HyperparamUpdate update;
    if (request->has_lr()) update.lr = request->lr();
    if (request->has_gradient_clipping()) update.gradient_clipping = request->gradient_clipping();
    HOIST_LOG(INFO) << "control: hyperparameter update requested by " << context->peer()
                    << (update.lr ? " lr=" + std::to_string(*update.lr) : "")
                    << (update.gradient_clipping
                            ? " gradient_clipping=" + std::to_string(*update.gradient_clipping)
                            : "");
    Status status = controller_->UpdateHyperparams(update, DeadlineOf(*context));
    if (!status.ok()) return ToGrpc(status);
    const JobStatus now = controller_->GetStatus();
    if (now.lr_override) response->set_lr_override(*now.lr_override);
    response->set_gradient_clipping(now.gradient_clipping);
    return grpc::Status::OK;
  }

  grpc::Status WatchStatus(grpc::ServerContext* context, const v1::WatchStatusRequest* request,
                           grpc::ServerWriter<v1::JobStatus>* writer) override {
    if (grpc::Status denied = Authorize(*context); !denied.ok()) return denied;
    // Each open stream holds one of the server's threads until it ends.
    if (watch_streams_.fetch_add(1) >= max_watch_streams_) {
      watch_streams_.fetch_sub(1);
      refusals_.Log(LogLevel::kWarn, "control: refused a WatchStatus stream from " +
                                         context->peer() + ": " +
                                         std::to_string(max_watch_streams_) + " are open already");
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "this job serves at most " + std::to_string(max_watch_streams_) +
                              " WatchStatus streams at once and all are open; end one (a "
                              "running hoist ctl watch), or poll with GetStatus (hoist ctl "
                              "status)");
    }
    struct StreamSlot {
      std::atomic<int>* open;
      ~StreamSlot() { open->fetch_sub(1); }
    } slot{&watch_streams_};
    double interval_s = request->interval_seconds();
    if (!std::isfinite(interval_s) || interval_s < 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "interval_seconds must be a finite number >= 0 (0: 1 s), got " +
                              std::to_string(interval_s));
    }
    if (interval_s == 0) interval_s = 1;
    interval_s = std::clamp(interval_s, kMinWatchInterval_s, kMaxWatchInterval_s);
    const auto interval =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s));
    // A fixed cadence rather than one message per change: a step may take milliseconds, and a
    // watcher wants a steady view, not a flood. WaitForUpdate is the sleep: it wakes early for
    // news (looked at and ignored until the next tick) and for the controller's shutdown, which
    // sends the final status at once.
    uint64_t version = 0;
    Clock::time_point next = Clock::now();
    while (true) {
      if (stopping_.load()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the control server is shutting down");
      }
      if (context->IsCancelled()) return grpc::Status::CANCELLED;
      const bool ended = controller_->shut_down();
      const Clock::time_point now = Clock::now();
      if (ended || now >= next) {
        v1::JobStatus status;
        ToProto(controller_->GetStatus(), &status);
        if (!writer->Write(status)) return grpc::Status::CANCELLED;  // the client has gone
        if (ended) return grpc::Status::OK;
        next += interval;
        if (next <= now) next = now + interval;
      }
      controller_->WaitForUpdate(&version, std::min(next, Clock::now() + kPollSlice));
    }
  }

 private:
  // OK when no token is configured or the call carries the right one.
  grpc::Status Authorize(const grpc::ServerContext& context) {
    YieldToTraining();
    if (stopping_.load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the control server is shutting down");
    }
    if (token_.empty()) return grpc::Status::OK;
    const auto& metadata = context.client_metadata();
    auto it = metadata.find("authorization");
    if (it == metadata.end()) {
      refusals_.Log(LogLevel::kWarn,
                    "control: refused a call without a bearer token from " + context.peer());
      if (!job_token_path_.empty()) {
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                            "this job's control service needs a bearer token; the job wrote it "
                            "to " +
                                job_token_path_ +
                                " (readable by the job's user only): run hoist ctl with the "
                                "job's config (-c), its --checkpoint-dir, or --token-file " +
                                job_token_path_);
      }
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this job's control service needs a bearer token: send the metadata "
                          "'authorization: Bearer <token>' (hoist ctl: --token-file or "
                          "HOIST_CONTROL_TOKEN)");
    }
    const std::string_view value(it->second.data(), it->second.size());
    constexpr std::string_view kScheme = "bearer ";
    bool scheme_ok = value.size() >= kScheme.size();
    for (size_t i = 0; scheme_ok && i < kScheme.size(); ++i) {
      scheme_ok = std::tolower(static_cast<unsigned char>(value[i])) == kScheme[i];
    }
    if (!scheme_ok || !ConstantTimeEquals(value.substr(kScheme.size()), token_)) {
      refusals_.Log(LogLevel::kWarn,
                    "control: refused a call with a wrong bearer token from " + context.peer());
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          job_token_path_.empty()
                              ? std::string("wrong bearer token")
                              : "wrong bearer token; this job's token is in " + job_token_path_ +
                                    " (a restarted job makes a new one)");
    }
    return grpc::Status::OK;
  }

  JobController* const controller_;
  const std::string token_;  // "" when calls need none
  const std::string job_token_path_;
  const int max_watch_streams_;
  std::atomic<int> watch_streams_{0};  // open now
  RateLimitedLog refusals_;
  std::atomic<bool> stopping_{false};
};

StatusOr<std::string> ReadPem(const std::string& path, const char* key) {
  StatusOr<std::string> text = ReadFileToString(FileSystem::Posix(), path);
  if (!text.ok()) return text.status().WithContext(key);
  return text;
}

}  // namespace

struct ControlServer::Impl {
  // The service outlives the server that calls into it: members are destroyed in reverse.
  std::unique_ptr<JobControlService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  int port = 0;
  bool tls = false;
  bool requires_token = false;
  std::string job_token_path;  // absolute; "" when the job made no token
  std::string job_token;       // what the file holds, to remove it only if it still does
};

bool ControlServer::Available() { return true; }

StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(const ControlConfig& config,
                                                              JobController* controller,
                                                              ControlServerOptions options) {
  HOIST_CHECK(controller != nullptr);
  const ControlServerLimits& limits = options.limits;
  HOIST_CHECK(limits.max_request_bytes > 0 && limits.max_buffered_bytes > 0 &&
              limits.max_watch_streams >= 1 && limits.refusal_log_burst >= 1 &&
              limits.refusal_log_interval_s > 0);
  HOIST_ASSIGN_OR_RETURN(ServiceToken resolved, ResolveToken(config, options));
  std::string token = std::move(resolved.token);
  std::string job_token_path;
  if (resolved.made) {
    std::error_code error;
    const std::filesystem::path absolute = std::filesystem::absolute(options.job_token_path, error);
    job_token_path = error ? options.job_token_path : absolute.lexically_normal().string();
  }

  std::shared_ptr<grpc::ServerCredentials> credentials;
  const bool tls = !config.tls.cert.empty();
  if (tls) {
    grpc::SslServerCredentialsOptions options(
        config.tls.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    HOIST_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(config.tls.cert, "control.tls.cert"));
    HOIST_ASSIGN_OR_RETURN(pair.private_key, ReadPem(config.tls.key, "control.tls.key"));
    options.pem_key_cert_pairs.push_back(std::move(pair));
    if (!config.tls.client_ca.empty()) {
      HOIST_ASSIGN_OR_RETURN(options.pem_root_certs,
                             ReadPem(config.tls.client_ca, "control.tls.client_ca"));
    }
    credentials = grpc::SslServerCredentials(options);
  } else {
    credentials = grpc::InsecureServerCredentials();
  }

  auto impl = std::make_unique<Impl>();
  impl->tls = tls;
  impl->requires_token = !token.empty();
  if (resolved.made) impl->job_token = token;
  impl->service =
      std::make_unique<JobControlService>(controller, std::move(token), job_token_path, limits);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, with which a second job on the same port would start
  // and quietly receive half of the first one's calls; a port in use must be an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // gRPC's default is 4 MiB: anyone who can connect, token or not, would make the job receive
  // and parse that much per call before the token is looked at.
  builder.SetMaxReceiveMessageSize(limits.max_request_bytes);
  // And it receives the whole of a message before it compares the size (it grants the flow
  // control window the message's header asks for), so the cap alone still lets many large
  // requests at once fill memory before each is refused. The quota bounds what gRPC buffers
  // for this server: past it, gRPC resets calls (RESOURCE_EXHAUSTED) or closes connections
  // until the buffers drain.
  grpc::ResourceQuota quota("hoist control service");
  quota.Resize(static_cast<size_t>(limits.max_buffered_bytes));
  builder.SetResourceQuota(quota);
  const std::string requested = HostPort(config.bind, config.port);
  builder.AddListeningPort(requested, credentials, &impl->port);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    if (impl->server != nullptr) impl->server->Shutdown();
    return UnavailableError(
        "cannot serve the control service on " + requested +
        (config.port == 0 ? std::string(" (a port of the system's choosing)")
                          : " (control.port " + std::to_string(config.port) + ")") +
        ": the port is in use or not permitted, the address is not this machine's" +
        (tls ? ", or control.tls.cert and control.tls.key are not a valid PEM pair" : "") +
        "; choose another control.port or control.bind");
  }
  impl->address = HostPort(config.bind, impl->port);
  if (resolved.made) {
    // Written once the port is ours, so that a job that cannot serve leaves no file behind.
    if (Status written = WriteTokenFile(job_token_path, impl->job_token); !written.ok()) {
      impl->service->BeginShutdown();
      impl->server->Shutdown();
      return Status(written.code(),
                    "cannot write the control service's token file: " + written.message() +
                        "; the job makes a token (control.require_token) because none is "
                        "configured: make checkpoint.dir a directory this user can write, or "
                        "set control.token_file, or control.require_token=false to serve "
                        "without a token");
    }
    impl->job_token_path = job_token_path;
  }
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

ControlServer::~ControlServer() {
  impl_->service->BeginShutdown();
  // Waits for the handlers to return: streams see the flag within kPollSlice; calls still
  // running at the deadline are cancelled.
  impl_->server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  impl_->server->Wait();
  impl_->server.reset();
  if (!impl_->job_token_path.empty()) RemoveTokenFile(impl_->job_token_path, impl_->job_token);
}

#else  // !HOIST_HAVE_GRPC

struct ControlServer::Impl {
  std::string address;
  int port = 0;
  bool tls = false;
  bool requires_token = false;
  std::string job_token_path;
};

bool ControlServer::Available() { return false; }

StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(const ControlConfig&, JobController*,
                                                              ControlServerOptions) {
  return FailedPreconditionError(
      "control.enabled is true but this hoist was built without gRPC: install it (Debian: "
      "libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler, or "
      "scripts/install-deps --grpc) and rebuild with HOIST_WITH_GRPC=AUTO or ON, or set "
      "control.enabled=false");
}

ControlServer::~ControlServer() = default;

#endif  // HOIST_HAVE_GRPC

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

int ControlServer::port() const { return impl_->port; }

std::string ControlServer::address() const { return impl_->address; }

bool ControlServer::tls() const { return impl_->tls; }

bool ControlServer::requires_token() const { return impl_->requires_token; }

const std::string& ControlServer::job_token_path() const { return impl_->job_token_path; }

}  // namespace hoist::runtime
