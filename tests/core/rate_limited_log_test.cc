// RateLimitedLog on a clock the tests move by hand: the burst, the count of what it held back,
// and the summary line at the next interval or at the end.
#include "core/rate_limited_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

namespace hoist {
namespace {

using ::testing::HasSubstr;
using Clock = RateLimitedLog::Clock;

size_t CountOf(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

class RateLimitedLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_level_ = GetLogLevel();
    SetLogLevel(LogLevel::kInfo);
  }
  void TearDown() override { SetLogLevel(saved_level_); }

  std::unique_ptr<RateLimitedLog> Make(int burst) {
    return std::make_unique<RateLimitedLog>("test: refusals", burst, std::chrono::seconds(60),
                                            [this] { return now_; });
  }

  Clock::time_point now_{};

 private:
  LogLevel saved_level_ = LogLevel::kInfo;
};

TEST_F(RateLimitedLogTest, AFloodWithinOneIntervalIsTheBurstAndOneCount) {
  ::testing::internal::CaptureStderr();
  {
    auto log = Make(5);
    for (int i = 0; i < 1000; ++i) log->Log(LogLevel::kWarn, "refused #" + std::to_string(i));
  }
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountOf(out, "refused #"), 5u) << out;
  EXPECT_THAT(out, HasSubstr("refused #4\n"));
  EXPECT_EQ(CountOf(out, "\n"), 6u) << out;
  EXPECT_THAT(out, HasSubstr("test: refusals: 995 more in the last 60 s, not logged one by one"));
}

TEST_F(RateLimitedLogTest, TheNextIntervalWritesTheCountAndStartsAFreshBurst) {
  ::testing::internal::CaptureStderr();
  auto log = Make(2);
  for (int i = 0; i < 10; ++i) log->Log(LogLevel::kWarn, "first-wave");
  now_ += std::chrono::seconds(59);
  log->Log(LogLevel::kWarn, "first-wave");  // still the first interval: counted
  now_ += std::chrono::seconds(1);
  for (int i = 0; i < 3; ++i) log->Log(LogLevel::kWarn, "second-wave");
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountOf(out, "first-wave"), 2u) << out;
  EXPECT_THAT(out, HasSubstr("test: refusals: 9 more in the last 60 s"));
  EXPECT_EQ(CountOf(out, "second-wave"), 2u) << out;
  // The count comes before the line that opened the next interval.
  EXPECT_LT(out.find("9 more"), out.find("second-wave"));
  ::testing::internal::CaptureStderr();
  log.reset();
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("test: refusals: 1 more"));
}

TEST_F(RateLimitedLogTest, NothingHeldBackMeansNoSummary) {
  ::testing::internal::CaptureStderr();
  {
    auto log = Make(3);
    for (int i = 0; i < 3; ++i) log->Log(LogLevel::kWarn, "line");
    now_ += std::chrono::hours(1);
    log->Log(LogLevel::kWarn, "line");
  }
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountOf(out, "line"), 4u) << out;
  EXPECT_EQ(CountOf(out, "more"), 0u) << out;
}

TEST_F(RateLimitedLogTest, LinesBelowTheLogLevelStillCountTowardsTheBurst) {
  SetLogLevel(LogLevel::kError);
  ::testing::internal::CaptureStderr();
  {
    auto log = Make(2);
    for (int i = 0; i < 5; ++i) log->Log(LogLevel::kWarn, "quiet");
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace hoist
