// `hoist ctl`: its argument checks, its rendering, and the binary against a control server in
// this process (a JobController driven by a fake training loop), so that what an operator types
// and sees is pinned without training a model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "launcher/ctl_format.h"
#include "runtime/observe/control.h"
#include "runtime/observe/control_server.h"
#include "runtime/observe/control_token.h"
#include "tests/launcher/ctl_test_util.h"
#include "tests/launcher/launch_test_util.h"
#include "tests/runtime/control_test_util.h"

namespace hoist::launcher {
namespace {

using ::testing::AllOf;
using testing::Contains;
using ::testing::HasSubstr;
using testing::Lines;
using ::testing::Not;

using Result = testing::CtlResult;
using testing::RunCtl;

// ---- Without a server ----

TEST(CtlArgs, SetAcceptsTheTwoKeys) {
  StatusOr<runtime::HyperparamUpdate> u = ParseSetAssignments({"lr=3e-4", "gradient_clipping=0"});
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_DOUBLE_EQ(*u->lr, 3e-4);
  EXPECT_DOUBLE_EQ(*u->gradient_clipping, 0.0);
  EXPECT_FALSE(ParseSetAssignments({"gradient_clipping=1"})->lr.has_value());
}

TEST(CtlArgs, SetRefusesWhatItCannotSend) {
  EXPECT_THAT(ParseSetAssignments({"clip=1"}).status().message(),
              AllOf(HasSubstr("\"clip\""), HasSubstr("lr and gradient_clipping")));
  EXPECT_THAT(ParseSetAssignments({"lr=fast"}).status().message(),
              AllOf(HasSubstr("lr"), HasSubstr("number"), HasSubstr("fast")));
  EXPECT_THAT(ParseSetAssignments({"lr="}).status().message(), HasSubstr("number"));
  EXPECT_THAT(ParseSetAssignments({"lr=1e999"}).status().message(), HasSubstr("number"));
  EXPECT_THAT(ParseSetAssignments({"lr"}).status().message(), HasSubstr("KEY=VALUE"));
  EXPECT_THAT(ParseSetAssignments({"lr=1", "lr=2"}).status().message(), HasSubstr("twice"));
  EXPECT_FALSE(ParseSetAssignments({}).ok());
}

TEST(CtlArgs, AddressesAreHostAndPort) {
  EXPECT_EQ(*AddressHost("127.0.0.1:7070"), "127.0.0.1");
  EXPECT_EQ(*AddressHost("[::1]:7070"), "::1");
  EXPECT_EQ(*AddressHost("node7:1"), "node7");
  for (const char* bad : {"", "7070", "host", "host:", ":7070", "host:0", "host:65536", "::1:7070",
                          "[::1]7070", "host:70a"}) {
    EXPECT_THAT(AddressHost(bad).status().message(), HasSubstr("HOST:PORT")) << bad;
  }
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.9.9.9"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("node7"));
}

TEST(CtlCli, HelpListsTheCommands) {
  Result r = RunCtl("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* command : {"status", "pause", "resume", "checkpoint", "stop", "set", "watch"}) {
    EXPECT_TRUE(Contains(r.out, command)) << command;
  }
}

TEST(CtlCli, ArgumentErrorsExitWithTwoAndSayWhy) {
  struct Case {
    const char* args;
    const char* expected;
  };
  for (const Case& c :
       {Case{"set clip=1", "the keys are lr and gradient_clipping"},
        Case{"set lr=abc", "lr must be a number"}, Case{"--addr nohost status", "HOST:PORT"},
        Case{"--timeout -1 status", "--timeout"}, Case{"watch --interval 0", "--interval"},
        Case{"watch --count -1", "--count"}, Case{"--tls-cert c.pem status", "--tls-key"}}) {
    Result r = RunCtl(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.all;
    EXPECT_THAT(r.all, AllOf(HasSubstr("hoist ctl: "), HasSubstr(c.expected))) << c.args;
  }
  Result none = RunCtl("");
  EXPECT_NE(none.exit_code, 0);
}

#if !HOIST_HAVE_GRPC

TEST(CtlCli, WithoutGrpcSaysWhatToInstall) {
  Result r = RunCtl("status");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.all, HasSubstr("scripts/install-deps --grpc"));
}

#endif  // !HOIST_HAVE_GRPC

#if HOIST_HAVE_GRPC

TEST(CtlCli, AnUnreachableAddressIsNamed) {
  // Port 1 on loopback: nothing listens there without root.
  Result r = RunCtl("--addr 127.0.0.1:1 status");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.all, AllOf(HasSubstr("cannot reach the control service at 127.0.0.1:1"),
                           HasSubstr("control.enabled")));
}

TEST(CtlCli, TheTokenIsNotSentInTheClearOverTheNetwork) {
  Result r = RunCtl("--addr 10.255.255.1:7070 status", "HOIST_CONTROL_TOKEN=secret");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.all, AllOf(HasSubstr("unencrypted"), HasSubstr("--tls-ca")));
  EXPECT_THAT(r.all, Not(HasSubstr("secret")));
}

