// HostStream and HostEvent: the Stream and Event of backends whose work runs on host threads
// (core/stream.h). A HostStream's work is host functions, run in order:
//   - kInline (the CPU backend): Enqueue runs the function at once on the calling thread and
//     returns its Status; Record completes at once and waits are free. This is how a CPU rank
//     computes: the stream vocabulary costs nothing there.
//   - kThreaded (a test backend): a worker thread of the stream's own runs the functions, so work
//     on two streams, or on a stream and the host, runs concurrently; the only ordering is the
//     one events and Synchronize give (a mutex and a condition variable, which ThreadSanitizer
//     understands). Enqueue returns the stream's first error so far, as CUDA reports an earlier
//     asynchronous failure at the next call.
// A threaded stream drains its queue before it is destroyed. Enqueue, WaitEvent and Synchronize
// may be called from one thread at a time per stream; Record and Synchronize of an event from any.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/stream.h"

namespace hoist {

class HostStream final : public Stream {
 public:
  enum class Mode { kInline, kThreaded };
  explicit HostStream(Mode mode = Mode::kInline);
  ~HostStream() override;
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  Mode mode() const { return mode_; }

  // Runs `work` in stream order (see the modes above). A failed work item's Status is the
  // stream's error from then on; later work still runs.
  Status Enqueue(std::function<Status()> work) const;

  Status WaitEvent(const Event& event) const override;
  Status Synchronize() const override;

 private:
  void Run();

  const Mode mode_;
  // The queue a const handle feeds: the stream's state, not the handle's.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::deque<std::function<Status()>> queue_;  // GUARDED_BY(mu_)
  mutable bool busy_ = false;                          // GUARDED_BY(mu_): an item is running
  mutable Status error_;                               // GUARDED_BY(mu_): the first failure
  bool stop_ = false;                                  // GUARDED_BY(mu_)
  std::thread worker_;                                 // kThreaded only
};

class HostEvent final : public Event {
 public:
  HostEvent() = default;
  HostEvent(const HostEvent&) = delete;
  HostEvent& operator=(const HostEvent&) = delete;

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  Status Record(const Stream& stream) override;
  Status Synchronize() const override;
  StatusOr<bool> IsComplete() const override;

 private:
  friend class HostStream;
  // The mark of the last Record, read when a wait is enqueued.
  int64_t recorded() const;
  // Blocks until the work up to mark `mark` has completed.
  void WaitFor(int64_t mark) const;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int64_t recorded_ = 0;   // GUARDED_BY(mu_): Records so far
  int64_t completed_ = 0;  // GUARDED_BY(mu_): the highest mark whose work has completed
};

}  // namespace hoist
