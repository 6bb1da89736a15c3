// What peers who may not steer a job can still make it spend: the control service's cap on the
// size of a request (refused before it is parsed, and without the job's memory growing with
// them), its cap on open WatchStatus streams, and its log of refused calls, a few lines and then
// a count.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "runtime/observe/control.h"
#include "runtime/observe/control_server.h"
#include "tests/runtime/control_test_util.h"

#if HOIST_HAVE_GRPC
#include <grpcpp/generic/generic_stub.h>
#endif

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

#if HOIST_HAVE_GRPC

namespace v1 = ::hoist::v1;
using testing_util::Call;
using testing_util::Connect;

ControlConfig OpenLoopbackConfig() {
  ControlConfig config;
  config.enabled = true;
  config.port = 0;
  config.require_token = false;
  return config;
}

// A request of `bytes` bytes that any of the service's request types parses: one field the
// protocol does not have (number 1000, length-delimited), which protobuf keeps as unknown.
std::string UnknownFieldRequest(size_t bytes) {
  std::string out = {static_cast<char>(0xc2), static_cast<char>(0x3e)};  // tag: 1000, type 2
  const size_t body = bytes - 2 - 4;
  HOIST_CHECK(body < (size_t{1} << 28));
  for (int i = 0; i < 4; ++i) {  // the length as a 4-byte varint
    out.push_back(static_cast<char>(((body >> (7 * i)) & 0x7f) | (i < 3 ? 0x80 : 0)));
  }
  out.append(body, 'x');
  return out;
}

// Sends `payload` as the request of `method` without the client copying it (every call shares
// the one buffer), and returns how the call ended.
std::future<grpc::Status> SendRaw(grpc::GenericStub& stub, grpc::ClientContext* context,
                                  const std::string& method, const std::string& payload,
                                  grpc::ByteBuffer* response) {
  grpc::Slice slice(payload.data(), payload.size(), grpc::Slice::STATIC_SLICE);
  auto request = std::make_shared<grpc::ByteBuffer>(&slice, 1);
  auto done = std::make_shared<std::promise<grpc::Status>>();
  std::future<grpc::Status> ended = done->get_future();
  stub.UnaryCall(context, method, grpc::StubOptions(), request.get(), response,
                 [request, done](grpc::Status status) { done->set_value(std::move(status)); });
  return ended;
}

// The resident set's high-water mark of this process in bytes, after resetting it to the
// current resident set when `reset`; nullopt where /proc does not allow either.
std::optional<int64_t> PeakResidentBytes(bool reset) {
  if (reset) {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    if (!clear) return std::nullopt;
  }
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return int64_t{std::atoll(line.c_str() + 6)} * 1024;
  }
  return std::nullopt;
}

// A job whose server runs with `limits`; torn down in the trainer's order.
struct Job {
  explicit Job(ControlServerLimits limits, ControlConfig config = OpenLoopbackConfig())
      : controller(10, 1, /*can_checkpoint=*/true) {
    ControlServerOptions options;
    options.limits = limits;
    StatusOr<std::unique_ptr<ControlServer>> started =
        ControlServer::Start(config, &controller, options);
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    if (started.ok()) server = std::move(started).value();
  }
  ~Job() {
    controller.Shutdown(JobState::kFinished);
    server.reset();
  }
  JobController controller;
  std::unique_ptr<ControlServer> server;
};

TEST(ControlLimits, ARequestOverTheCapIsRefusedAndOneUnderItServed) {
  Job job({});
  ASSERT_NE(job.server, nullptr);
  grpc::GenericStub stub(
      grpc::CreateChannel(job.server->address(), grpc::InsecureChannelCredentials()));
  const std::string small = UnknownFieldRequest(1024);
  const std::string large = UnknownFieldRequest(64 << 10);
  grpc::ByteBuffer response;
  auto served = Call();
  EXPECT_TRUE(
      SendRaw(stub, served.get(), "/hoist.v1.JobControl/GetStatus", small, &response).get().ok());
  auto refused = Call();
  const grpc::Status status =
      SendRaw(stub, refused.get(), "/hoist.v1.JobControl/GetStatus", large, &response).get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  // The largest request the protocol has goes through.
  v1::UpdateHyperparamsRequest update;
  update.set_lr(1e-3);
  update.set_gradient_clipping(1);
  EXPECT_LE(update.ByteSizeLong(), size_t{ControlServerLimits().max_request_bytes} / 100);
}

