// Who may steer a job: the control service's refusals to serve an exposed address without TLS
// and a token, its bearer-token check, the token a loopback job makes for itself in an
// owner-only file (and the setting that turns it off), TLS (with and without client
// certificates), and a token that never reaches the log.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "core/logging.h"
#include "runtime/observe/control.h"
#include "runtime/observe/control_server.h"
#include "runtime/observe/control_token.h"
#include "tests/runtime/control_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "tok-7f3a9c1e5b2d";

// Sets (or, with nullopt, unsets) an environment variable for the life of a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("hoist_control_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path WriteFile(const fs::path& path, const std::string& text, fs::perms perms) {
  std::ofstream(path) << text;
  fs::permissions(path, perms);
  return path;
}

constexpr fs::perms kOwnerOnly = fs::perms::owner_read | fs::perms::owner_write;

TEST(ControlSecurity, DefaultsServeThisMachineOnly) {
  EXPECT_EQ(ControlConfig{}.bind, "127.0.0.1");
  EXPECT_TRUE(ControlConfig{}.loopback());
}

TEST(ControlSecurity, TokenFileLosesItsTrailingNewline) {
  fs::path dir = TempDir("token_newline");
  ControlConfig config;
  config.token_file = WriteFile(dir / "token", std::string(kToken) + "\n", kOwnerOnly);
  StatusOr<std::string> token = LoadControlToken(config);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_EQ(*token, kToken);
  WriteFile(dir / "token", std::string(kToken) + "\r\n", kOwnerOnly);
  EXPECT_EQ(*LoadControlToken(config), kToken);
}

TEST(ControlSecurity, AnEmptyTokenFileIsAnErrorNamingIt) {
  fs::path dir = TempDir("token_empty");
  ControlConfig config;
  config.token_file = WriteFile(dir / "token", "\n", kOwnerOnly);
  StatusOr<std::string> token = LoadControlToken(config);
  ASSERT_FALSE(token.ok());
  EXPECT_THAT(token.status().message(), AllOf(HasSubstr(config.token_file), HasSubstr("empty"),
                                              HasSubstr("control.token_file")));
}

TEST(ControlSecurity, AMissingTokenFileIsAnErrorNamingIt) {
  ControlConfig config;
  config.token_file = (TempDir("token_missing") / "absent").string();
  StatusOr<std::string> token = LoadControlToken(config);
  ASSERT_FALSE(token.ok());
  EXPECT_EQ(token.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(token.status().message(), HasSubstr(config.token_file));
}

TEST(ControlSecurity, ATokenFileOthersMayReadIsServedWithAWarning) {
  fs::path dir = TempDir("token_mode");
  ControlConfig config;
  config.token_file =
      WriteFile(dir / "token", kToken, kOwnerOnly | fs::perms::group_read | fs::perms::others_read);
  ::testing::internal::CaptureStderr();
  StatusOr<std::string> token = LoadControlToken(config);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(token.ok());
  EXPECT_THAT(log, AllOf(HasSubstr(config.token_file), HasSubstr("0644"), HasSubstr("chmod 600")));
  EXPECT_THAT(log, Not(HasSubstr(kToken)));
}

TEST(ControlSecurity, TheTokenFileWinsOverTheEnvironment) {
  fs::path dir = TempDir("token_precedence");
  ScopedEnv env("HOIST_CONTROL_TOKEN", "from-env");
  ControlConfig config;
  EXPECT_EQ(*LoadControlToken(config), "from-env");
  config.token_file = WriteFile(dir / "token", kToken, kOwnerOnly);
  EXPECT_EQ(*LoadControlToken(config), kToken);
}

#if HOIST_HAVE_GRPC

ControlConfig LoopbackConfig() {
  ControlConfig config;
  config.enabled = true;
  config.port = 0;
  return config;
}

// Loopback with control.require_token=false: no token unless one is configured.
ControlConfig OpenLoopbackConfig() {
  ControlConfig config = LoopbackConfig();
  config.require_token = false;
  return config;
}

namespace v1 = ::hoist::v1;
using testing_util::Call;
using testing_util::Connect;
using testing_util::MakeSelfSigned;
using testing_util::Pki;

std::shared_ptr<grpc::ChannelCredentials> TlsClient(const Pki& ca, const Pki* client = nullptr) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca.cert_pem;
  if (client != nullptr) {
    options.pem_cert_chain = client->cert_pem;
    options.pem_private_key = client->key_pem;
  }
  return grpc::SslCredentials(options);
}

