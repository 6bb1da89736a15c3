#include "comm/counting_communicator.h"

namespace hoist::comm {

const char* CollectiveOpLabel(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kBarrier: return "barrier";
  }
  return "unknown";
}

void CountingCommunicator::Count(CollectiveOp op, int64_t elements, DType type) {
  bytes_[int(op)].fetch_add(elements * static_cast<int64_t>(DTypeSize(type)),
                            std::memory_order_relaxed);
}

Status CountingCommunicator::AllReduce(void* buf, int64_t count, DType type, ReduceOp op) {
  Count(CollectiveOp::kAllReduce, count, type);
  return inner_->AllReduce(buf, count, type, op);
}

Status CountingCommunicator::ReduceScatter(const void* send, void* recv, int64_t recv_count,
                                           DType type, ReduceOp op) {
  Count(CollectiveOp::kReduceScatter, recv_count * world_size(), type);
  return inner_->ReduceScatter(send, recv, recv_count, type, op);
}

Status CountingCommunicator::AllGather(const void* send, void* recv, int64_t send_count,
                                       DType type) {
  Count(CollectiveOp::kAllGather, send_count * world_size(), type);
  return inner_->AllGather(send, recv, send_count, type);
}

Status CountingCommunicator::Broadcast(void* buf, int64_t count, DType type, int root) {
  Count(CollectiveOp::kBroadcast, count, type);
  return inner_->Broadcast(buf, count, type, root);
}

CommHandle CountingCommunicator::AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) {
  Count(CollectiveOp::kAllReduce, count, type);
  return inner_->AllReduceAsync(buf, count, type, op);
}

CommHandle CountingCommunicator::ReduceScatterAsync(const void* send, void* recv,
                                                    int64_t recv_count, DType type, ReduceOp op) {
  Count(CollectiveOp::kReduceScatter, recv_count * world_size(), type);
  return inner_->ReduceScatterAsync(send, recv, recv_count, type, op);
}

CommHandle CountingCommunicator::AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                                DType type) {
  Count(CollectiveOp::kAllGather, send_count * world_size(), type);
  return inner_->AllGatherAsync(send, recv, send_count, type);
}

CommHandle CountingCommunicator::BroadcastAsync(void* buf, int64_t count, DType type, int root) {
  Count(CollectiveOp::kBroadcast, count, type);
  return inner_->BroadcastAsync(buf, count, type, root);
}

}  // namespace hoist::comm