TEST(CtlCli, AMissingTokenFileIsNamed) {
  Result r = RunCtl("--token-file /nonexistent/token status");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.all, AllOf(HasSubstr("--token-file"), HasSubstr("/nonexistent/token")));
}

TEST(CtlFormat, StatusBlockShowsWhatAnOperatorAsksFirst) {
  hoist::v1::JobStatus s;
  s.set_state(hoist::v1::JOB_STATE_PAUSED);
  s.set_step(120);
  s.set_total_steps(1000);
  s.set_loss(3.25);
  s.set_lr(3e-4);
  s.set_lr_override(3e-4);
  s.set_grad_norm(0.75);
  s.set_tokens_per_s(12345);
  s.set_gradient_clipping(0);
  hoist::v1::RankMemory* rank = s.add_memory();
  rank->set_rank(1);
  hoist::v1::MemoryEntry* e = rank->add_entries();
  e->set_place("host_pinned");
  e->set_category("optimizer");
  e->set_current_bytes(3 << 20);
  e->set_peak_bytes(int64_t{3} << 30);
  const std::string text = FormatStatus(s);
  EXPECT_THAT(text,
              AllOf(HasSubstr("paused"), HasSubstr("120 / 1000"), HasSubstr("3.2500"),
                    HasSubstr("3.000e-04 (set to 3.000e-04)"), HasSubstr("12345"),
                    HasSubstr("clipping      off"), HasSubstr("rank 1"), HasSubstr("host_pinned"),
                    HasSubstr("optimizer"), HasSubstr("3.00 MiB / 3.00 GiB")));
  const nlohmann::json j = StatusJson(s);
  EXPECT_EQ(j["state"], "paused");
  EXPECT_EQ(j["step"], 120);
  EXPECT_EQ(j["lr_override"], 3e-4);
  EXPECT_EQ(j["memory"][0]["rank"], 1);
  EXPECT_EQ(j["memory"][0]["peak"]["host_pinned"]["optimizer"], int64_t{3} << 30);
  s.clear_lr_override();
  EXPECT_TRUE(StatusJson(s)["lr_override"].is_null());
  EXPECT_THAT(FormatWatchLine(s), AllOf(HasSubstr("step 120/1000"), HasSubstr("paused")));
}

// A job (fake loop) served in this process; the hoist binary is its client.
class CtlAgainstServer : public ::testing::Test {
 protected:
  void Start(bool can_checkpoint = true) {
    controller_ = std::make_unique<runtime::JobController>(500, 2, can_checkpoint);
    loop_ = std::make_unique<runtime::testing_util::FakeLoop>(controller_.get());
    runtime::ControlConfig config;
    config.enabled = true;
    config.port = 0;
    config.require_token = false;
    StatusOr<std::unique_ptr<runtime::ControlServer>> server =
        runtime::ControlServer::Start(config, controller_.get());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_TRUE(runtime::testing_util::WaitForStatus(
        *controller_, [](const runtime::JobStatus& s) { return s.step >= 1; }));
  }
  void TearDown() override {
    if (controller_) controller_->Shutdown(runtime::JobState::kFinished);
    loop_.reset();
    server_.reset();
  }
  Result Ctl(const std::string& args) {
    return RunCtl("--addr " + server_->address() + " " + args, "HOIST_CONTROL_TOKEN=");
  }