// One job whose server is started with the given config; torn down in the trainer's order.
struct Job {
  explicit Job(const ControlConfig& config, ControlServerOptions options = {})
      : controller(10, 1, false) {
    StatusOr<std::unique_ptr<ControlServer>> started =
        ControlServer::Start(config, &controller, std::move(options));
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    if (started.ok()) server = std::move(started).value();
  }
  ~Job() {
    controller.Shutdown(JobState::kFinished);
    server.reset();
  }
  grpc::StatusCode GetStatus(
      const std::string& token,
      std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials(),
      std::string* message = nullptr) {
    v1::JobStatus status;
    grpc::Status rpc = Connect(server->address(), credentials)
                           ->GetStatus(Call(token).get(), v1::GetStatusRequest(), &status);
    if (message != nullptr) *message = rpc.error_message();
    return rpc.error_code();
  }

  JobController controller;
  std::unique_ptr<ControlServer> server;
};

TEST(ControlSecurity, AnExposedAddressWithoutTlsIsRefused) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", kToken);
  JobController controller(10, 1, false);
  ControlConfig config = LoopbackConfig();
  config.bind = "0.0.0.0";
  StatusOr<std::unique_ptr<ControlServer>> server = ControlServer::Start(config, &controller);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), AllOf(HasSubstr("0.0.0.0"), HasSubstr("control.tls.cert"),
                                               HasSubstr("control.tls.key")));
}

TEST(ControlSecurity, AnExposedAddressWithoutATokenIsRefused) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  JobController controller(10, 1, false);
  ControlConfig config = LoopbackConfig();
  config.bind = "0.0.0.0";
  config.tls.cert = "cert.pem";
  config.tls.key = "key.pem";
  StatusOr<std::unique_ptr<ControlServer>> server = ControlServer::Start(config, &controller);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(),
              AllOf(HasSubstr("0.0.0.0"), HasSubstr("control.token_file"),
                    HasSubstr("HOIST_CONTROL_TOKEN")));
}

mode_t ModeOf(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ControlSecurity, ALoopbackJobMakesATokenInAFileOnlyItsUserReads) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  const fs::path dir = TempDir("job_token");
  ControlServerOptions options;
  options.job_token_path = JobTokenPath((dir / "ck").string());  // made by the server
  const fs::path path = dir / "ck" / "control.token";
  {
    Job job(LoopbackConfig(), options);
    ASSERT_NE(job.server, nullptr);
    EXPECT_TRUE(job.server->requires_token());
    EXPECT_EQ(job.server->job_token_path(), path.string());
    EXPECT_EQ(ModeOf(path), 0600u);
    std::string token = ReadText(path);
    ASSERT_EQ(token.size(), 65u) << token;  // 32 random bytes in hex, and a newline
    EXPECT_EQ(token.back(), '\n');
    token.pop_back();
    EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;

    // A local user who cannot read the file cannot steer the job; the refusal says where the
    // job's user finds the token.
    std::string message;
    EXPECT_EQ(job.GetStatus("", grpc::InsecureChannelCredentials(), &message),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(message, AllOf(HasSubstr(path.string()), HasSubstr("hoist ctl")));
    v1::StopResponse stopped;
    EXPECT_EQ(Connect(job.server->address())
                  ->Stop(Call().get(), v1::StopRequest(), &stopped)
                  .error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_FALSE(job.controller.TakeCommands().stop);
    // Another first digit (one token in 16 starts with 0).
    const std::string forged = (token[0] == '0' ? "1" : "0") + token.substr(1);
    EXPECT_EQ(job.GetStatus(forged), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(job.GetStatus(token), grpc::StatusCode::OK);
  }
  // Gone with the job: a token is good for one run.
  EXPECT_FALSE(fs::exists(path));
}

TEST(ControlSecurity, EveryJobMakesAFreshToken) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  const fs::path dir = TempDir("job_token_fresh");
  ControlServerOptions options;
  options.job_token_path = (dir / "control.token").string();
  std::string first;
  {
    Job job(LoopbackConfig(), options);
    ASSERT_NE(job.server, nullptr);
    first = ReadText(dir / "control.token");
  }
  Job job(LoopbackConfig(), options);
  ASSERT_NE(job.server, nullptr);
  EXPECT_FALSE(first.empty());
  EXPECT_NE(ReadText(dir / "control.token"), first);
}

TEST(ControlSecurity, AStaleTokenFileOthersCouldReadIsReplacedByAnOwnerOnlyOne) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  const fs::path dir = TempDir("job_token_stale");
  const fs::path path =
      WriteFile(dir / "control.token", "old\n", kOwnerOnly | fs::perms::others_read);
  ControlServerOptions options;
  options.job_token_path = path.string();
  Job job(LoopbackConfig(), options);
  ASSERT_NE(job.server, nullptr);
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_NE(ReadText(path), "old\n");
}

