// The metrics endpoint's HTTP server under clients that do not behave: idle connections, a
// request sent a byte at a time, an answer never read, more connections than it keeps. Each test
// asserts what happened (who was answered, who was cut off, who is still connected); the only
// time limits are hang guards far above what any of it takes.
#include "runtime/observe/metrics_http.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/observe/metrics.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// No test waits longer than this on a server that does not answer or close.
constexpr int kHangGuardMs = 30000;

// A client socket, closed on destruction.
class Client {
 public:
  explicit Client(int port, int receive_buffer_bytes = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    HOIST_CHECK(fd_ >= 0) << std::strerror(errno);
    if (receive_buffer_bytes > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof(receive_buffer_bytes));
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    HOIST_CHECK(::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0)
        << std::strerror(errno);
  }
  ~Client() { ::close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool Send(const std::string& data) {
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }

  // Everything until the server closes (or resets) the connection; "<hang>" if it does neither
  // within the hang guard.
  std::string ReadToEnd() {
    std::string out;
    char buffer[65536];
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, kHangGuardMs) == 0) return out + "<hang>";
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return out;
      out.append(buffer, static_cast<size_t>(n));
    }
  }

  // Waits (up to the hang guard) for the server to end the connection, reading nothing; true if
  // it did.
  bool WaitForServerToEnd() {
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, kHangGuardMs) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  // Whether the server has neither closed, reset nor written to the connection, as of now.
  bool Untouched() {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
};

std::string Get(int port, const std::string& method = "GET") {
  Client client(port);
  if (!client.Send(method + " /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) return "<send>";
  return client.ReadToEnd();
}

std::unique_ptr<MetricsHttpServer> Serve(std::string text, MetricsHttpLimits limits) {
  auto server = MetricsHttpServer::Start(
      "127.0.0.1", 0, [text = std::move(text)] { return text; }, limits);
  HOIST_CHECK(server.ok()) << server.status().ToString();
  return std::move(server).value();
}

MetricsHttpLimits WithDeadline(double seconds) {
  MetricsHttpLimits limits;
  limits.request_deadline_s = seconds;
  return limits;
}

TEST(MetricsHttp, IdleConnectionsDoNotDelayAScrape) {
  if (!MetricsExporter::Available()) GTEST_SKIP() << "built without prometheus-cpp";
  MetricsConfig config;
  config.enabled = true;
  config.port = 0;
  auto exporter = MetricsExporter::Start(config, 0, 0);
  ASSERT_TRUE(exporter.ok()) << exporter.status().ToString();
  const int port = (*exporter)->port();
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<Client>(port));
  const std::string answer = Get(port);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(answer, HasSubstr("hoist_steps_total{rank=\"0\"} 0"));
  // Answered while they were still waiting, not after they had been timed out one by one.
  for (auto& client : idle) EXPECT_TRUE(client->Untouched());
}

TEST(MetricsHttp, ARequestSentByteByByteDoesNotBlockOthers) {
  auto server = Serve("up 1\n", WithDeadline(600));
  Client slow(server->port());
  for (const char c : std::string("GET /metr")) ASSERT_TRUE(slow.Send(std::string(1, c)));
  EXPECT_THAT(Get(server->port()), AllOf(StartsWith("HTTP/1.1 200 OK\r\n"), HasSubstr("up 1\n")));
  for (const char c : std::string("ics HTTP/1.1\r\n\r\n"))
    ASSERT_TRUE(slow.Send(std::string(1, c)));
  EXPECT_THAT(slow.ReadToEnd(), AllOf(StartsWith("HTTP/1.1 200 OK\r\n"), HasSubstr("up 1\n")));
}

TEST(MetricsHttp, ARequestNotFinishedByTheDeadlineIsCutOffUnanswered) {
  auto server = Serve("up 1\n", WithDeadline(0.2));
  Client slow(server->port());
  for (const char c : std::string("GET /metrics HTTP/1.1\r\nHost: 1")) {
    ASSERT_TRUE(slow.Send(std::string(1, c)));
  }
  ASSERT_TRUE(slow.WaitForServerToEnd());
  EXPECT_EQ(slow.ReadToEnd(), "");
  // And the server serves on.
  EXPECT_THAT(Get(server->port()), HasSubstr("up 1\n"));
}

TEST(MetricsHttp, AClientThatNeverReadsDoesNotBlockOthers) {
  // Far more than the socket buffers of both ends hold, so the server's writes to the client
  // that does not read stall.
  const std::string big(32 << 20, 'x');
  auto server = Serve(big, WithDeadline(600));
  Client stuck(server->port(), /*receive_buffer_bytes=*/4096);
  ASSERT_TRUE(stuck.Send("GET /metrics HTTP/1.1\r\n\r\n"));
  const std::string answer = Get(server->port());
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(answer.size() - answer.find("\r\n\r\n") - 4, big.size());
  EXPECT_THAT(Get(server->port(), "HEAD"),
              HasSubstr("Content-Length: " + std::to_string(big.size()) + "\r\n"));
}

TEST(MetricsHttp, AClientThatNeverReadsIsCutOffAtTheDeadline) {
  const std::string big(32 << 20, 'x');
  auto server = Serve(big, WithDeadline(0.2));
  Client stuck(server->port(), /*receive_buffer_bytes=*/4096);
  ASSERT_TRUE(stuck.Send("GET /metrics HTTP/1.1\r\n\r\n"));
  // Ended by a reset while most of the answer was still unsent, not after sending it all.
  ASSERT_TRUE(stuck.WaitForServerToEnd());
  EXPECT_LT(stuck.ReadToEnd().size(), big.size());
}

TEST(MetricsHttp, BeyondTheCapTheOldestIdleConnectionMakesRoom) {
  MetricsHttpLimits limits = WithDeadline(600);
  limits.max_connections = 2;
  limits.idle_after_s = 0.05;
  auto server = Serve("up 1\n", limits);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<Client>(server->port()));
  EXPECT_THAT(Get(server->port()), HasSubstr("up 1\n"));
  EXPECT_TRUE(idle[0]->WaitForServerToEnd());
  EXPECT_TRUE(idle[1]->WaitForServerToEnd());
  // The newest idle connection is kept: it may yet send its request.
  EXPECT_TRUE(idle[3]->Send("GET /metrics HTTP/1.0\r\n\r\n"));
  EXPECT_THAT(idle[3]->ReadToEnd(), HasSubstr("up 1\n"));
}

