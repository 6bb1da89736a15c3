// WorkQueue: the in-order executor behind every Communicator backend. One worker thread runs the
// collectives of one rank first-in first-out, so asynchronous and blocking calls complete in the
// order the rank issued them (the ordering contract of comm/communicator.h).
//
// Submit returns a CommHandle at once; Run blocks until its task has run. When nothing is queued or
// running, Run executes the task on the calling thread: a blocking collective then costs no thread
// hand-off, and the order is the same because the queue is empty.
//
// Streams: OrderAfter(producer) makes the next task wait, on whichever thread runs it, for the
// work a threaded host stream had been given so far (an event recorded there); a handle's
// StreamWait on a threaded host stream enqueues the wait for the task on that stream. Other
// streams are waited on, or for, by the host (comm/communicator.h).
//
// Thread-safety: Submit, Run and OrderAfter are called by the queue's owner from one thread at a
// time (the Communicator rule); handles may be waited on from any thread. The destructor runs every
// queued task to completion and joins the worker, so handles outliving the queue stay valid.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "core/stream.h"

namespace hoist::comm {

class WorkQueue {
 public:
  WorkQueue();
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task` behind everything submitted before; its Status becomes the handle's.
  CommHandle Submit(std::function<Status()> task);

  // Runs `task` after everything submitted before and returns its Status.
  Status Run(std::function<Status()> task);

  // The next task submitted or run waits for `producer`'s work so far (Communicator::OrderAfter).
  Status OrderAfter(const Stream& producer);

  // A handle that is already complete with `status` (for calls rejected before queueing).
  static CommHandle Completed(Status status);

  // The completion shared by a queued task and its handle.
  struct Completion;

 private:
  struct Item {
    std::function<Status()> task;
    std::shared_ptr<Completion> completion;
  };

  void WorkerLoop();
  // `task`, made to wait first for the events OrderAfter recorded since the last task.
  std::function<Status()> Ordered(std::function<Status()> task);

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::deque<Item> queue_;
  bool busy_ = false;  // a task is running, on the worker or inline in Run
  bool stopping_ = false;
  // Owner thread only: the marks the next task waits for.
  std::vector<std::shared_ptr<Event>> after_;

  std::thread worker_;  // last: starts after the state above exists
};

}  // namespace hoist::comm