TEST(ControlSecurity, ATokenFileThatCannotBeWrittenStopsTheStartNamingIt) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  const fs::path dir = TempDir("job_token_unwritable");
  // A file where the directory should be: refused whoever runs the test, root included.
  WriteFile(dir / "not_a_dir", "x", kOwnerOnly);
  JobController controller(10, 1, false);
  ControlServerOptions options;
  options.job_token_path = (dir / "not_a_dir" / "control.token").string();
  StatusOr<std::unique_ptr<ControlServer>> server =
      ControlServer::Start(LoopbackConfig(), &controller, options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(),
              AllOf(HasSubstr("not_a_dir"), HasSubstr("token file"), HasSubstr("checkpoint.dir"),
                    HasSubstr("control.require_token=false")));
}

TEST(ControlSecurity, RequireTokenOffServesLoopbackWithoutOne) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  const fs::path dir = TempDir("job_token_off");
  ControlServerOptions options;
  options.job_token_path = (dir / "control.token").string();
  Job job(OpenLoopbackConfig(), options);
  ASSERT_NE(job.server, nullptr);
  EXPECT_FALSE(job.server->requires_token());
  EXPECT_EQ(job.server->job_token_path(), "");
  EXPECT_FALSE(fs::exists(dir / "control.token"));
  EXPECT_EQ(job.GetStatus(""), grpc::StatusCode::OK);
}

TEST(ControlSecurity, RequireTokenOffIsRefusedWithATokenFile) {
  const fs::path dir = TempDir("job_token_off_file");
  JobController controller(10, 1, false);
  ControlConfig config = OpenLoopbackConfig();
  config.token_file = WriteFile(dir / "token", kToken, kOwnerOnly);
  StatusOr<std::unique_ptr<ControlServer>> server = ControlServer::Start(config, &controller);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(),
              AllOf(HasSubstr("control.require_token"), HasSubstr("control.token_file")));
}

TEST(ControlSecurity, AConfiguredTokenOnLoopbackMakesNoFile) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", kToken);
  const fs::path dir = TempDir("job_token_configured");
  ControlServerOptions options;
  options.job_token_path = (dir / "control.token").string();
  Job job(LoopbackConfig(), options);
  ASSERT_NE(job.server, nullptr);
  EXPECT_TRUE(job.server->requires_token());
  EXPECT_EQ(job.server->job_token_path(), "");
  EXPECT_FALSE(fs::exists(dir / "control.token"));
  EXPECT_EQ(job.GetStatus(kToken), grpc::StatusCode::OK);
}

