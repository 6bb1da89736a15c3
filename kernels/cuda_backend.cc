#include "kernels/cuda_backend.h"

#include <vector>

#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_status.h"
#include "kernels/cuda/accumulate.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/cast.h"

namespace hoist::kernels {
namespace {

cudaStream_t RawStream(const Stream& stream) {
  HOIST_CHECK(stream.kind() == DeviceKind::kCuda) << "a CUDA backend op on a host stream";
  return static_cast<const CudaStream&>(stream).get();
}

cudaMemcpyKind KindOf(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::kHostToDevice: return cudaMemcpyHostToDevice;
    case CopyDirection::kDeviceToHost: return cudaMemcpyDeviceToHost;
    case CopyDirection::kDeviceToDevice: return cudaMemcpyDeviceToDevice;
    case CopyDirection::kHostToHost: break;
  }
  return cudaMemcpyHostToHost;
}

}  // namespace

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int ordinal, MemoryTracker* tracker) {
  const int gpus = CudaDeviceCount();
  if (ordinal < 0 || ordinal >= gpus) {
    return UnavailableError("CUDA GPU " + std::to_string(ordinal) + " is not visible (" +
                            std::to_string(gpus) + " GPUs, driver " + CudaDriverVersionString() +
                            "); check CUDA_VISIBLE_DEVICES, or train with --device cpu");
  }
  // The streams are created on the current device: make it this GPU first.
  HOIST_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  HOIST_ASSIGN_OR_RETURN(backend->compute_, CudaStream::Create());
  HOIST_ASSIGN_OR_RETURN(backend->copy_, CudaStream::Create());
  HOIST_ASSIGN_OR_RETURN(backend->device_,
                         CudaCachingDevice::Open(ordinal, backend->compute_, tracker));
  HOIST_ASSIGN_OR_RETURN(backend->workspace_,
                         backend->device_->Allocate(cuda::ScaledSumOfSquaresWorkspaceDoubles() *
                                                        static_cast<int64_t>(sizeof(double)),
                                                    Category::kWorkspace));
  HOIST_ASSIGN_OR_RETURN(backend->blas_, cuda::BlasHandle::Create());
  return backend;
}

CudaBackend::~CudaBackend() {
  // Queued work may still use the workspace and the caller's buffers.
  if (!compute_.empty()) (void)compute_.Synchronize();
  if (!copy_.empty()) (void)copy_.Synchronize();
}

bool CudaBackend::IsDeviceMemory(const void* p) const {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // a pointer the driver does not know: host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

StatusOr<std::unique_ptr<Event>> CudaBackend::CreateEvent() {
  HOIST_ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create());
  return std::unique_ptr<Event>(std::make_unique<CudaEvent>(std::move(event)));
}

Status CudaBackend::Zero(void* dst, int64_t bytes, const Stream& stream) {
  if (bytes < 0) return InvalidArgumentError("Zero: negative length");
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr) return InvalidArgumentError("Zero: dst is null");
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), RawStream(stream)));
  return Status::Ok();
}

Status CudaBackend::Copy(void* dst, const void* src, int64_t bytes, CopyDirection direction,
                         const Stream& stream) {
  if (bytes < 0) return InvalidArgumentError("Copy: negative length");
  if (bytes == 0 || dst == src) return Status::Ok();
  if (dst == nullptr || src == nullptr) return InvalidArgumentError("Copy: dst or src is null");
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), KindOf(direction), RawStream(stream)));
  return Status::Ok();
}

Status CudaBackend::Cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n,
                         const Stream& stream) {
  if (n == 0) return Status::Ok();
  if (dst == src && dst_type == src_type) return Status::Ok();
  return cuda::Cast(dst, dst_type, src, src_type, n, RawStream(stream));
}

Status CudaBackend::Accumulate(void* acc, DType acc_type, const void* add, DType add_type,
                               float scale, int64_t n, const Stream& stream) {
  if (n == 0) return Status::Ok();
  return cuda::Accumulate(acc, acc_type, add, add_type, scale, n, RawStream(stream));
}

Status CudaBackend::SumOfSquares(const void* x, DType type, float scale, int64_t n, double* sum,
                                 const Stream& stream) {
  // The partials are shared by every call: only the compute stream orders them.
  if (&stream != &compute_) {
    return InvalidArgumentError("SumOfSquares: runs on the backend's compute stream");
  }
  return cuda::ScaledSumOfSquares(x, type, scale, n, sum, workspace_.as<double>(),
                                  RawStream(stream));
}

Status CudaBackend::AdamW(std::span<const AdamWTensorRef> tensors, DType grad_type, DType copy_type,
                          const AdamWStepScalars& scalars, const Stream& stream) {
  std::vector<cuda::AdamWTensor> list;
  list.reserve(tensors.size());
  for (const AdamWTensorRef& t : tensors) {
    if (t.n == 0) continue;
    cuda::AdamWTensor& out = list.emplace_back();
    out.param = t.param;
    out.m = t.m;
    out.v = t.v;
    out.grad = t.grad;
    out.copy = t.copy;
    out.n = t.n;
    out.weight_decay = t.weight_decay;
  }
  if (list.empty()) return Status::Ok();
  cuda::AdamWStepParams params;
  params.lr = scalars.lr;
  params.beta1 = scalars.beta1;
  params.beta2 = scalars.beta2;
  params.eps = scalars.eps;
  params.grad_scale = scalars.grad_scale;
  params.step = scalars.step;
  return cuda::AdamWMultiTensor(list, grad_type, copy_type, params, RawStream(stream));
}

}  // namespace hoist::kernels
