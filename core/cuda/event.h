// CudaEvent: the CUDA backend's Event (core/stream.h), an owned CUDA event, the one way hoist
// orders work between streams without stopping the host (record on the producer's stream, make the
// consumer's stream wait on it). Movable, not copyable. Record and StreamWait only enqueue and
// never block; Synchronize blocks. The object is not synchronised: one thread records it at a time.
#pragma once

#include <cuda_runtime_api.h>

#include "core/cuda/stream.h"
#include "core/status.h"
#include "core/stream.h"

namespace hoist {

enum class EventTiming {
  kDisabled,  // the cheap kind, for ordering only (cudaEventDisableTiming)
  kEnabled,   // can be passed to ElapsedMs
};

class CudaEvent final : public Event {
 public:
  // An empty handle; use Create() for a real event.
  CudaEvent() = default;
  ~CudaEvent() override;
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // An event on the calling thread's current device.
  static StatusOr<CudaEvent> Create(EventTiming timing = EventTiming::kDisabled);

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  // Captures the work issued to `stream` (a CudaStream, checked) so far; the event completes when
  // that work has.
  Status Record(const Stream& stream) override;
  // Work issued to `stream` after this call waits until the last Record completes. The host does
  // not wait.
  Status StreamWait(const CudaStream& stream) const;
  // Blocks the calling thread until the last Record completes.
  Status Synchronize() const override;
  // True when the last Record has completed (or there was none); never blocks.
  StatusOr<bool> IsComplete() const override;

  // Milliseconds between two completed, recorded events that were created with kEnabled.
  static StatusOr<float> ElapsedMs(const CudaEvent& start, const CudaEvent& end);

  cudaEvent_t get() const { return event_; }
  bool empty() const { return event_ == nullptr; }

 private:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  void Destroy();

  cudaEvent_t event_ = nullptr;
};

}  // namespace hoist