// Requests just under gRPC's default cap, all at once, to the call that holds its request the
// longest (a checkpoint that waits for a loop that never comes): refused, each of them, without
// the job's memory growing by anything like their size. The peak resident set is measured, so
// the client's side counts too; the requests share one buffer there.
TEST(ControlLimits, OversizedRequestsAreRefusedWithoutTheJobsMemoryGrowingWithThem) {
  constexpr int kCalls = 64;
  constexpr size_t kBytes = 3 << 20;
  if (!PeakResidentBytes(/*reset=*/true)) {
    GTEST_SKIP() << "needs /proc/self/clear_refs to measure the peak resident set";
  }
  Job job({});
  ASSERT_NE(job.server, nullptr);
  const std::string payload = UnknownFieldRequest(kBytes);
  grpc::GenericStub stub(
      grpc::CreateChannel(job.server->address(), grpc::InsecureChannelCredentials()));
  const int64_t before = *PeakResidentBytes(/*reset=*/true);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<grpc::ByteBuffer> responses(kCalls);
  std::vector<std::future<grpc::Status>> calls;
  for (int i = 0; i < kCalls; ++i) {
    contexts.push_back(Call("", std::chrono::seconds(5)));
    calls.push_back(SendRaw(stub, contexts.back().get(), "/hoist.v1.JobControl/Checkpoint", payload,
                            &responses[i]));
  }
  // Refused as too large, or reset by gRPC to keep its buffers under the bound (a stream, or
  // under more pressure the whole connection); never carried out.
  for (std::future<grpc::Status>& call : calls) {
    const grpc::Status status = call.get();
    EXPECT_THAT(status.error_code(), ::testing::AnyOf(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                                      grpc::StatusCode::UNAVAILABLE))
        << status.error_message();
  }
  const int64_t growth = *PeakResidentBytes(/*reset=*/false) - before;
  // Held and parsed, the requests would take more than the 192 MiB sent; refused as they come
  // but buffered whole first, most of it.
  EXPECT_LT(growth, int64_t{kCalls} * int64_t{kBytes} / 4) << "peak grew by " << growth << " bytes";
  EXPECT_TRUE(job.controller.TakeCommands().checkpoint_ids.empty());
  // And the service serves on.
  v1::JobStatus status;
  EXPECT_TRUE(Connect(job.server->address())
                  ->GetStatus(Call().get(), v1::GetStatusRequest(), &status)
                  .ok());
}

