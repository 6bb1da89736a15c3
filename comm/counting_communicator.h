// CountingCommunicator: a Communicator that passes every call to another one and counts the
// bytes each kind of collective was given, for the metrics (hoist_comm_bytes_total{op}).
//
// The count is the size of the whole buffer the collective works on, on this rank: an
// all-reduce's or broadcast's buffer, a reduce-scatter's input (world_size * recv_count
// elements), an all-gather's output (world_size * send_count elements). It is counted when the
// call is made, whether or not it later succeeds; barriers move no payload and count nothing.
//
// Ownership: does not own the wrapped communicator, which must outlive it. Thread-safety: as
// the wrapped communicator; the counters are atomics that any thread may read.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "comm/collective.h"
#include "comm/communicator.h"

namespace hoist::comm {

// The ops that carry payload: CollectiveOp's first four (kAllReduce ... kBroadcast).
inline constexpr int kNumCollectiveOps = 4;
// "all_reduce", "reduce_scatter", "all_gather", "broadcast": the metric's `op` label.
const char* CollectiveOpLabel(CollectiveOp op);

class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(Communicator* inner) : inner_(inner) {}

  // Bytes handed to collectives of kind `op` so far.
  int64_t bytes(CollectiveOp op) const { return bytes_[int(op)].load(std::memory_order_relaxed); }
  Communicator* inner() const { return inner_; }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Status AllReduce(void* buf, int64_t count, DType type, ReduceOp op) override;
  Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                       ReduceOp op) override;
  Status AllGather(const void* send, void* recv, int64_t send_count, DType type) override;
  Status Broadcast(void* buf, int64_t count, DType type, int root) override;
  Status Barrier() override { return inner_->Barrier(); }
  Status OrderAfter(const Stream& producer) override { return inner_->OrderAfter(producer); }
  CommHandle AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) override;
  CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType type,
                                ReduceOp op) override;
  CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count, DType type) override;
  CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) override;
  void Abort(const Status& reason, int exit_code) override { inner_->Abort(reason, exit_code); }

 private:
  void Count(CollectiveOp op, int64_t elements, DType type);

  Communicator* inner_;
  std::array<std::atomic<int64_t>, kNumCollectiveOps> bytes_{};
};

}  // namespace hoist::comm
