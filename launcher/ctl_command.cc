// `hoist ctl`: the command-line client of a running job's control service
// (proto/hoist/v1/control.proto, served by rank 0 when control.enabled is true).
//
//   hoist ctl [-c JOB.json] [--checkpoint-dir D] [--addr HOST:PORT] [--token-file F]
//             [--tls-ca F [--tls-cert F --tls-key F]] [--json] [--timeout S]
//             status|pause|resume|checkpoint|stop [--checkpoint]|set KEY=VALUE...|
//             watch [--interval S] [--count N]
//
// Where the job is and its token come from the job's config (-c; the built-in demo config
// without it, as for `hoist train`): the address from control.bind and control.port, the token
// from control.token_file, or else from the file a loopback job writes beside its checkpoints
// (runtime/observe/control_token.h). --addr, --checkpoint-dir, --token-file and HOIST_CONTROL_TOKEN
// take precedence.
//
// Exit codes: 0 done; 1 the server refused the request or could not be reached (one line on
// stderr: "hoist ctl: <command> failed: <CODE>: <the server's reason>"); 2 bad arguments, or a
// token file that cannot be read.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"
#include "launcher/commands.h"
#include "launcher/ctl_format.h"
#include "runtime/config/config.h"
#include "runtime/observe/control_server.h"
#include "runtime/observe/control_token.h"

#if HOIST_HAVE_GRPC
#include <grpcpp/grpcpp.h>

#include "hoist/v1/control.grpc.pb.h"
#endif

