// CudaStream: the CUDA backend's Stream (core/stream.h), an owned CUDA stream, created non-blocking
// so that it never synchronises with the legacy default stream (hoist issues no work there). Work
// on one stream runs in order; order between streams comes only from CudaEvent (core/cuda/event.h).
// Movable, not copyable; the stream is destroyed with the object (pending work still finishes,
// CUDA defers the release). A stream may be used from several threads, but the caller orders the
// work it issues; the object itself is not synchronised.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "core/stream.h"

namespace hoist {

class CudaStream final : public Stream {
 public:
  // An empty handle (no stream); get() is nullptr. Use Create() for a real one.
  CudaStream() = default;
  ~CudaStream() override;
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  // A non-blocking stream on the calling thread's current device. `priority` follows CUDA: lower
  // numbers run first; 0 is the default and it is clamped to the device's range.
  static StatusOr<CudaStream> Create(int priority = 0);

  // The raw handle for kernel launches and library calls; still owned by this object. Checked
  // non-empty: an empty handle would be nullptr, which CUDA reads as the default stream.
  cudaStream_t get() const;
  bool empty() const { return stream_ == nullptr; }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  // Stream: cudaStreamWaitEvent on a CudaEvent.
  Status WaitEvent(const Event& event) const override;
  // Blocks the calling thread until all work issued to the stream so far has finished.
  Status Synchronize() const override;
  // True when all work issued so far has finished; never blocks.
  StatusOr<bool> IsIdle() const;

 private:
  explicit CudaStream(cudaStream_t stream) : stream_(stream) {}
  void Destroy();

  cudaStream_t stream_ = nullptr;
};

}  // namespace hoist
