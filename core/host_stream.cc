#include "core/host_stream.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace hoist {

HostStream::HostStream(Mode mode) : mode_(mode) {
  if (mode_ == Mode::kThreaded) worker_ = std::thread([this] { Run(); });
}

HostStream::~HostStream() {
  if (mode_ != Mode::kThreaded) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

Status HostStream::Enqueue(std::function<Status()> work) const {
  if (mode_ == Mode::kInline) {
    Status status = work();
    if (!status.ok() && error_.ok()) error_ = status;
    return status;
  }
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(work));
  cv_.notify_all();
  return error_;
}

void HostStream::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and drained
    std::function<Status()> work = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Status status = work();
    lock.lock();
    busy_ = false;
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    cv_.notify_all();
  }
}

Status HostStream::WaitEvent(const Event& event) const {
  HOIST_CHECK(event.kind() == DeviceKind::kCpu) << "a host stream cannot wait on a device event";
  const auto& host_event = static_cast<const HostEvent&>(event);
  const int64_t mark = host_event.recorded();
  if (mode_ == Mode::kInline) {
    // Inline work is complete when it is enqueued, but the event may belong to a threaded stream.
    host_event.WaitFor(mark);
    return Status::Ok();
  }
  return Enqueue([&host_event, mark] {
    host_event.WaitFor(mark);
    return Status::Ok();
  });
}

Status HostStream::Synchronize() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  return error_;
}

Status HostEvent::Record(const Stream& stream) {
  HOIST_CHECK(stream.kind() == DeviceKind::kCpu) << "a host event cannot record a device stream";
  int64_t mark;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mark = ++recorded_;
  }
  return static_cast<const HostStream&>(stream).Enqueue([this, mark] {
    // Notified under the lock: a waiter that sees the mark may destroy the event at once.
    std::lock_guard<std::mutex> lock(mu_);
    completed_ = std::max(completed_, mark);
    cv_.notify_all();
    return Status::Ok();
  });
}

Status HostEvent::Synchronize() const {
  WaitFor(recorded());
  return Status::Ok();
}

StatusOr<bool> HostEvent::IsComplete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= recorded_;
}

int64_t HostEvent::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_;
}

void HostEvent::WaitFor(int64_t mark) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= mark; });
}

}  // namespace hoist