  std::unique_ptr<runtime::JobController> controller_;
  std::unique_ptr<runtime::testing_util::FakeLoop> loop_;
  std::unique_ptr<runtime::ControlServer> server_;
};

TEST_F(CtlAgainstServer, StatusPrintsABlockAndJson) {
  Start();
  Result r = Ctl("status");
  ASSERT_EQ(r.exit_code, 0) << r.all;
  EXPECT_THAT(r.out, AllOf(HasSubstr("state         running"), HasSubstr("/ 500"),
                           HasSubstr("rank 0"), HasSubstr("device"), HasSubstr("3.00 MiB")));
  Result j = Ctl("status --json");
  ASSERT_EQ(j.exit_code, 0) << j.all;
  const nlohmann::json status = nlohmann::json::parse(j.out);
  EXPECT_EQ(status["state"], "running");
  EXPECT_EQ(status["total_steps"], 500);
  EXPECT_EQ(status["world_size"], 2);
  EXPECT_EQ(status["memory"][0]["current"]["device"]["param"], 3 << 20);
}

TEST_F(CtlAgainstServer, PauseResumeCheckpointSetStop) {
  Start();
  Result pause = Ctl("pause");
  ASSERT_EQ(pause.exit_code, 0) << pause.all;
  EXPECT_THAT(pause.out, HasSubstr("pause requested"));
  ASSERT_TRUE(runtime::testing_util::WaitForStatus(*controller_, [](const runtime::JobStatus& s) {
    return s.state == runtime::JobState::kPaused;
  }));
  Result checkpoint = Ctl("--json checkpoint");
  ASSERT_EQ(checkpoint.exit_code, 0) << checkpoint.all;
  EXPECT_THAT(nlohmann::json::parse(checkpoint.out)["path"].get<std::string>(),
              ::testing::StartsWith("/ck/step_"));
  Result resume = Ctl("resume");
  ASSERT_EQ(resume.exit_code, 0) << resume.all;
  Result set = Ctl("set lr=2e-4 gradient_clipping=0.5");
  ASSERT_EQ(set.exit_code, 0) << set.all;
  EXPECT_THAT(set.out, AllOf(HasSubstr("applied"), HasSubstr("0.0002"), HasSubstr("0.5")));
  Result refused = Ctl("set lr=100");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.all, AllOf(HasSubstr("hoist ctl: set failed: INVALID_ARGUMENT: "),
                                 HasSubstr("lr must be")));
  // Values the ranks would get as NaN (fp32 overflow) or apply as 0 (underflow): the server's
  // reason reaches the operator, with a non-zero exit.
  Result overflow = Ctl("set gradient_clipping=1e39");
  EXPECT_EQ(overflow.exit_code, 1);
  EXPECT_THAT(overflow.all,
              AllOf(HasSubstr("hoist ctl: set failed: INVALID_ARGUMENT: gradient_clipping 1e+39 "
                              "is beyond the largest fp32 number"),
                    HasSubstr("set gradient_clipping=0")));
  Result underflow = Ctl("set lr=1e-300");
  EXPECT_EQ(underflow.exit_code, 1);
  EXPECT_THAT(underflow.all, HasSubstr("INVALID_ARGUMENT: lr 1e-300 is below the smallest normal "
                                       "fp32 number"));
  Result stop = Ctl("stop --checkpoint");
  ASSERT_EQ(stop.exit_code, 0) << stop.all;
  EXPECT_THAT(stop.out,
              AllOf(HasSubstr("checkpoint written: /ck/step_"), HasSubstr("stop requested")));
  Result after = Ctl("pause");
  EXPECT_EQ(after.exit_code, 1);
  EXPECT_THAT(after.all, HasSubstr("hoist ctl: pause failed: UNAVAILABLE: "));
}

