// The CUDA driver as the process's host pinner (core/host_pinning.h): offload's pinned pools,
// the activations kept in host memory and the host-staged communicator's buffers are then
// allocated by cudaHostAlloc where a GPU is visible, which the GPU's asynchronous copies and its
// kernels need. Installed by a static initializer: this file's library is linked whole
// (hoist_plugin), into every binary that links the CUDA runtime library or asks for it.
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_device.h"
#include "core/host_pinning.h"

namespace hoist {
namespace {

class CudaHostPinner final : public HostPinner {
 public:
  std::string name() const override { return "the CUDA driver"; }

  bool Available() const override {
    // Asked once: the answer holds for the process (CUDA_VISIBLE_DEVICES is read at the first
    // CUDA call). Not at installation, which runs before main, when the driver is best left
    // alone.
    static const bool have_gpu = CudaDeviceCount() > 0;
    return have_gpu;
  }

  void* Allocate(int64_t bytes) override {
    void* data = nullptr;
    // Portable: pinned for every CUDA context of the process, whichever device copies from it.
    if (cudaHostAlloc(&data, static_cast<size_t>(bytes), cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();  // clears the error; the caller falls back to mlock
      return nullptr;
    }
    return data;
  }

  void Free(void* data) override { (void)cudaFreeHost(data); }
};

// Never destroyed: buffers may be given back during static destruction.
[[maybe_unused]] const bool kInstalled = [] {
  SetHostPinner(new CudaHostPinner());
  return true;
}();

}  // namespace
}  // namespace hoist
