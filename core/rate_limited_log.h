// RateLimitedLog: one kind of log line that a flood of events cannot turn into a flood of lines
// (a peer that makes refused calls as fast as it can, say). Of the events in each interval the
// first `burst` are logged in full; the rest are only counted, and the count is logged as one
// summary line by the first event after the interval (or by the destructor, for the last one).
//
// Thread-safe; Log blocks only on the one write(2) of a line.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "core/logging.h"

namespace hoist {

class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;

  // `summary` names what was counted in the summary line, "control: refused calls" giving
  // "control: refused calls: 995 more in the last 60 s, not logged one by one". `now` is the
  // clock (tests pass one they move by hand). burst >= 1, interval > 0.
  RateLimitedLog(std::string summary, int burst, Clock::duration interval,
                 std::function<Clock::time_point()> now = Clock::now);
  // Logs the count still held, if any.
  ~RateLimitedLog();
  RateLimitedLog(const RateLimitedLog&) = delete;
  RateLimitedLog& operator=(const RateLimitedLog&) = delete;

  // Logs `line` at `level`, or counts it when this interval's burst is spent.
  void Log(LogLevel level, const std::string& line);

 private:
  void LogSummary(Clock::time_point now);  // mu_ held

  const std::string summary_;
  const int burst_;
  const Clock::duration interval_;
  const std::function<Clock::time_point()> now_;
  std::mutex mu_;
  bool open_ = false;                         // GUARDED_BY(mu_): an interval has begun
  Clock::time_point start_;                   // GUARDED_BY(mu_): when it began
  int logged_ = 0;                            // GUARDED_BY(mu_): lines logged in it
  int64_t counted_ = 0;                       // GUARDED_BY(mu_): events in it not logged
  LogLevel counted_level_ = LogLevel::kInfo;  // GUARDED_BY(mu_): the highest of them
};

}  // namespace hoist