TEST(ControlSecurity, AWrongOrMissingTokenIsUnauthenticated) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", kToken);
  Job job(LoopbackConfig());
  ASSERT_NE(job.server, nullptr);
  EXPECT_TRUE(job.server->requires_token());
  std::string message;
  EXPECT_EQ(job.GetStatus("", grpc::InsecureChannelCredentials(), &message),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(message, AllOf(HasSubstr("bearer token"), HasSubstr("HOIST_CONTROL_TOKEN")));
  EXPECT_EQ(job.GetStatus("tok-7f3a9c1e5b2e"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(job.GetStatus("tok-7f3a9c1e5b2"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(job.GetStatus(std::string(kToken) + "x"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(job.GetStatus(kToken), grpc::StatusCode::OK);
  // Every RPC checks, the streaming one included.
  v1::PauseResponse paused;
  auto stub = Connect(job.server->address());
  EXPECT_EQ(stub->Pause(Call("wrong").get(), v1::PauseRequest(), &paused).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  auto context = Call("wrong");
  auto reader = stub->WatchStatus(context.get(), v1::WatchStatusRequest());
  v1::JobStatus status;
  EXPECT_FALSE(reader->Read(&status));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The scheme is case-insensitive (RFC 6750); the token is not.
  grpc::ClientContext lower;
  lower.AddMetadata("authorization", std::string("bearer ") + kToken);
  v1::JobStatus answered;
  EXPECT_TRUE(stub->GetStatus(&lower, v1::GetStatusRequest(), &answered).ok());
}

TEST(ControlSecurity, TheTokenNeverReachesTheLog) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  const fs::path dir = TempDir("token_log");
  const LogLevel level = GetLogLevel();
  SetLogLevel(LogLevel::kDebug);
  ::testing::internal::CaptureStderr();
  {
    ControlConfig config = LoopbackConfig();
    config.token_file = WriteFile(dir / "token", kToken, kOwnerOnly | fs::perms::group_read);
    Job job(config);
    if (job.server != nullptr) {
      job.GetStatus(kToken);
      job.GetStatus("not-the-token");
      job.GetStatus("");
      v1::PauseResponse paused;
      Connect(job.server->address())->Pause(Call(kToken).get(), v1::PauseRequest(), &paused);
    }
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  SetLogLevel(level);
  EXPECT_THAT(log, HasSubstr("refused a call"));  // the log did see the calls
  EXPECT_THAT(log, Not(HasSubstr(kToken)));
  EXPECT_THAT(log, Not(HasSubstr("not-the-token")));
}

TEST(ControlSecurity, TlsServesClientsThatTrustItsCertificate) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  const fs::path dir = TempDir("tls");
  std::optional<Pki> server_pki = MakeSelfSigned(dir, "server");
  if (!server_pki) GTEST_SKIP() << "needs the openssl command to make a test certificate";
  ControlConfig config = OpenLoopbackConfig();
  config.tls.cert = server_pki->cert;
  config.tls.key = server_pki->key;
  Job job(config);
  ASSERT_NE(job.server, nullptr);
  EXPECT_TRUE(job.server->tls());
  EXPECT_EQ(job.GetStatus("", TlsClient(*server_pki)), grpc::StatusCode::OK);
  // A plaintext client cannot talk to it.
  EXPECT_NE(job.GetStatus(""), grpc::StatusCode::OK);
}

TEST(ControlSecurity, AnExposedAddressServesWithTlsAndAToken) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", kToken);
  const fs::path dir = TempDir("exposed");
  std::optional<Pki> pki = MakeSelfSigned(dir, "server");
  if (!pki) GTEST_SKIP() << "needs the openssl command to make a test certificate";
  ControlConfig config = LoopbackConfig();
  config.bind = "0.0.0.0";
  config.tls.cert = pki->cert;
  config.tls.key = pki->key;
  Job job(config);
  ASSERT_NE(job.server, nullptr);
  EXPECT_THAT(job.server->address(), ::testing::StartsWith("0.0.0.0:"));
  const std::string local = "127.0.0.1:" + std::to_string(job.server->port());
  v1::JobStatus status;
  auto stub = Connect(local, TlsClient(*pki));
  EXPECT_EQ(stub->GetStatus(Call().get(), v1::GetStatusRequest(), &status).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(stub->GetStatus(Call(kToken).get(), v1::GetStatusRequest(), &status).ok());
}

TEST(ControlSecurity, AClientCaRequiresAClientCertificate) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  const fs::path dir = TempDir("mtls");
  std::optional<Pki> server_pki = MakeSelfSigned(dir, "server");
  std::optional<Pki> client_pki = MakeSelfSigned(dir, "client");
  if (!server_pki || !client_pki) {
    GTEST_SKIP() << "needs the openssl command to make test certificates";
  }
  ControlConfig config = OpenLoopbackConfig();
  config.tls.cert = server_pki->cert;
  config.tls.key = server_pki->key;
  config.tls.client_ca = client_pki->cert;  // self-signed: it is its own CA
  Job job(config);
  ASSERT_NE(job.server, nullptr);
  EXPECT_NE(job.GetStatus("", TlsClient(*server_pki)), grpc::StatusCode::OK);
  EXPECT_NE(job.GetStatus("", TlsClient(*server_pki, &*server_pki)), grpc::StatusCode::OK);
  EXPECT_EQ(job.GetStatus("", TlsClient(*server_pki, &*client_pki)), grpc::StatusCode::OK);
}

TEST(ControlSecurity, AMissingTlsFileIsNamed) {
  ScopedEnv env("HOIST_CONTROL_TOKEN", std::nullopt);
  JobController controller(10, 1, false);
  ControlConfig config = OpenLoopbackConfig();
  config.tls.cert = (TempDir("tls_missing") / "absent_cert.pem").string();
  config.tls.key = config.tls.cert;
  StatusOr<std::unique_ptr<ControlServer>> server = ControlServer::Start(config, &controller);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(),
              AllOf(HasSubstr("control.tls.cert"), HasSubstr("absent_cert.pem")));
}

#endif  // HOIST_HAVE_GRPC

}  // namespace
}  // namespace hoist::runtime
