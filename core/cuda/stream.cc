#include "core/cuda/stream.h"

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/event.h"
#include "core/logging.h"

namespace hoist {

CudaStream::~CudaStream() { Destroy(); }

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    Destroy();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void CudaStream::Destroy() {
  if (stream_ == nullptr) return;
  cudaError_t error = cudaStreamDestroy(stream_);
  stream_ = nullptr;
  // A destructor cannot return a Status; at this point a failure means the context is already
  // broken, and the next checked call will report it. The line tells where it was first seen.
  if (error != cudaSuccess) {
    HOIST_LOG(WARN)
        << CudaError(error, "cudaStreamDestroy(stream_)", __FILE__, __LINE__).ToString();
  }
}

StatusOr<CudaStream> CudaStream::Create(int priority) {
  int least = 0, greatest = 0;
  HOIST_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  // CUDA's greatest priority is the numerically smallest.
  priority = std::clamp(priority, greatest, least);
  cudaStream_t stream = nullptr;
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
  return CudaStream(stream);
}

cudaStream_t CudaStream::get() const {
  HOIST_CHECK(stream_ != nullptr) << "get() of an empty CudaStream would name the default stream";
  return stream_;
}

Status CudaStream::WaitEvent(const Event& event) const {
  HOIST_CHECK(event.kind() == DeviceKind::kCuda) << "a CUDA stream cannot wait on a host event";
  return static_cast<const CudaEvent&>(event).StreamWait(*this);
}

Status CudaStream::Synchronize() const {
  HOIST_CHECK(stream_ != nullptr) << "Synchronize() on an empty CudaStream";
  HOIST_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

StatusOr<bool> CudaStream::IsIdle() const {
  HOIST_CHECK(stream_ != nullptr) << "IsIdle() on an empty CudaStream";
  cudaError_t error = cudaStreamQuery(stream_);
  if (error == cudaSuccess) return true;
  if (error == cudaErrorNotReady) {
    // "Not ready" is an answer, not a failure; clear it so no later launch check reports it.
    (void)cudaGetLastError();
    return false;
  }
  return CudaError(error, "cudaStreamQuery(stream_)", __FILE__, __LINE__);
}

}  // namespace hoist