namespace hoist::launcher {
namespace {

struct CtlArgs {
  std::string config_path;     // "": the built-in demo config
  std::string checkpoint_dir;  // "": the config's checkpoint.dir
  std::string address;         // "": from the config
  std::string token_file;
  std::string tls_ca, tls_cert, tls_key;
  bool json = false;
  double timeout_s = 0;  // 0: the command's default
  bool stop_checkpoint = false;
  std::vector<std::string> assignments;
  double interval_s = 1;
  int64_t count = 0;  // 0: until the job ends
};

constexpr int kUsageExit = 2;

// Quick requests are answered at once; the others wait for the job to reach a step boundary
// (and, for a checkpoint, to write it), which in a large job takes minutes.
constexpr double kQuickTimeout_s = 10;
constexpr double kBoundaryTimeout_s = 600;

int UsageError(const std::string& message) {
  std::cerr << "hoist ctl: " << message << "\n";
  return kUsageExit;
}

#if HOIST_HAVE_GRPC

namespace v1 = ::hoist::v1;

// The job a command goes to: its address and the token to send ("" for none).
struct CtlTarget {
  std::string address;
  std::string token;
};

// "[::1]:7070" or "127.0.0.1:7070" for a bind address; the wildcard binds become the loopback
// address of their family, through which this machine reaches them.
std::string ClientAddress(const std::string& bind, int port) {
  std::string host = bind;
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// The address and the token from the flags, the environment and the job's config, in that order.
StatusOr<CtlTarget> ResolveTarget(const CtlArgs& args) {
  const char* env = std::getenv("HOIST_CONTROL_TOKEN");
  const bool from_env = env != nullptr && *env != '\0';
  CtlTarget target;
  target.address = args.address;
  std::optional<runtime::ControlClientSettings> settings;
  if (target.address.empty() || (args.token_file.empty() && !from_env)) {
    HOIST_ASSIGN_OR_RETURN(settings, runtime::LoadControlClientSettings(args.config_path));
  }
  if (target.address.empty()) {
    if (settings->control.port == 0) {
      return InvalidArgumentError(
          "the job's control.port is 0 (a port of the system's choosing), so its address is "
          "not in the config: give --addr with the one the job logged (\"control: serving "
          "ADDR\")");
    }
    target.address = ClientAddress(settings->control.bind, settings->control.port);
  }
  if (!args.token_file.empty()) {
    HOIST_ASSIGN_OR_RETURN(target.token, runtime::ReadTokenFile(args.token_file, "--token-file"));
    return target;
  }
  if (from_env) {
    target.token = env;
    return target;
  }
  const runtime::ControlConfig& control = settings->control;
  if (!control.token_file.empty()) {
    HOIST_ASSIGN_OR_RETURN(
        target.token, runtime::ReadTokenFile(control.token_file, "the job's control.token_file"));
    return target;
  }
  // The file of a job that serves on loopback, for a call that goes to this machine.
  HOIST_ASSIGN_OR_RETURN(const std::string host, AddressHost(target.address));
  if (!control.require_token || !control.loopback() || !IsLoopbackHost(host)) return target;
  const std::string path = runtime::JobTokenPath(
      args.checkpoint_dir.empty() ? settings->checkpoint_dir : args.checkpoint_dir);
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 && errno == ENOENT) {
    // Without -c or --checkpoint-dir this is the demo's file, whose absence says nothing: the
    // job may be another config's, and the server names its token file when it refuses a call.
    if (args.config_path.empty() && args.checkpoint_dir.empty()) return target;
    return NotFoundError(
        "no control token at " + path +
        ": a job serving on a loopback address writes it there when it starts (unless "
        "control.require_token is false); is the job running, with this " +
        (args.checkpoint_dir.empty() ? "config's checkpoint.dir"
                                     : std::string("--checkpoint-dir")) +
        "? Otherwise give --token-file with the file the job logged (\"control: serving ... "
        "token in FILE\")");
  }
  HOIST_ASSIGN_OR_RETURN(target.token, runtime::ReadTokenFile(path, "the job's token file"));
  return target;
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

// One connection to the server and what every call carries.
class CtlClient {
 public:
  // Reads the TLS files and makes the channel to `target` (it connects on the first call).
  static StatusOr<std::unique_ptr<CtlClient>> Create(const CtlArgs& args, CtlTarget target) {
    HOIST_ASSIGN_OR_RETURN(std::string host, AddressHost(target.address));
    auto client = std::unique_ptr<CtlClient>(new CtlClient(target.address));
    client->token_ = std::move(target.token);
    client->tls_ = !args.tls_ca.empty() || !args.tls_cert.empty();
    // Without TLS the token would cross the network in the clear, before the server could even
    // refuse the connection.
    if (!client->token_.empty() && !client->tls_ && !IsLoopbackHost(host)) {
      return InvalidArgumentError("refusing to send the bearer token unencrypted to " + host +
                                  ": give --tls-ca with the CA certificate of the job's "
                                  "control.tls.cert");
    }
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    if (client->tls_) {
      grpc::SslCredentialsOptions options;
      auto read = [](const std::string& path, const char* flag) -> StatusOr<std::string> {
        if (path.empty()) return std::string();
        StatusOr<std::string> text = ReadFileToString(FileSystem::Posix(), path);
        if (!text.ok()) return text.status().WithContext(flag);
        return text;
      };
      HOIST_ASSIGN_OR_RETURN(options.pem_root_certs, read(args.tls_ca, "--tls-ca"));
      HOIST_ASSIGN_OR_RETURN(options.pem_cert_chain, read(args.tls_cert, "--tls-cert"));
      HOIST_ASSIGN_OR_RETURN(options.pem_private_key, read(args.tls_key, "--tls-key"));
      credentials = grpc::SslCredentials(options);
    } else {
      credentials = grpc::InsecureChannelCredentials();
    }
    client->channel_ = grpc::CreateChannel(client->address_, credentials);
    client->stub_ = v1::JobControl::NewStub(client->channel_);
    return client;
  }

  v1::JobControl::Stub& stub() { return *stub_; }

  // A context for one call: the deadline (none when timeout_s is 0) and the token.
  std::unique_ptr<grpc::ClientContext> Context(double timeout_s) const {
    auto context = std::make_unique<grpc::ClientContext>();
    if (timeout_s > 0) {
      context->set_deadline(std::chrono::system_clock::now() +
                            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                std::chrono::duration<double>(timeout_s)));
    }
    if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
    return context;
  }

  // Prints why `command` failed and returns the exit code.
  int Fail(const std::string& command, const grpc::Status& status) const {
    const grpc::StatusCode code = status.error_code();
    const bool connected = channel_->GetState(false) == GRPC_CHANNEL_READY;
    if (!connected &&
        (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED)) {
      std::cerr << "hoist ctl: cannot reach the control service at " << address_ << ": "
                << status.error_message() << " (is the job running with control.enabled=true "
                << "and serving this address? "
                << (tls_ ? "Does --tls-ca hold the CA of its control.tls.cert?"
                         : "If it serves TLS, give --tls-ca.")
                << ")\n";
      return 1;
    }
    std::cerr << "hoist ctl: " << command << " failed: " << CodeName(code) << ": "
              << status.error_message();
    if (code == grpc::StatusCode::DEADLINE_EXCEEDED) std::cerr << " (raise --timeout)";
    std::cerr << "\n";
    return 1;
  }

 private:
  explicit CtlClient(std::string address) : address_(std::move(address)) {}

  const std::string address_;
  std::string token_;
  bool tls_ = false;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobControl::Stub> stub_;
};

// "0.0003", "1e-05", "1": as short as the value allows.
std::string FormatNumber(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

void PrintJson(const nlohmann::json& j) { std::cout << j.dump() << std::endl; }

int RunWatch(CtlClient& client, const CtlArgs& args) {
  v1::WatchStatusRequest request;
  request.set_interval_seconds(args.interval_s);
  auto context = client.Context(args.timeout_s);
  std::unique_ptr<grpc::ClientReader<v1::JobStatus>> reader =
      client.stub().WatchStatus(context.get(), request);
  v1::JobStatus status;
  int64_t received = 0;
  while (reader->Read(&status)) {
    if (args.json) {
      PrintJson(StatusJson(status));
    } else {
      std::cout << FormatWatchLine(status) << std::endl;
    }
    if (args.count > 0 && ++received >= args.count) {
      context->TryCancel();
      while (reader->Read(&status)) {
      }
      reader->Finish();
      return 0;
    }
  }
  grpc::Status end = reader->Finish();
  return end.ok() ? 0 : client.Fail("watch", end);
}

int RunCommand(const std::string& command, const CtlArgs& args) {
  StatusOr<CtlTarget> target = ResolveTarget(args);
  if (!target.ok()) return UsageError(target.status().message());
  StatusOr<std::unique_ptr<CtlClient>> created = CtlClient::Create(args, std::move(*target));
  if (!created.ok()) return UsageError(created.status().message());
  CtlClient& client = **created;
  const bool waits =
      command == "checkpoint" || command == "set" || (command == "stop" && args.stop_checkpoint);
  const double timeout_s =
      args.timeout_s > 0 ? args.timeout_s : (waits ? kBoundaryTimeout_s : kQuickTimeout_s);

  if (command == "watch") return RunWatch(client, args);
  if (command == "status") {
    v1::JobStatus status;
    grpc::Status rpc =
        client.stub().GetStatus(client.Context(timeout_s).get(), v1::GetStatusRequest(), &status);
    if (!rpc.ok()) return client.Fail(command, rpc);
    if (args.json) {
      PrintJson(StatusJson(status));
    } else {
      std::cout << FormatStatus(status);
    }
    return 0;
  }
  if (command == "pause" || command == "resume") {
    grpc::Status rpc;
    if (command == "pause") {
      v1::PauseResponse response;
      rpc = client.stub().Pause(client.Context(timeout_s).get(), v1::PauseRequest(), &response);
    } else {
      v1::ResumeResponse response;
      rpc = client.stub().Resume(client.Context(timeout_s).get(), v1::ResumeRequest(), &response);
    }
    if (!rpc.ok()) return client.Fail(command, rpc);
    if (args.json) {
      PrintJson({{"command", command}, {"ok", true}});
    } else if (command == "pause") {
      std::cout << "pause requested: the job pauses when its current step ends\n";
    } else {
      std::cout << "resume requested: the job continues from the step boundary\n";
    }
    return 0;
  }
  if (command == "checkpoint") {
    v1::CheckpointResponse response;
    grpc::Status rpc = client.stub().Checkpoint(client.Context(timeout_s).get(),
                                                v1::CheckpointRequest(), &response);
    if (!rpc.ok()) return client.Fail(command, rpc);
    if (args.json) {
      PrintJson({{"command", command}, {"path", response.path()}});
    } else {
      std::cout << "checkpoint written: " << response.path() << "\n";
    }
    return 0;
  }
  if (command == "stop") {
    v1::StopRequest request;
    request.set_checkpoint(args.stop_checkpoint);
    v1::StopResponse response;
    grpc::Status rpc = client.stub().Stop(client.Context(timeout_s).get(), request, &response);
    if (!rpc.ok()) return client.Fail(command, rpc);
    if (args.json) {
      PrintJson({{"command", command}, {"checkpoint_path", response.checkpoint_path()}});
    } else if (args.stop_checkpoint) {
      std::cout << "checkpoint written: " << response.checkpoint_path()
                << "\nstop requested: the job ends after its current step\n";
    } else {
      std::cout << "stop requested: the job ends after its current step\n";
    }
    return 0;
  }
  // set
  StatusOr<runtime::HyperparamUpdate> update = ParseSetAssignments(args.assignments);
  if (!update.ok()) return UsageError(update.status().message());
  v1::UpdateHyperparamsRequest request;
  if (update->lr) request.set_lr(*update->lr);
  if (update->gradient_clipping) request.set_gradient_clipping(*update->gradient_clipping);
  v1::UpdateHyperparamsResponse response;
  grpc::Status rpc =
      client.stub().UpdateHyperparams(client.Context(timeout_s).get(), request, &response);
  if (!rpc.ok()) return client.Fail(command, rpc);
  if (args.json) {
    PrintJson({{"command", command},
               {"lr_override", response.has_lr_override() ? nlohmann::json(response.lr_override())
                                                          : nlohmann::json()},
               {"gradient_clipping", response.gradient_clipping()}});
  } else {
    std::cout << "applied: lr "
              << (response.has_lr_override() ? FormatNumber(response.lr_override())
                                             : std::string("from the schedule"))
              << ", gradient_clipping "
              << (response.gradient_clipping() > 0 ? FormatNumber(response.gradient_clipping())
                                                   : std::string("off"))
              << "\n";
  }
  return 0;
}

#else  // !HOIST_HAVE_GRPC

int RunCommand(const std::string&, const CtlArgs&) {
  std::cerr << "hoist ctl: this hoist was built without gRPC; install it (Debian: "
               "libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler, or "
               "scripts/install-deps --grpc) and rebuild with HOIST_WITH_GRPC=AUTO or ON\n";
  return 1;
}

#endif  // HOIST_HAVE_GRPC

// Client-side checks that need no server.
int CheckArgs(const std::string& command, const CtlArgs& args) {
  if (!args.address.empty()) {
    if (StatusOr<std::string> host = AddressHost(args.address); !host.ok()) {
      return UsageError(host.status().message());
    }
  }
  if (!std::isfinite(args.timeout_s) || args.timeout_s < 0) {
    return UsageError("--timeout must be a number of seconds > 0");
  }
  if (args.tls_cert.empty() != args.tls_key.empty()) {
    return UsageError(
        "--tls-cert and --tls-key go together (a client certificate and its "
        "private key)");
  }
  if (command == "set") {
    StatusOr<runtime::HyperparamUpdate> update = ParseSetAssignments(args.assignments);
    if (!update.ok()) return UsageError(update.status().message());
  }
  if (command == "watch") {
    if (!std::isfinite(args.interval_s) || args.interval_s <= 0) {
      return UsageError(
          "watch: --interval must be a number of seconds > 0 (at least 0.05 is "
          "used)");
    }
    if (args.count < 0) return UsageError("watch: --count must be >= 0 (0: until the job ends)");
  }
  return 0;
}

}  // namespace

void AddCtlCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<CtlArgs>();
  CLI::App* ctl = app.add_subcommand(
      "ctl",
      "Watch and steer a running job through its control service (control.enabled=true): "
      "status, pause, resume, checkpoint, stop, set, watch");
  ctl->require_subcommand(1);
  // The connection flags may also follow the command: `hoist ctl status --json`.
  ctl->fallthrough();
  ctl->add_option("-c,--config", args->config_path,
                  "The job's config, for its control address and token (default: the built-in "
                  "demo config, as for hoist train)");
  ctl->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "The job's checkpoint.dir, where a job serving on loopback writes its token "
                  "(control.token) (default: the config's)");
  ctl->add_option("--addr", args->address,
                  "The job's control address, HOST:PORT (default: the config's control.bind and "
                  "control.port, 127.0.0.1:7070 for the demo)");
  ctl->add_option("--token-file", args->token_file,
                  "File holding the bearer token (default: the HOIST_CONTROL_TOKEN variable, "
                  "else the config's control.token_file, else the job's control.token)");
  ctl->add_option("--tls-ca", args->tls_ca, "Connect over TLS, trusting this CA certificate (PEM)");
  ctl->add_option("--tls-cert", args->tls_cert, "Client certificate for TLS (PEM)");
  ctl->add_option("--tls-key", args->tls_key, "Private key of --tls-cert (PEM)");
  ctl->add_flag("--json", args->json, "Print one JSON object per result (watch: one per line)");
  ctl->add_option("--timeout", args->timeout_s,
                  "Seconds to wait for the answer (default 10; 600 for checkpoint, stop "
                  "--checkpoint and set, which wait for a step boundary; watch: none)");

