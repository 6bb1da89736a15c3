// The one-line progress of a data command (`hoist data tokenize`, `hoist data prepare`): how much
// of its input it has read, rewritten in place with '\r' at most twice a second and ended with a
// newline by the last update. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>

namespace hoist::runtime {

class ProgressLine {
 public:
  // `out`: where the line goes (none: nothing is written); `verb`: what is done ("tokenized");
  // `total`: the input's bytes.
  ProgressLine(std::ostream* out, const char* verb, int64_t total)
      : out_(out), verb_(verb), total_(total), printed_(std::chrono::steady_clock::now()) {}

  // `done` bytes of the total, and what came of them ("1234 tokens").
  void Update(int64_t done, const std::string& counts, bool last) {
    if (out_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    if (!last && now - printed_ < std::chrono::milliseconds(500)) return;
    printed_ = now;
    *out_ << "\rhoist: " << verb_ << " " << Mib(done) << " / " << Mib(total_) << " MiB ("
          << (total_ > 0 ? done * 100 / total_ : 100) << "%), " << counts << (last ? "\n" : "")
          << std::flush;
  }

 private:
  static std::string Mib(int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", static_cast<double>(bytes) / (1 << 20));
    return text;
  }

  std::ostream* out_;
  const char* verb_;
  int64_t total_;
  std::chrono::steady_clock::time_point printed_;
};

}  // namespace hoist::runtime