TEST_F(CtlAgainstServer, AFailedRequestCarriesTheServersReason) {
  Start(/*can_checkpoint=*/false);
  Result r = Ctl("checkpoint");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.all, AllOf(HasSubstr("hoist ctl: checkpoint failed: FAILED_PRECONDITION: "),
                           HasSubstr("checkpoint.dir")));
}

TEST_F(CtlAgainstServer, WatchPrintsCountUpdates) {
  Start();
  Result r = Ctl("watch --interval 0.05 --count 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.all;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  for (const std::string& line : lines) {
    EXPECT_EQ(nlohmann::json::parse(line)["state"], "running");
  }
  Result human = Ctl("watch --interval 0.05 --count 2");
  ASSERT_EQ(human.exit_code, 0) << human.all;
  EXPECT_EQ(Lines(human.out).size(), 2u);
  EXPECT_THAT(human.out, HasSubstr("/500  running  loss"));
}

TEST_F(CtlAgainstServer, AWrongTokenIsRefused) {
  controller_ = std::make_unique<runtime::JobController>(10, 1, false);
  loop_ = std::make_unique<runtime::testing_util::FakeLoop>(controller_.get());
  const std::string token_file = ::testing::TempDir() + "/hoist_ctl_token";
  testing::WriteFile(token_file, "right-token\n");
  std::filesystem::permissions(
      token_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  runtime::ControlConfig config;
  config.enabled = true;
  config.port = 0;
  config.token_file = token_file;
  StatusOr<std::unique_ptr<runtime::ControlServer>> server =
      runtime::ControlServer::Start(config, controller_.get());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(server).value();
  Result wrong = RunCtl("--addr " + server_->address() + " status", "HOIST_CONTROL_TOKEN=wrong");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.all, HasSubstr("status failed: UNAUTHENTICATED"));
  Result right = RunCtl("--addr " + server_->address() + " --token-file " + token_file + " status",
                        "HOIST_CONTROL_TOKEN=wrong");
  EXPECT_EQ(right.exit_code, 0) << right.all;
}

// A job serving on loopback with the default control.require_token: `hoist ctl` finds the token
// the job wrote beside its checkpoints, from the job's config or from --checkpoint-dir, and
// cannot steer the job without it.
TEST_F(CtlAgainstServer, TheJobsTokenIsReadFromBesideItsCheckpoints) {
  const std::filesystem::path dir = testing::TempDir("hoist_ctl_", "job_token");
  controller_ = std::make_unique<runtime::JobController>(10, 1, false);
  loop_ = std::make_unique<runtime::testing_util::FakeLoop>(controller_.get());
  runtime::ControlConfig config;
  config.enabled = true;
  config.port = 0;
  runtime::ControlServerOptions options;
  options.job_token_path = runtime::JobTokenPath((dir / "ck").string());
  StatusOr<std::unique_ptr<runtime::ControlServer>> server =
      runtime::ControlServer::Start(config, controller_.get(), options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(server).value();
  const std::string addr = "--addr " + server_->address() + " ";
  const std::string token_path = (dir / "ck" / "control.token").string();

  Result without = RunCtl(addr + "pause", "HOIST_CONTROL_TOKEN=");
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_THAT(without.all, AllOf(HasSubstr("pause failed: UNAUTHENTICATED"), HasSubstr(token_path),
                                 HasSubstr("--checkpoint-dir")));
  EXPECT_FALSE(controller_->GetStatus().state == runtime::JobState::kPaused);

  Result by_dir = RunCtl(addr + "--checkpoint-dir " + (dir / "ck").string() + " status",
                         "HOIST_CONTROL_TOKEN=");
  EXPECT_EQ(by_dir.exit_code, 0) << by_dir.all;
  EXPECT_THAT(by_dir.out, HasSubstr("running"));

  // The job's config gives both the address and the token's place; its batch sizes, resolved
  // only for the job's 8 ranks, do not stand in the way.
  const nlohmann::json job = {{"train_batch_size", 32},
                              {"train_micro_batch_size_per_gpu", 4},
                              {"gradient_accumulation_steps", 1},
                              {"checkpoint", {{"dir", (dir / "ck").string()}}},
                              {"control", {{"enabled", true}, {"port", server_->port()}}}};
  const std::filesystem::path job_config = testing::WriteFile(dir / "job.json", job.dump());
  Result by_config = RunCtl("-c " + job_config.string() + " status", "HOIST_CONTROL_TOKEN=");
  EXPECT_EQ(by_config.exit_code, 0) << by_config.all;
  EXPECT_THAT(by_config.out, HasSubstr("running"));
}

TEST(CtlCli, AMissingJobTokenFileIsNamedWithWhatToDo) {
  const std::filesystem::path dir = testing::TempDir("hoist_ctl_", "no_token");
  Result r = RunCtl("--addr 127.0.0.1:1 --checkpoint-dir " + (dir / "ck").string() + " status",
                    "HOIST_CONTROL_TOKEN=");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.all, AllOf(HasSubstr((dir / "ck" / "control.token").string()),
                           HasSubstr("is the job running"), HasSubstr("--token-file")));
}

