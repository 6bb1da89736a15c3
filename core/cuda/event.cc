#include "core/cuda/event.h"

#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_status.h"
#include "core/logging.h"

namespace hoist {

CudaEvent::~CudaEvent() { Destroy(); }

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    Destroy();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void CudaEvent::Destroy() {
  if (event_ == nullptr) return;
  cudaError_t error = cudaEventDestroy(event_);
  event_ = nullptr;
  // See CudaStream::Destroy: the failure can only be reported, and it will surface again.
  if (error != cudaSuccess) {
    HOIST_LOG(WARN) << CudaError(error, "cudaEventDestroy(event_)", __FILE__, __LINE__).ToString();
  }
}

StatusOr<CudaEvent> CudaEvent::Create(EventTiming timing) {
  unsigned flags = timing == EventTiming::kDisabled ? cudaEventDisableTiming : cudaEventDefault;
  cudaEvent_t event = nullptr;
  HOIST_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
  return CudaEvent(event);
}

Status CudaEvent::Record(const Stream& stream) {
  HOIST_CHECK(event_ != nullptr) << "Record() on an empty CudaEvent";
  HOIST_CHECK(stream.kind() == DeviceKind::kCuda) << "a CUDA event cannot record a host stream";
  const cudaStream_t raw = static_cast<const CudaStream&>(stream).get();
  HOIST_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, raw));
  return Status::Ok();
}

Status CudaEvent::StreamWait(const CudaStream& stream) const {
  HOIST_CHECK(event_ != nullptr) << "StreamWait() on an empty CudaEvent";
  HOIST_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream.get(), event_, cudaEventWaitDefault));
  return Status::Ok();
}

Status CudaEvent::Synchronize() const {
  HOIST_CHECK(event_ != nullptr) << "Synchronize() on an empty CudaEvent";
  HOIST_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_));
  return Status::Ok();
}

StatusOr<bool> CudaEvent::IsComplete() const {
  HOIST_CHECK(event_ != nullptr) << "IsComplete() on an empty CudaEvent";
  cudaError_t error = cudaEventQuery(event_);
  if (error == cudaSuccess) return true;
  if (error == cudaErrorNotReady) {
    // See CudaStream::IsIdle: an answer, not a failure.
    (void)cudaGetLastError();
    return false;
  }
  return CudaError(error, "cudaEventQuery(event_)", __FILE__, __LINE__);
}

StatusOr<float> CudaEvent::ElapsedMs(const CudaEvent& start, const CudaEvent& end) {
  HOIST_CHECK(!start.empty() && !end.empty()) << "ElapsedMs() of an empty CudaEvent";
  float ms = 0.0f;
  HOIST_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace hoist