// The bounds leave room for what operators do: many dashboards polling at once, each on a
// connection of its own, and as many watchers as the cap allows.
TEST(ControlLimits, ManyClientsOnConnectionsOfTheirOwnAreServed) {
  constexpr int kClients = 64;
  Job job({});
  ASSERT_NE(job.server, nullptr);
  std::vector<std::thread> clients;
  std::atomic<int> failures{0};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      grpc::ChannelArguments arguments;
      arguments.SetInt("hoist.test.client", c);  // a channel, and a connection, of its own
      auto stub = v1::JobControl::NewStub(grpc::CreateCustomChannel(
          job.server->address(), grpc::InsecureChannelCredentials(), arguments));
      for (int i = 0; i < 20; ++i) {
        v1::JobStatus status;
        // As a dashboard's client would, a call waits out a connection attempt that the loaded
        // machine failed (within its deadline) rather than failing at once: what must hold is
        // that every client is served, not that every first connect succeeds.
        auto context = Call();
        context->set_wait_for_ready(true);
        const grpc::Status rpc = stub->GetStatus(context.get(), v1::GetStatusRequest(), &status);
        if (!rpc.ok()) {
          ++failures;
          ADD_FAILURE() << rpc.error_code() << ": " << rpc.error_message();
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ControlLimits, WatchStreamsBeyondTheCapAreRefusedNamingIt) {
  ControlServerLimits limits;
  limits.max_watch_streams = 2;
  Job job(limits);
  ASSERT_NE(job.server, nullptr);
  auto stub = Connect(job.server->address());
  v1::WatchStatusRequest request;
  request.set_interval_seconds(3600);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobStatus>>> open;
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(Call("", std::chrono::seconds(60)));
    open.push_back(stub->WatchStatus(contexts.back().get(), request));
    v1::JobStatus first;
    ASSERT_TRUE(open.back()->Read(&first));  // the stream is being served
  }
  auto extra_context = Call();
  auto extra = stub->WatchStatus(extra_context.get(), request);
  v1::JobStatus status;
  EXPECT_FALSE(extra->Read(&status));
  const grpc::Status refused = extra->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              AllOf(HasSubstr("at most 2 WatchStatus streams"), HasSubstr("hoist ctl status")));
  // Unary calls are not held up by the cap.
  EXPECT_TRUE(stub->GetStatus(Call().get(), v1::GetStatusRequest(), &status).ok());

  // A stream that ends gives its place back, once its handler has noticed (within a tenth of a
  // second), which the tries wait for under a hang guard.
  contexts[0]->TryCancel();
  while (open[0]->Read(&status)) {
  }
  open[0]->Finish();
  bool served = false;
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!served && std::chrono::steady_clock::now() < guard) {
    auto context = Call();
    auto again = stub->WatchStatus(context.get(), request);
    served = again->Read(&status);
    context->TryCancel();
    while (again->Read(&status)) {
    }
    again->Finish();
  }
  EXPECT_TRUE(served);
  contexts[1]->TryCancel();
  while (open[1]->Read(&status)) {
  }
  open[1]->Finish();
}

size_t CountOf(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(ControlLimits, RefusedCallsAreLoggedAFewAtATimeThenCounted) {
  const char* env = std::getenv("HOIST_CONTROL_TOKEN");
  if (env != nullptr) GTEST_SKIP() << "HOIST_CONTROL_TOKEN is set in the environment";
  const std::string dir = ::testing::TempDir() + "/hoist_control_refusal_log";
  ControlServerLimits limits;
  limits.refusal_log_burst = 3;
  limits.refusal_log_interval_s = 3600;  // one interval for the whole test
  ControlConfig config = OpenLoopbackConfig();
  config.require_token = true;
  ::testing::internal::CaptureStderr();
  {
    ControlServerOptions options;
    options.limits = limits;
    options.job_token_path = dir + "/control.token";
    JobController controller(10, 1, false);
    StatusOr<std::unique_ptr<ControlServer>> server =
        ControlServer::Start(config, &controller, options);
    if (server.ok()) {
      auto stub = Connect((*server)->address());
      v1::JobStatus status;
      for (int i = 0; i < 40; ++i) {
        EXPECT_EQ(
            stub->GetStatus(Call(i % 2 == 0 ? "" : "wrong").get(), v1::GetStatusRequest(), &status)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
      }
    } else {
      ADD_FAILURE() << server.status().ToString();
    }
    controller.Shutdown(JobState::kFinished);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountOf(log, "control: refused a call"), 3u) << log;
  // The rest as one count, written when the server goes.
  EXPECT_EQ(CountOf(log, "control: refused calls: 37 more"), 1u) << log;
}

#else  // !HOIST_HAVE_GRPC

TEST(ControlLimits, NeedGrpc) {
  GTEST_SKIP() << "built without gRPC (HOIST_WITH_GRPC): the control service is not compiled in";
}

#endif  // HOIST_HAVE_GRPC

}  // namespace
}  // namespace hoist::runtime