// A scrape that arrives amid a flood of clients that connect and say nothing: it is answered
// in full, not reset to make room for the connections that came after it. The server's thread is
// held in a first answer while everyone connects, so that it finds them all waiting at once.
TEST(MetricsHttp, AScrapeGetsThroughAFloodOfSilentConnections) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first{true};
  MetricsHttpLimits limits = WithDeadline(600);
  limits.max_connections = 4;
  limits.idle_after_s = 0.05;
  auto started = MetricsHttpServer::Start(
      "127.0.0.1", 0,
      [&] {
        if (first.exchange(false)) {
          entered.set_value();
          released.wait();
        }
        return std::string("up 1\n");
      },
      limits);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  const int port = (*started)->port();
  Client held(port);
  ASSERT_TRUE(held.Send("GET /metrics HTTP/1.1\r\n\r\n"));
  entered.get_future().wait();

  std::vector<std::unique_ptr<Client>> silent;
  for (int i = 0; i < 10; ++i) silent.push_back(std::make_unique<Client>(port));
  Client scrape(port);
  ASSERT_TRUE(scrape.Send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  for (int i = 0; i < 10; ++i) silent.push_back(std::make_unique<Client>(port));
  release.set_value();

  EXPECT_THAT(held.ReadToEnd(), HasSubstr("up 1\n"));
  const std::string answer = scrape.ReadToEnd();
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(answer, HasSubstr("Content-Length: 5\r\n"));
  EXPECT_THAT(answer, ::testing::EndsWith("\r\n\r\nup 1\n"));
}

TEST(MetricsHttp, AHeadTooLongIsRefused) {
  auto server = Serve("up 1\n", {});
  Client client(server->port());
  // Just past the limit, so that the server has read all of it when it answers (unread bytes
  // would turn its close into a reset that could overtake the answer).
  std::string head = "GET /metrics HTTP/1.1\r\nX-Long: ";
  head.resize(9000, 'a');
  ASSERT_TRUE(client.Send(head));
  EXPECT_THAT(client.ReadToEnd(), StartsWith("HTTP/1.1 431 "));
}

TEST(MetricsHttp, LoopbackAddressesAreKnown) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.3.2.1"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackAddress("::"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("localhost"));
}

TEST(MetricsHttp, AnAddressOtherMachinesReachIsServedWithANotice) {
  if (!MetricsExporter::Available()) GTEST_SKIP() << "built without prometheus-cpp";
  MetricsConfig config;
  config.enabled = true;
  config.port = 0;
  config.bind = "0.0.0.0";
  ::testing::internal::CaptureStderr();
  auto exposed = MetricsExporter::Start(config, 0, 0);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(exposed.ok()) << exposed.status().ToString();
  EXPECT_THAT(said, AllOf(HasSubstr("metrics.bind is \"0.0.0.0\""),
                          HasSubstr("without authentication"), HasSubstr("127.0.0.1")));
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;

  config.bind = "127.0.0.1";
  ::testing::internal::CaptureStderr();
  auto loopback = MetricsExporter::Start(config, 0, 0);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), Not(HasSubstr("authentication")));
  ASSERT_TRUE(loopback.ok()) << loopback.status().ToString();
}

}  // namespace
}  // namespace hoist::runtime
