#include "core/rate_limited_log.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace hoist {

RateLimitedLog::RateLimitedLog(std::string summary, int burst, Clock::duration interval,
                               std::function<Clock::time_point()> now)
    : summary_(std::move(summary)), burst_(burst), interval_(interval), now_(std::move(now)) {
  HOIST_CHECK(burst_ >= 1 && interval_ > Clock::duration::zero());
}

RateLimitedLog::~RateLimitedLog() {
  std::lock_guard<std::mutex> lock(mu_);
  if (counted_ > 0) LogSummary(now_());
}

void RateLimitedLog::Log(LogLevel level, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = now_();
  if (!open_ || now - start_ >= interval_) {
    if (counted_ > 0) LogSummary(now);
    open_ = true;
    start_ = now;
    logged_ = 0;
  }
  if (logged_ < burst_) {
    ++logged_;
    if (level >= GetLogLevel()) internal::LogMessage(level, __FILE__, __LINE__) << line;
    return;
  }
  counted_level_ = counted_ == 0 ? level : std::max(counted_level_, level);
  ++counted_;
}

void RateLimitedLog::LogSummary(Clock::time_point now) {
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::max(now - start_, interval_)).count();
  if (counted_level_ >= GetLogLevel()) {
    internal::LogMessage(counted_level_, __FILE__, __LINE__)
        << summary_ << ": " << counted_ << " more in the last " << seconds
        << " s, not logged one by one";
  }
  counted_ = 0;
}

}  // namespace hoist
