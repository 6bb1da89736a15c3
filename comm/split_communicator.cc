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

Communicator* SplitCommunicator::Route(const void* a, const void* b, Status* failed) const {
  const bool a_device = a != nullptr && backend_->IsDeviceMemory(a);
  const bool b_device = b != nullptr && backend_->IsDeviceMemory(b);
  if (a != nullptr && b != nullptr && a_device != b_device) {
    *failed = InvalidArgumentError(
        "a collective between device and host memory: its send and receive buffers must both "
        "be device memory or both host memory");
    return nullptr;
  }
  // Whichever side carries it, the input may have been written by work still on the stream.
  *failed = backend_->compute_stream().Synchronize();
  if (!failed->ok()) return nullptr;
  return a_device || b_device ? device_ : host_;
}

CommHandle SplitCommunicator::AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) {
  Status failed;
  Communicator* to = Route(buf, nullptr, &failed);
  return to == nullptr ? Refused(failed) : to->AllReduceAsync(buf, count, type, op);
}

CommHandle SplitCommunicator::ReduceScatterAsync(const void* send, void* recv, int64_t recv_count,
                                                 DType type, ReduceOp op) {
  Status failed;
  Communicator* to = Route(send, recv, &failed);
  return to == nullptr ? Refused(failed) : to->ReduceScatterAsync(send, recv, recv_count, type, op);
}

CommHandle SplitCommunicator::AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                             DType type) {
  Status failed;
  Communicator* to = Route(send, recv, &failed);
  return to == nullptr ? Refused(failed) : to->AllGatherAsync(send, recv, send_count, type);
}

CommHandle SplitCommunicator::BroadcastAsync(void* buf, int64_t count, DType type, int root) {
  Status failed;
  Communicator* to = Route(buf, nullptr, &failed);
  return to == nullptr ? Refused(failed) : to->BroadcastAsync(buf, count, type, root);
}

Status SplitCommunicator::AllReduce(void* buf, int64_t count, DType type, ReduceOp op) {
  Status failed;
  Communicator* to = Route(buf, nullptr, &failed);
  return to == nullptr ? failed : to->AllReduce(buf, count, type, op);
}

Status SplitCommunicator::ReduceScatter(const void* send, void* recv, int64_t recv_count,
                                        DType type, ReduceOp op) {
  Status failed;
  Communicator* to = Route(send, recv, &failed);
  return to == nullptr ? failed : to->ReduceScatter(send, recv, recv_count, type, op);
}

Status SplitCommunicator::AllGather(const void* send, void* recv, int64_t send_count, DType type) {
  Status failed;
  Communicator* to = Route(send, recv, &failed);
  return to == nullptr ? failed : to->AllGather(send, recv, send_count, type);
}

Status SplitCommunicator::Broadcast(void* buf, int64_t count, DType type, int root) {
  Status failed;
  Communicator* to = Route(buf, nullptr, &failed);
  return to == nullptr ? failed : to->Broadcast(buf, count, type, root);
}

void SplitCommunicator::Abort(const Status& reason, int exit_code) {
  device_->Abort(reason, exit_code);
  host_->Abort(reason, exit_code);
}

}  // namespace hoist::comm
