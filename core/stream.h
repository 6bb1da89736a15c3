// Stream and Event: the order of work on a compute device, in one vocabulary for every backend.
//
// A Stream runs the work enqueued on it in the order it was enqueued. An Event marks a point in a
// stream's work: Record captures what has been enqueued so far, and another stream can wait for
// that point (WaitEvent) without stopping the host, or the host can (Synchronize). Every hand-off
// of a buffer between streams, or from a stream to the host, goes through an event.
//
// The backends (kernels/backend.h) implement them:
//   - the CPU backend's streams run their work inline, at the call: a Record is complete when it
//     returns and every wait is free (core/host_stream.h, HostStream::Mode::kInline);
//   - the test backend runs each stream's work on a worker thread of its own, so that a missing
//     event between two streams, or between a stream and the host, is a data race that
//     ThreadSanitizer reports without a GPU (HostStream::Mode::kThreaded);
//   - the CUDA backend's are cudaStream_t and cudaEvent_t (core/cuda/stream.h, event.h).
// A stream and an event must be of the same kind (checked).
//
// Handles are const where they only enqueue: a const Stream& can still be given work, as a
// cudaStream_t can. Errors of work that ran asynchronously surface at the next call on the same
// stream or at Synchronize. Streams and events are not synchronised objects: one thread issues
// work to a stream at a time. An event must outlive the work that records or waits on it.
#pragma once

#include "core/device.h"
#include "core/status.h"

namespace hoist {

class Event;

class Stream {
 public:
  virtual ~Stream() = default;
  virtual DeviceKind kind() const = 0;

  // Work enqueued on this stream after the call waits until `event`'s last Record has completed
  // (an event never recorded does not hold it back). The host does not wait.
  virtual Status WaitEvent(const Event& event) const = 0;
  // Blocks the calling thread until all work enqueued so far has finished; returns the first
  // error of that work.
  virtual Status Synchronize() const = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  virtual DeviceKind kind() const = 0;

  // Captures the work enqueued on `stream` so far; the event completes when that work has. A
  // later Record moves the mark.
  virtual Status Record(const Stream& stream) = 0;
  // Blocks the calling thread until the last Record has completed (at once if there was none).
  virtual Status Synchronize() const = 0;
  // True when the last Record has completed (or there was none); never blocks.
  virtual StatusOr<bool> IsComplete() const = 0;
};

}  // namespace hoist
