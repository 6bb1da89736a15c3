// CudaDevice: one GPU as a hoist::Device. Its Buffers are device memory (cudaMalloc), zero-filled,
// counted in the MemoryTracker under place kDevice. Also the questions the launcher and `hoist
// report` ask before any device is opened: how many GPUs, which driver.
// Thread-safe: Allocate may be called from several threads; each call makes this GPU current on
// the calling thread only for its duration. Allocate blocks until the zero-fill has finished, so
// the memory is ready for work on any stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/cuda/stream.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "core/status.h"

namespace hoist {

// GPUs visible to this process (CUDA_VISIBLE_DEVICES applies); 0 on any error, e.g. no driver.
int CudaDeviceCount();
// "13.0" for the installed driver's CUDA version, or "none (<reason>)" without a usable driver.
std::string CudaDriverVersionString();
// "13.0" for the CUDA runtime this binary uses.
std::string CudaRuntimeVersionString();
// The product name of GPU `ordinal`, e.g. "NVIDIA H100 80GB HBM3".
StatusOr<std::string> CudaDeviceName(int ordinal);
// The PCI bus id of GPU `ordinal`, "0000:3b:00.0": the same GPU has the same id in every process
// on its machine, whatever CUDA_VISIBLE_DEVICES each one sees.
StatusOr<std::string> CudaDevicePciBusId(int ordinal);

class CudaDevice final : public Device {
 public:
  // Opens GPU `ordinal` and makes it current on the calling thread. No GPU, or no usable driver,
  // is kUnavailable with a message that says so; an ordinal past the last GPU is kInvalidArgument.
  // The device must outlive every Buffer it hands out.
  static StatusOr<std::unique_ptr<CudaDevice>> Open(
      int ordinal, MemoryTracker* tracker = &MemoryTracker::Global());

  ~CudaDevice() override = default;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  // "cuda:0 (NVIDIA H100 80GB HBM3)".
  std::string name() const override;
  int ordinal() const { return ordinal_; }
  const std::string& product_name() const { return product_name_; }
  int64_t total_bytes() const { return total_bytes_; }

  // Makes this GPU current on the calling thread (CUDA's current device is per thread).
  Status MakeCurrent() const;

 protected:
  void* RawAllocate(int64_t bytes) override;
  void RawFree(void* data) override;

 private:
  CudaDevice(int ordinal, std::string product_name, int64_t total_bytes, CudaStream fill_stream,
             MemoryTracker* tracker);

  int ordinal_;
  std::string product_name_;
  int64_t total_bytes_;
  // Zero-fills new allocations. A stream of our own, not the legacy default stream: hoist's
  // streams are non-blocking and would not wait for work there.
  CudaStream fill_stream_;
};

}  // namespace hoist
