// Helpers shared by the offload tests: a scratch directory removed at the end of each test, and
// page-aligned patterned buffers.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "offload/pinned_pool.h"

namespace hoist::offload::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent = "/tmp") {
    std::string pattern = parent + "/hoist_offload_test_XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : std::string();
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A byte that depends on the position and the seed, so that a misplaced block shows.
inline unsigned char PatternByte(int64_t i, int seed) {
  return static_cast<unsigned char>((i * 131 + seed * 17 + (i >> 12)) & 0xff);
}

inline void FillPattern(void* data, int64_t bytes, int seed) {
  auto* p = static_cast<unsigned char*>(data);
  for (int64_t i = 0; i < bytes; ++i) p[i] = PatternByte(i, seed);
}

inline bool HasPattern(const void* data, int64_t bytes, int seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (int64_t i = 0; i < bytes; ++i) {
    if (p[i] != PatternByte(i, seed)) return false;
  }
  return true;
}

}  // namespace hoist::offload::testing
