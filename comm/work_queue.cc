#include "comm/work_queue.h"

#include <utility>

#include "core/host_stream.h"

namespace hoist::comm {

struct WorkQueue::Completion {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  Status status;      // guarded by mu; final once done

  Status Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  }

  void Finish(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
    }
    cv.notify_all();
  }
};

namespace {

class QueuedWork : public CommWork {
 public:
  explicit QueuedWork(std::shared_ptr<WorkQueue::Completion> completion)
      : completion_(std::move(completion)) {}
  ~QueuedWork() override { (void)Wait(); }

  Status Wait() override { return completion_->Wait(); }

  Status StreamWait(const Stream& consumer) override {
    const auto* host = dynamic_cast<const HostStream*>(&consumer);
    if (host == nullptr || host->mode() == HostStream::Mode::kInline) return Wait();
    // The stream's worker holds the completion: the handle may go before the wait runs.
    return host->Enqueue([completion = completion_] { return completion->Wait(); });
  }

  bool Done() override {
    std::lock_guard<std::mutex> lock(completion_->mu);
    return completion_->done;
  }

 private:
  std::shared_ptr<WorkQueue::Completion> completion_;
};

}  // namespace

WorkQueue::WorkQueue() : worker_([this] { WorkerLoop(); }) {}

WorkQueue::~WorkQueue() {
  // Marks that no task took yet: their producers' streams still hold them.
  for (const auto& event : after_) (void)event->Synchronize();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

CommHandle WorkQueue::Completed(Status status) {
  auto completion = std::make_shared<Completion>();
  completion->Finish(std::move(status));
  return std::make_unique<QueuedWork>(std::move(completion));
}

Status WorkQueue::OrderAfter(const Stream& producer) {
  const auto* host = dynamic_cast<const HostStream*>(&producer);
  if (host == nullptr) return producer.Synchronize();  // a device's stream: the host waits
  if (host->mode() == HostStream::Mode::kInline) return Status::Ok();  // its work is done
  auto ready = std::make_shared<HostEvent>();
  // A stream with an earlier error still takes the mark (its later work runs): the event is kept
  // for the next task to wait on either way, and the error returned.
  const Status recorded = ready->Record(producer);
  after_.push_back(std::move(ready));
  return recorded;
}

std::function<Status()> WorkQueue::Ordered(std::function<Status()> task) {
  if (after_.empty()) return task;
  std::vector<std::shared_ptr<Event>> ready;
  ready.swap(after_);
  return [ready = std::move(ready), task = std::move(task)] {
    // A host event's wait cannot fail; the producer's own errors are its stream's to report.
    for (const auto& event : ready) (void)event->Synchronize();
    return task();
  };
}

CommHandle WorkQueue::Submit(std::function<Status()> task) {
  auto completion = std::make_shared<Completion>();
  task = Ordered(std::move(task));
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(task), completion});
  }
  cv_.notify_all();
  return std::make_unique<QueuedWork>(std::move(completion));
}

Status WorkQueue::Run(std::function<Status()> task) {
  task = Ordered(std::move(task));
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (queue_.empty() && !busy_) {
      // Only the owner submits, and it is here, so the worker stays idle until we are done.
      busy_ = true;
      lock.unlock();
      Status status = task();
      lock.lock();
      busy_ = false;
      cv_.notify_all();
      return status;
    }
  }
  CommHandle handle = Submit(std::move(task));
  return handle->Wait();
}

void WorkQueue::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping and drained
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Status status = item.task();
    item.task = nullptr;  // release captures before the handle reports completion
    item.completion->Finish(std::move(status));
    lock.lock();
    busy_ = false;
  }
}

}  // namespace hoist::comm
