// QueuedCommunicator: the part of a host-memory backend that is the same for all of them. Every
// collective, blocking or asynchronous, becomes one task on the rank's WorkQueue, which runs
// them in issue order on its worker thread; a backend supplies Execute, the blocking collective
// itself, and creates the queue once it is ready to run tasks (and resets it first thing in its
// destructor, so no task runs against a half-destroyed backend).
#pragma once

#include <functional>
#include <memory>

#include "comm/collective.h"
#include "comm/communicator.h"
#include "comm/work_queue.h"

namespace hoist::comm {

class QueuedCommunicator : public Communicator {
 public:
  Status AllReduce(void* buf, int64_t count, DType type, ReduceOp op) override {
    return queue_->Run(Task({CollectiveOp::kAllReduce, count, type, op, 0}, buf, buf));
  }
  Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                       ReduceOp op) override {
    return queue_->Run(Task({CollectiveOp::kReduceScatter, recv_count, type, op, 0}, send, recv));
  }
  Status AllGather(const void* send, void* recv, int64_t send_count, DType type) override {
    return queue_->Run(
        Task({CollectiveOp::kAllGather, send_count, type, ReduceOp::kSum, 0}, send, recv));
  }
  Status Broadcast(void* buf, int64_t count, DType type, int root) override {
    return queue_->Run(
        Task({CollectiveOp::kBroadcast, count, type, ReduceOp::kSum, root}, buf, buf));
  }
  Status Barrier() override { return queue_->Run(Task(CollectiveCall{}, nullptr, nullptr)); }
  Status OrderAfter(const Stream& producer) override { return queue_->OrderAfter(producer); }

  CommHandle AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) override {
    return queue_->Submit(Task({CollectiveOp::kAllReduce, count, type, op, 0}, buf, buf));
  }
  CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType type,
                                ReduceOp op) override {
    return queue_->Submit(
        Task({CollectiveOp::kReduceScatter, recv_count, type, op, 0}, send, recv));
  }
  CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count, DType type) override {
    return queue_->Submit(
        Task({CollectiveOp::kAllGather, send_count, type, ReduceOp::kSum, 0}, send, recv));
  }
  CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) override {
    return queue_->Submit(
        Task({CollectiveOp::kBroadcast, count, type, ReduceOp::kSum, root}, buf, buf));
  }

 protected:
  // Runs one collective to completion on the queue's thread. `send` and `recv` are the caller's
  // buffers (the same pointer for in-place ops, both null for Barrier).
  virtual Status Execute(const CollectiveCall& call, const void* send, void* recv) = 0;

  std::unique_ptr<WorkQueue> queue_;

 private:
  std::function<Status()> Task(const CollectiveCall& call, const void* send, void* recv) {
    return [this, call, send, recv] { return Execute(call, send, recv); };
  }
};

}  // namespace hoist::comm
