// The JobControl service over loopback: every RPC against a JobController that a fake training
// loop drives the way rank 0's trainer does.
#include "runtime/observe/control_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "runtime/observe/control.h"
#include "tests/runtime/control_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using testing_util::FakeLoop;
using testing_util::FakeLoopOptions;
using testing_util::WaitForStatus;
using Clock = JobController::Clock;

#if HOIST_HAVE_GRPC

namespace v1 = ::hoist::v1;
using testing_util::Call;
using testing_util::Connect;

// Served without a token: these tests are about what the RPCs do (control_security_test.cc is
// about who may call them).
ControlConfig LoopbackConfig() {
  ControlConfig config;
  config.enabled = true;
  config.port = 0;
  config.require_token = false;
  return config;
}

// A job of 1000 steps on 2 ranks, its fake loop and its control server on an ephemeral port.
class ControlServerTest : public ::testing::Test {
 protected:
  void StartJob(FakeLoopOptions options = {}, bool can_checkpoint = true) {
    controller_ = std::make_unique<JobController>(1000, 2, can_checkpoint);
    loop_ = std::make_unique<FakeLoop>(controller_.get(), std::move(options));
    StatusOr<std::unique_ptr<ControlServer>> server =
        ControlServer::Start(LoopbackConfig(), controller_.get());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    stub_ = Connect(server_->address());
  }

  // In the trainer's order: the job ends (the controller shuts down), then the server goes.
  void TearDown() override {
    if (controller_) controller_->Shutdown(JobState::kFinished);
    loop_.reset();
    server_.reset();
    controller_.reset();
  }

  bool WaitForState(JobState state) {
    return WaitForStatus(*controller_, [state](const JobStatus& s) { return s.state == state; });
  }
  bool WaitForSteps(int64_t steps) {
    return WaitForStatus(*controller_, [steps](const JobStatus& s) { return s.step >= steps; });
  }

  std::unique_ptr<JobController> controller_;
  std::unique_ptr<FakeLoop> loop_;
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<v1::JobControl::Stub> stub_;
};

TEST_F(ControlServerTest, ServesOnLoopbackOnThePortItReports) {
  StartJob();
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->address(), "127.0.0.1:" + std::to_string(server_->port()));
  EXPECT_FALSE(server_->tls());
  EXPECT_FALSE(server_->requires_token());
}

TEST_F(ControlServerTest, GetStatusAnswersWhatTheLoopPublished) {
  StartJob();
  ASSERT_TRUE(WaitForSteps(3));
  v1::JobStatus status;
  grpc::Status rpc = stub_->GetStatus(Call().get(), v1::GetStatusRequest(), &status);
  ASSERT_TRUE(rpc.ok()) << rpc.error_message();
  EXPECT_EQ(status.state(), v1::JOB_STATE_RUNNING);
  EXPECT_GE(status.step(), 3);
  EXPECT_EQ(status.total_steps(), 1000);
  EXPECT_EQ(status.world_size(), 2);
  EXPECT_DOUBLE_EQ(status.loss(), 10.0 / static_cast<double>(status.step()));
  EXPECT_DOUBLE_EQ(status.lr(), 1e-3);
  EXPECT_DOUBLE_EQ(status.grad_norm(), 0.5);
  EXPECT_DOUBLE_EQ(status.tokens_per_s(), 1000);
  EXPECT_DOUBLE_EQ(status.gradient_clipping(), 1.0);
  EXPECT_FALSE(status.has_lr_override());
  EXPECT_EQ(status.last_checkpoint(), "");
  EXPECT_GT(status.version(), 0u);
  // Rank 0's memory, in the tracker's names; pairs that never held a byte are left out.
  ASSERT_EQ(status.memory_size(), 1);
  EXPECT_EQ(status.memory(0).rank(), 0);
  ASSERT_EQ(status.memory(0).entries_size(), 2);
  const v1::MemoryEntry& param = status.memory(0).entries(0);
  EXPECT_EQ(param.place(), "device");
  EXPECT_EQ(param.category(), "param");
  EXPECT_EQ(param.current_bytes(), 3 << 20);
  EXPECT_EQ(param.peak_bytes(), 3 << 20);
  const v1::MemoryEntry& activation = status.memory(0).entries(1);
  EXPECT_EQ(activation.category(), "activation");
  EXPECT_EQ(activation.current_bytes(), 0);
  EXPECT_EQ(activation.peak_bytes(), 5 << 20);
}