TEST(CtlCli, AJobWithRequireTokenOffNeedsNoTokenFile) {
  const std::filesystem::path dir = testing::TempDir("hoist_ctl_", "token_off");
  const std::filesystem::path job_config = testing::WriteFile(
      dir / "job.json",
      R"({"checkpoint": {"dir": "nowhere"}, "control": {"port": 1, "require_token": false}})");
  // Straight to the connection, which fails: nothing listens on port 1.
  Result r = RunCtl("-c " + job_config.string() + " status", "HOIST_CONTROL_TOKEN=");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.all, HasSubstr("cannot reach the control service at 127.0.0.1:1"));
}

// Over TLS with a token: `hoist ctl` trusts the server through --tls-ca and sends the token.
TEST_F(CtlAgainstServer, TlsWithTheServersCa) {
  const std::filesystem::path dir = testing::TempDir("hoist_ctl_", "tls");
  std::optional<runtime::testing_util::Pki> pki = runtime::testing_util::MakeSelfSigned(dir, "s");
  if (!pki) GTEST_SKIP() << "needs the openssl command to make a test certificate";
  controller_ = std::make_unique<runtime::JobController>(10, 1, false);
  loop_ = std::make_unique<runtime::testing_util::FakeLoop>(controller_.get());
  runtime::ControlConfig config;
  config.enabled = true;
  config.port = 0;
  config.tls.cert = pki->cert;
  config.tls.key = pki->key;
  config.token_file = testing::WriteFile(dir / "token", "tls-token").string();
  std::filesystem::permissions(config.token_file, std::filesystem::perms::owner_read);
  StatusOr<std::unique_ptr<runtime::ControlServer>> server =
      runtime::ControlServer::Start(config, controller_.get());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(server).value();
  const std::string addr = "--addr " + server_->address() + " ";
  Result ok = RunCtl(addr + "--tls-ca " + pki->cert + " status", "HOIST_CONTROL_TOKEN=tls-token");
  EXPECT_EQ(ok.exit_code, 0) << ok.all;
  EXPECT_THAT(ok.out, HasSubstr("running"));
  // Without the CA the client cannot tell it is talking to the job: no connection.
  Result plain = RunCtl(addr + "status", "HOIST_CONTROL_TOKEN=tls-token");
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_THAT(plain.all, AllOf(HasSubstr("cannot reach"), HasSubstr("--tls-ca")));
}

#endif  // HOIST_HAVE_GRPC

}  // namespace
}  // namespace hoist::launcher