  auto add = [&](const char* name, const char* help) {
    CLI::App* sub = ctl->add_subcommand(name, help);
    sub->callback([args, exit_code, command = std::string(name)] {
      const int usage = CheckArgs(command, *args);
      *exit_code = usage != 0 ? usage : RunCommand(command, *args);
    });
    return sub;
  };
  add("status", "Print the job's state, step, loss, lr, throughput and per-rank memory");
  add("pause", "Pause at the end of the current step (memory and data position are kept)");
  add("resume", "Continue a paused job");
  add("checkpoint", "Write a checkpoint at the next step boundary and print its directory");
  CLI::App* stop = add("stop", "End the job at the next step boundary (every rank exits 0)");
  stop->add_flag("--checkpoint", args->stop_checkpoint, "Write a checkpoint before stopping");
  CLI::App* set =
      add("set", "Change hyperparameters from the next step: lr=V, gradient_clipping=V");
  set->add_option("assignments", args->assignments, "KEY=VALUE (keys: lr, gradient_clipping)")
      ->required();
  CLI::App* watch = add("watch", "Print the status every --interval seconds until the job ends");
  watch->add_option("--interval", args->interval_s, "Seconds between updates")
      ->capture_default_str();
  watch->add_option("--count", args->count, "Stop after this many updates (0: until the job ends)");
}

}  // namespace hoist::launcher
