// Helpers shared by the control-service tests: a fake training loop that drives a JobController
// the way rank 0's trainer does, and gRPC clients for the server under test.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "core/memory_tracker.h"
#include "core/status.h"
#include "runtime/observe/control.h"

#if HOIST_HAVE_GRPC
#include <grpcpp/grpcpp.h>

#include "hoist/v1/control.grpc.pb.h"
#endif

namespace hoist::runtime::testing_util {

using Clock = JobController::Clock;

struct FakeLoopOptions {
  std::string checkpoint_dir = "/ck";
  // When not OK, every checkpoint fails with it.
  Status checkpoint_failure = Status::Ok();
  // Whether the loop takes commands at all (false: a job stuck inside a long step).
  bool serve_commands = true;
};

// A training loop without training: each "step" is a 2 ms wait for commands (a command ends it
// early, as if the step had just finished), after which it publishes a status. At each boundary
// it applies the commands in the trainer's order: updates, checkpoint, stop, pause/resume. When
// it stops it shuts the controller down, as `hoist train` does when the job ends.
class FakeLoop {
 public:
  FakeLoop(JobController* controller, FakeLoopOptions options = {})
      : controller_(controller), options_(std::move(options)), thread_([this] { Run(); }) {}
  // The controller must be shut down (or a stop applied) first, or the loop never ends.
  ~FakeLoop() { thread_.join(); }

  int64_t steps() const { return steps_.load(); }

 private:
  void Run() {
    controller_->SetState(JobState::kRunning);
    std::optional<double> lr_override;
    double clipping = 1.0;
    controller_->SetHyperparams(lr_override, clipping);
    bool paused = false;
    while (!controller_->shut_down()) {
      if (!options_.serve_commands) {
        controller_->WaitForCommand(Clock::now() + std::chrono::milliseconds(50));
        continue;
      }
      const ControlCommands commands = controller_->TakeCommands();
      if (commands.lr) lr_override = commands.lr;
      if (commands.gradient_clipping) clipping = *commands.gradient_clipping;
      if (commands.lr || commands.gradient_clipping) {
        controller_->SetHyperparams(lr_override, clipping);
      }
      for (uint64_t id : commands.update_ids) controller_->Complete(id, Status::Ok());
      if (commands.checkpoint || commands.stop_checkpoint) {
        const std::string path = options_.checkpoint_dir + "/step_" + std::to_string(steps());
        if (options_.checkpoint_failure.ok()) controller_->SetLastCheckpoint(path);
        for (uint64_t id : commands.checkpoint_ids) {
          controller_->Complete(id, options_.checkpoint_failure, path);
        }
      }
      if (commands.stop) {
        controller_->SetState(JobState::kStopping);
        break;
      }
      if (commands.pause) {
        paused = true;
        controller_->SetState(JobState::kPaused);
      }
      if (commands.resume) {
        paused = false;
        controller_->SetState(JobState::kRunning);
      }
      if (paused) {
        controller_->WaitForCommand(Clock::now() + std::chrono::seconds(1));
        continue;
      }
      controller_->WaitForCommand(Clock::now() + std::chrono::milliseconds(2));
      Publish(steps_.fetch_add(1) + 1, lr_override.value_or(1e-3));
    }
    controller_->Shutdown(JobState::kFinished);
  }

  void Publish(int64_t step, double lr) {
    JobStatus status;
    status.step = step;
    status.loss = 10.0 / static_cast<double>(step);
    status.lr = lr;
    status.grad_norm = 0.5;
    status.loss_scale = 1;
    status.tokens_per_s = 1000;
    status.step_s = 0.002;
    RankMemory memory;
    memory.rank = 0;
    memory.current[int(Place::kDevice)][int(Category::kParam)] = 3 << 20;
    memory.peak[int(Place::kDevice)][int(Category::kParam)] = 3 << 20;
    memory.peak[int(Place::kDevice)][int(Category::kActivation)] = 5 << 20;
    status.memory.push_back(memory);
    controller_->Publish(status);
  }

  JobController* const controller_;
  const FakeLoopOptions options_;
  std::atomic<int64_t> steps_{0};
  std::thread thread_;  // last: starts once the members above exist
};

// Waits (up to 10 s) for a published status that satisfies `pred`; false if none came.
inline bool WaitForStatus(const JobController& controller,
                          const std::function<bool(const JobStatus&)>& pred) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  uint64_t version = 0;
  while (!pred(controller.GetStatus())) {
    if (Clock::now() >= deadline) return false;
    if (!controller.WaitForUpdate(&version, deadline)) return pred(controller.GetStatus());
  }
  return true;
}

// A self-signed certificate for 127.0.0.1 made by the openssl command; nullopt where there is
// no openssl. Elliptic-curve keys: generating them takes milliseconds.
struct Pki {
  std::string cert, key;  // paths
  std::string cert_pem, key_pem;
};

inline std::optional<Pki> MakeSelfSigned(const std::filesystem::path& dir,
                                         const std::string& name) {
  if (std::system("openssl version > /dev/null 2>&1") != 0) return std::nullopt;
  Pki pki;
  pki.cert = (dir / (name + "_cert.pem")).string();
  pki.key = (dir / (name + "_key.pem")).string();
  const std::string command =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
      "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '" +
      pki.key + "' -out '" + pki.cert + "' > /dev/null 2>&1";
  if (std::system(command.c_str()) != 0) return std::nullopt;
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  pki.cert_pem = read(pki.cert);
  pki.key_pem = read(pki.key);
  return pki;
}

#if HOIST_HAVE_GRPC

inline std::unique_ptr<hoist::v1::JobControl::Stub> Connect(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials()) {
  return hoist::v1::JobControl::NewStub(grpc::CreateChannel(address, credentials));
}

// A call context with a deadline (no test waits forever) and, when given, the bearer token.
inline std::unique_ptr<grpc::ClientContext> Call(
    const std::string& token = "", std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

#endif  // HOIST_HAVE_GRPC

}  // namespace hoist::runtime::testing_util
