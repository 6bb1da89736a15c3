// ScopedCurrentDevice: makes a GPU current on the calling thread for one scope and restores the
// caller's device after, so that an allocation on one GPU does not silently move the thread's
// later work to it (CUDA's current device is per thread). Not copyable; use on one thread.
#pragma once

#include <cuda_runtime_api.h>

namespace hoist {

class ScopedCurrentDevice {
 public:
  ScopedCurrentDevice() = default;
  ~ScopedCurrentDevice() {
    if (restore_ >= 0) (void)cudaSetDevice(restore_);
  }
  ScopedCurrentDevice(const ScopedCurrentDevice&) = delete;
  ScopedCurrentDevice& operator=(const ScopedCurrentDevice&) = delete;

  cudaError_t SetDevice(int ordinal) {
    int previous = -1;
    const bool known = cudaGetDevice(&previous) == cudaSuccess;
    if (known && previous == ordinal) return cudaSuccess;
    restore_ = known ? previous : -1;
    return cudaSetDevice(ordinal);
  }

 private:
  int restore_ = -1;  // the caller's device, or -1 for nothing to restore
};

}  // namespace hoist
