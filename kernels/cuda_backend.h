// CudaBackend: the Backend (kernels/backend.h) of a GPU rank, over kernels/cuda/. Its memory comes
// from a caching allocator (core/cuda/cuda_caching_device.h) that serves the compute stream; its
// copy stream is a second CUDA stream on the same GPU, for host<->device transfers that overlap
// the compute. Every op enqueues on the stream it is given and returns without waiting.
//
// Arithmetic against the CPU backend (its oracle): casts, accumulation and AdamW give the same
// bits (the kernels repeat the CPU twins' operations, without fused multiply-adds); the sum of
// squares is a double whose additions run in another order, so it agrees to rounding.
//
// Thread-safety as Backend's. The GPU is made current for the calling thread by Create; a
// backend is used from that thread.
#pragma once

#include <memory>
#include <string>

#include "core/cuda/cuda_caching_device.h"
#include "core/cuda/event.h"
#include "core/cuda/stream.h"
#include "kernels/backend.h"

namespace hoist::kernels {

class CudaBackend final : public Backend {
 public:
  // GPU `ordinal`'s streams, allocator and workspace; allocations count in `tracker`. No GPU
  // there is kUnavailable.
  static StatusOr<std::unique_ptr<CudaBackend>> Create(int ordinal, MemoryTracker* tracker);
  ~CudaBackend() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override { return device_->name(); }
  Device& device() override { return *device_; }
  CudaCachingDevice& caching_device() { return *device_; }

  const Stream& compute_stream() const override { return compute_; }
  const Stream& copy_stream() const override { return copy_; }
  StatusOr<std::unique_ptr<Event>> CreateEvent() override;

  Status Zero(void* dst, int64_t bytes, const Stream& stream) override;
  Status Copy(void* dst, const void* src, int64_t bytes, CopyDirection direction,
              const Stream& stream) override;
  Status Cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n,
              const Stream& stream) override;
  Status Accumulate(void* acc, DType acc_type, const void* add, DType add_type, float scale,
                    int64_t n, const Stream& stream) override;
  Status SumOfSquares(const void* x, DType type, float scale, int64_t n, double* sum,
                      const Stream& stream) override;
  Status AdamW(std::span<const AdamWTensorRef> tensors, DType grad_type, DType copy_type,
               const AdamWStepScalars& scalars, const Stream& stream) override;

 private:
  CudaBackend() = default;

  // Declared in the order they are built; destroyed in reverse: the streams outlive the
  // allocator that serves one of them, the allocator the workspace.
  CudaStream compute_, copy_;
  std::unique_ptr<CudaCachingDevice> device_;
  Buffer workspace_;  // the sum of squares' partials (compute stream only)
};

}  // namespace hoist::kernels