TEST_F(ControlServerTest, PauseHoldsTheStepAndResumeContinues) {
  StartJob();
  ASSERT_TRUE(WaitForSteps(1));
  v1::PauseResponse paused;
  ASSERT_TRUE(stub_->Pause(Call().get(), v1::PauseRequest(), &paused).ok());
  ASSERT_TRUE(WaitForState(JobState::kPaused));
  // Pausing a paused job succeeds and changes nothing.
  ASSERT_TRUE(stub_->Pause(Call().get(), v1::PauseRequest(), &paused).ok());
  const int64_t held = loop_->steps();
  // No step is taken while paused: the loop publishes nothing for a while.
  uint64_t version = controller_->GetStatus().version;
  controller_->WaitForUpdate(&version, Clock::now() + std::chrono::milliseconds(100));
  EXPECT_EQ(loop_->steps(), held);
  v1::JobStatus status;
  ASSERT_TRUE(stub_->GetStatus(Call().get(), v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.state(), v1::JOB_STATE_PAUSED);
  EXPECT_EQ(status.step(), held);

  v1::ResumeResponse resumed;
  ASSERT_TRUE(stub_->Resume(Call().get(), v1::ResumeRequest(), &resumed).ok());
  ASSERT_TRUE(WaitForState(JobState::kRunning));
  EXPECT_TRUE(WaitForSteps(held + 2));
  // Resuming a running job succeeds too.
  EXPECT_TRUE(stub_->Resume(Call().get(), v1::ResumeRequest(), &resumed).ok());
}

TEST_F(ControlServerTest, CheckpointReturnsThePathTheLoopWrote) {
  StartJob({.checkpoint_dir = "/jobs/ck"});
  ASSERT_TRUE(WaitForSteps(1));
  v1::CheckpointResponse response;
  grpc::Status rpc = stub_->Checkpoint(Call().get(), v1::CheckpointRequest(), &response);
  ASSERT_TRUE(rpc.ok()) << rpc.error_message();
  EXPECT_THAT(response.path(), ::testing::StartsWith("/jobs/ck/step_"));
  v1::JobStatus status;
  ASSERT_TRUE(stub_->GetStatus(Call().get(), v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.last_checkpoint(), response.path());
}

TEST_F(ControlServerTest, CheckpointWhilePausedIsWrittenAtOnce) {
  StartJob();
  v1::PauseResponse paused;
  ASSERT_TRUE(stub_->Pause(Call().get(), v1::PauseRequest(), &paused).ok());
  ASSERT_TRUE(WaitForState(JobState::kPaused));
  v1::CheckpointResponse response;
  ASSERT_TRUE(stub_->Checkpoint(Call().get(), v1::CheckpointRequest(), &response).ok());
  EXPECT_THAT(response.path(), ::testing::StartsWith("/ck/step_"));
  EXPECT_EQ(controller_->GetStatus().state, JobState::kPaused);
}

TEST_F(ControlServerTest, CheckpointWithoutACheckpointDirIsFailedPrecondition) {
  StartJob({}, /*can_checkpoint=*/false);
  v1::CheckpointResponse response;
  grpc::Status rpc = stub_->Checkpoint(Call().get(), v1::CheckpointRequest(), &response);
  EXPECT_EQ(rpc.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(rpc.error_message(), HasSubstr("checkpoint.dir"));
  v1::StopRequest stop;
  stop.set_checkpoint(true);
  v1::StopResponse stopped;
  rpc = stub_->Stop(Call().get(), stop, &stopped);
  EXPECT_EQ(rpc.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(rpc.error_message(), HasSubstr("checkpoint.dir"));
}

TEST_F(ControlServerTest, AFailedCheckpointCarriesItsReason) {
  StartJob({.checkpoint_failure = IoError("writing /ck/step_1/rank_00000.bin: No space left")});
  v1::CheckpointResponse response;
  grpc::Status rpc = stub_->Checkpoint(Call().get(), v1::CheckpointRequest(), &response);
  EXPECT_EQ(rpc.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(rpc.error_message(), HasSubstr("No space left"));
}

// A job inside a long step: the client's deadline ends the wait, not the server's.
TEST_F(ControlServerTest, ABlockingCallEndsAtTheClientsDeadline) {
  StartJob({.serve_commands = false});
  v1::CheckpointResponse response;
  grpc::Status rpc = stub_->Checkpoint(Call("", std::chrono::milliseconds(200)).get(),
                                       v1::CheckpointRequest(), &response);
  EXPECT_EQ(rpc.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(ControlServerTest, StopEndsTheJob) {
  StartJob();
  ASSERT_TRUE(WaitForSteps(1));
  v1::StopResponse response;
  ASSERT_TRUE(stub_->Stop(Call().get(), v1::StopRequest(), &response).ok());
  EXPECT_EQ(response.checkpoint_path(), "");
  ASSERT_TRUE(WaitForState(JobState::kFinished));
  EXPECT_TRUE(controller_->shut_down());
  // Once the job has ended, commands are refused as unavailable.
  v1::PauseResponse paused;
  grpc::Status rpc = stub_->Pause(Call().get(), v1::PauseRequest(), &paused);
  EXPECT_EQ(rpc.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(ControlServerTest, StopWithACheckpointReturnsItsPath) {
  StartJob();
  ASSERT_TRUE(WaitForSteps(1));
  v1::StopRequest request;
  request.set_checkpoint(true);
  v1::StopResponse response;
  grpc::Status rpc = stub_->Stop(Call().get(), request, &response);
  ASSERT_TRUE(rpc.ok()) << rpc.error_message();
  EXPECT_THAT(response.checkpoint_path(), ::testing::StartsWith("/ck/step_"));
  EXPECT_TRUE(WaitForState(JobState::kFinished));
}

TEST_F(ControlServerTest, UpdateHyperparamsAppliesAndReportsTheValuesInForce) {
  StartJob();
  v1::UpdateHyperparamsRequest request;
  request.set_lr(3e-4);
  v1::UpdateHyperparamsResponse response;
  grpc::Status rpc = stub_->UpdateHyperparams(Call().get(), request, &response);
  ASSERT_TRUE(rpc.ok()) << rpc.error_message();
  ASSERT_TRUE(response.has_lr_override());
  EXPECT_DOUBLE_EQ(response.lr_override(), 3e-4);
  EXPECT_DOUBLE_EQ(response.gradient_clipping(), 1.0);
  v1::UpdateHyperparamsRequest clip;
  clip.set_gradient_clipping(0);
  ASSERT_TRUE(stub_->UpdateHyperparams(Call().get(), clip, &response).ok());
  EXPECT_DOUBLE_EQ(response.gradient_clipping(), 0.0);
  EXPECT_DOUBLE_EQ(response.lr_override(), 3e-4);
  ASSERT_TRUE(WaitForStatus(*controller_, [](const JobStatus& s) { return s.lr == 3e-4; }));
  v1::JobStatus status;
  ASSERT_TRUE(stub_->GetStatus(Call().get(), v1::GetStatusRequest(), &status).ok());
  EXPECT_DOUBLE_EQ(status.lr_override(), 3e-4);
  EXPECT_DOUBLE_EQ(status.gradient_clipping(), 0.0);
}

TEST_F(ControlServerTest, RefusedHyperparamsAreInvalidArgumentWithTheReason) {
  StartJob();
  struct Bad {
    std::optional<double> lr, clipping;
    const char* reason;
  };
  for (const Bad& bad :
       {Bad{-1.0, std::nullopt, "lr"}, Bad{0.0, std::nullopt, "lr"}, Bad{11.0, std::nullopt, "lr"},
        Bad{std::nullopt, -0.5, "gradient_clipping"},
        // Past fp32 either way: inf + -inf on the ranks, or an lr of 0.
        Bad{std::nullopt, 1e39, "gradient_clipping 1e+39 is beyond the largest fp32 number"},
        Bad{1e-300, std::nullopt, "lr 1e-300 is below the smallest normal fp32 number"},
        Bad{std::nullopt, std::nullopt, "nothing to update"}}) {
    v1::UpdateHyperparamsRequest request;
    if (bad.lr) request.set_lr(*bad.lr);
    if (bad.clipping) request.set_gradient_clipping(*bad.clipping);
    v1::UpdateHyperparamsResponse response;
    grpc::Status rpc = stub_->UpdateHyperparams(Call().get(), request, &response);
    EXPECT_EQ(rpc.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad.reason;
    EXPECT_THAT(rpc.error_message(), HasSubstr(bad.reason));
  }
  // Nothing was applied.
  EXPECT_FALSE(controller_->GetStatus().lr_override);
  EXPECT_DOUBLE_EQ(controller_->GetStatus().gradient_clipping, 1.0);
}

TEST_F(ControlServerTest, WatchStatusStreamsUntilTheJobEnds) {
  StartJob();
  v1::WatchStatusRequest request;
  request.set_interval_seconds(0.05);
  auto context = Call();
  auto reader = stub_->WatchStatus(context.get(), request);
  v1::JobStatus status;
  int64_t last_step = -1;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(reader->Read(&status)) << i;
    EXPECT_GE(status.step(), last_step);
    last_step = status.step();
  }
  EXPECT_GT(last_step, 0);
  // A stop ends the job; the stream's last message shows it and the stream ends with OK.
  v1::StopResponse stopped;
  ASSERT_TRUE(stub_->Stop(Call().get(), v1::StopRequest(), &stopped).ok());
  v1::JobStatus last;
  while (reader->Read(&status)) last = status;
  EXPECT_EQ(last.state(), v1::JOB_STATE_FINISHED);
  grpc::Status end = reader->Finish();
  EXPECT_TRUE(end.ok()) << end.error_message();
}

TEST_F(ControlServerTest, WatchStatusRefusesANegativeInterval) {
  StartJob();
  v1::WatchStatusRequest request;
  request.set_interval_seconds(-1);
  auto context = Call();
  auto reader = stub_->WatchStatus(context.get(), request);
  v1::JobStatus status;
  EXPECT_FALSE(reader->Read(&status));
  grpc::Status end = reader->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(end.error_message(), HasSubstr("interval_seconds"));
}

TEST_F(ControlServerTest, ACancelledWatchEnds) {
  StartJob();
  v1::WatchStatusRequest request;
  request.set_interval_seconds(0.05);
  auto context = Call();
  auto reader = stub_->WatchStatus(context.get(), request);
  v1::JobStatus status;
  ASSERT_TRUE(reader->Read(&status));
  context->TryCancel();
  while (reader->Read(&status)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// The server goes while a client still watches a job that is running: the destructor ends the
// stream instead of waiting for the client (the test's own timeout is the hang detector; the
// bound below only says "promptly" in a way a loaded machine still meets).
TEST_F(ControlServerTest, DestroyingTheServerEndsOpenStreams) {
  StartJob();
  v1::WatchStatusRequest request;
  request.set_interval_seconds(30);  // the stream would otherwise sleep for half a minute
  auto context = Call("", std::chrono::seconds(60));
  auto reader = stub_->WatchStatus(context.get(), request);
  v1::JobStatus status;
  ASSERT_TRUE(reader->Read(&status));
  auto context2 = Call("", std::chrono::seconds(60));
  auto reader2 = stub_->WatchStatus(context2.get(), request);
  ASSERT_TRUE(reader2->Read(&status));

  const auto start = Clock::now();
  server_.reset();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(reader->Read(&status));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(reader2->Read(&status));
  EXPECT_NE(reader2->Finish().error_code(), grpc::StatusCode::OK);
  EXPECT_FALSE(controller_->shut_down());  // the job itself goes on
}

TEST_F(ControlServerTest, ManyConcurrentClients) {
  StartJob();
  std::vector<std::thread> clients;
  std::atomic<int> failures{0};
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        v1::JobStatus status;
        if (!stub_->GetStatus(Call().get(), v1::GetStatusRequest(), &status).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ControlServer, APortInUseIsUnavailableNamingIt) {
  JobController controller(10, 1, false);
  ControlConfig config = LoopbackConfig();
  StatusOr<std::unique_ptr<ControlServer>> first = ControlServer::Start(config, &controller);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  config.port = (*first)->port();
  StatusOr<std::unique_ptr<ControlServer>> second = ControlServer::Start(config, &controller);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr((*first)->address()));
  EXPECT_THAT(second.status().message(), HasSubstr("control.port"));
  controller.Shutdown(JobState::kFinished);
}

TEST(ControlServer, ServesIpv6Loopback) {
  JobController controller(10, 1, false);
  ControlConfig config = LoopbackConfig();
  config.bind = "::1";
  StatusOr<std::unique_ptr<ControlServer>> server = ControlServer::Start(config, &controller);
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status().ToString();
  EXPECT_EQ((*server)->address(), "[::1]:" + std::to_string((*server)->port()));
  v1::JobStatus status;
  auto stub = Connect((*server)->address());
  EXPECT_TRUE(stub->GetStatus(Call().get(), v1::GetStatusRequest(), &status).ok());
  controller.Shutdown(JobState::kFinished);
}

#else  // !HOIST_HAVE_GRPC

TEST(ControlServer, WithoutGrpcStartNamesWhatToInstall) {
  JobController controller(10, 1, false);
  ControlConfig config;
  config.enabled = true;
  StatusOr<std::unique_ptr<ControlServer>> server = ControlServer::Start(config, &controller);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(), HasSubstr("scripts/install-deps --grpc"));
}

TEST(ControlServer, RpcTestsNeedGrpc) {
  GTEST_SKIP() << "built without gRPC (HOIST_WITH_GRPC): the control service is not compiled in";
}

#endif  // HOIST_HAVE_GRPC

}  // namespace
}  // namespace hoist::runtime
