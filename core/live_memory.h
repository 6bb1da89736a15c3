// live_memory: a test aid. While it is enabled, every Buffer a Device hands out and every
// PinnedBuffer a pool hands out is recorded, so that a CPU backend can refuse, where device memory
// belongs, a pointer that no allocator of hoist's handed out (a vector's data, a caller's array):
// pageable host memory, which a GPU cannot read. The CPU backend would run such an op; a GPU
// faults (an invalid argument, an illegal address). Enabled, the CPU catches it first.
//
// Off by default: an allocation then costs one relaxed load more. Enable before allocating what
// the checks cover (memory allocated while it was off is not recorded). Thread-safe.
#pragma once

#include <cstdint>

namespace hoist::live_memory {

void Enable(bool on);
bool Enabled();
// `device`: the allocation stands for device memory (a Device of Place::kDevice); otherwise it is
// host memory a GPU can also reach (pinned, a host Device's).
void Add(const void* data, int64_t bytes, bool device);
void Remove(const void* data);
// Whether [p, p + bytes) lies within one recorded allocation; true while disabled.
bool Contains(const void* p, int64_t bytes);
// Whether p lies within a recorded device allocation; true while disabled.
bool OnDevice(const void* p);

// Enables the record for a scope (a test), and turns it off after.
class ScopedEnable {
 public:
  ScopedEnable() { Enable(true); }
  ~ScopedEnable() { Enable(false); }
  ScopedEnable(const ScopedEnable&) = delete;
  ScopedEnable& operator=(const ScopedEnable&) = delete;
};

}  // namespace hoist::live_memory
