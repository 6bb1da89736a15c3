#include "comm/split_communicator.h"

#include <memory>
#include <utility>

namespace hoist::comm {
namespace {

// A collective that never started: its Wait returns why.
class RefusedWork final : public CommWork {
 public:
  explicit RefusedWork(Status status) : status_(std::move(status)) {}
  Status Wait() override { return status_; }
  bool Done() override { return true; }

 private:
  Status status_;
};

CommHandle Refused(const Status& status) { return std::make_unique<RefusedWork>(status); }

}  // namespace

SplitCommunicator::SplitCommunicator(Communicator* device, Communicator* host,
                                     kernels::Backend* backend)
    : device_(device), host_(host), backend_(backend) {}

SplitCommunicator::Route SplitCommunicator::RouteFor(const void* a, const void* b) {
  const bool a_device = a != nullptr && backend_->IsDeviceMemory(a);
  const bool b_device = b != nullptr && backend_->IsDeviceMemory(b);
  if (a != nullptr && b != nullptr && a_device != b_device) {
    // A program error, the same on every rank: nothing is sent.
    return {nullptr, InvalidArgumentError(
                         "a collective between device and host memory: its send and receive "
                         "buffers must both be device memory or both host memory")};
  }
  // Whichever side carries it, the input may have been written by work still on the stream: the
  // device side waits for it on the device, the host side on the host.
  if (a_device || b_device) {
    const Status ordered = device_->OrderAfter(backend_->compute_stream());
    if (!ordered.ok()) {
      // The device failed under its work: its collective cannot run, and the peers waiting in it
      // must not wait for ever.
      Abort(ordered.WithContext("the compute stream before a device collective"), 1);
      return {nullptr, ordered};
    }
    return {device_, Status::Ok()};
  }
  // Host memory: the collective still runs (the peers are in it, an agreement on this very
  // failure among them), and the failure is returned after it.
  return {host_, backend_->compute_stream().Synchronize()};
}

Status SplitCommunicator::OrderAfter(const Stream& producer) {
  // Every collective is ordered after the compute stream already (RouteFor).
  if (&producer == &backend_->compute_stream()) return Status::Ok();
  return producer.Synchronize();
}

namespace {

// The result of a blocking collective that ran on `route`: its own failure, else the route's.
Status Finish(const Status& collective, const Status& route) {
  return collective.ok() ? route : collective;
}

}  // namespace

CommHandle SplitCommunicator::AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) {
  const Route r = RouteFor(buf, nullptr);
  if (r.to == nullptr) return Refused(r.failed);
  if (!r.failed.ok()) return Refused(Finish(r.to->AllReduce(buf, count, type, op), r.failed));
  return r.to->AllReduceAsync(buf, count, type, op);
}

CommHandle SplitCommunicator::ReduceScatterAsync(const void* send, void* recv, int64_t recv_count,
                                                 DType type, ReduceOp op) {
  const Route r = RouteFor(send, recv);
  if (r.to == nullptr) return Refused(r.failed);
  if (!r.failed.ok()) {
    return Refused(Finish(r.to->ReduceScatter(send, recv, recv_count, type, op), r.failed));
  }
  return r.to->ReduceScatterAsync(send, recv, recv_count, type, op);
}

CommHandle SplitCommunicator::AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                             DType type) {
  const Route r = RouteFor(send, recv);
  if (r.to == nullptr) return Refused(r.failed);
  if (!r.failed.ok())
    return Refused(Finish(r.to->AllGather(send, recv, send_count, type), r.failed));
  return r.to->AllGatherAsync(send, recv, send_count, type);
}

CommHandle SplitCommunicator::BroadcastAsync(void* buf, int64_t count, DType type, int root) {
  const Route r = RouteFor(buf, nullptr);
  if (r.to == nullptr) return Refused(r.failed);
  if (!r.failed.ok()) return Refused(Finish(r.to->Broadcast(buf, count, type, root), r.failed));
  return r.to->BroadcastAsync(buf, count, type, root);
}

Status SplitCommunicator::AllReduce(void* buf, int64_t count, DType type, ReduceOp op) {
  const Route r = RouteFor(buf, nullptr);
  if (r.to == nullptr) return r.failed;
  return Finish(r.to->AllReduce(buf, count, type, op), r.failed);
}

Status SplitCommunicator::ReduceScatter(const void* send, void* recv, int64_t recv_count,
                                        DType type, ReduceOp op) {
  const Route r = RouteFor(send, recv);
  if (r.to == nullptr) return r.failed;
  return Finish(r.to->ReduceScatter(send, recv, recv_count, type, op), r.failed);
}

Status SplitCommunicator::AllGather(const void* send, void* recv, int64_t send_count, DType type) {
  const Route r = RouteFor(send, recv);
  if (r.to == nullptr) return r.failed;
  return Finish(r.to->AllGather(send, recv, send_count, type), r.failed);
}

Status SplitCommunicator::Broadcast(void* buf, int64_t count, DType type, int root) {
  const Route r = RouteFor(buf, nullptr);
  if (r.to == nullptr) return r.failed;
  return Finish(r.to->Broadcast(buf, count, type, root), r.failed);
}

void SplitCommunicator::Abort(const Status& reason, int exit_code) {
  device_->Abort(reason, exit_code);
  host_->Abort(reason, exit_code);
}

}  // namespace hoist::comm
