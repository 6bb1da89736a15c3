// SplitCommunicator: one communicator for a rank whose collectives carry two kinds of buffers:
// its backend's device memory, which goes to a device communicator (NCCL between GPUs), and host
// memory (a scalar the engine agrees on, a status code: what the backend says is not its device
// memory), which goes to the job's host communicator. A device communicator cannot read host
// memory, nor a host one device memory; the ZeRO engine calls one communicator for both.
//
// Ordering: a collective reads its input after the work enqueued on the backend's compute stream
// before the call: a device collective by the device communicator's OrderAfter (NCCL's comm
// stream waits on the GPU; the host goes on), a host one after the host waited for the stream.
// Its result is in place once the blocking call, or the handle's Wait, returns, and for a
// stream's later work after the handle's StreamWait (the device side's handles are returned as
// they are). Both sides must be whole-group communicators of
// the same ranks in the same order.
//
// Failures: where the compute stream has failed (an error of its earlier work, reported by the
// host's wait or by ordering after it), a host collective still runs (the peers are in it; it may
// be their agreement on this very failure) and the failure is returned after it; a device
// collective cannot, and both sides are aborted so that no peer waits for ever.
//
// Ownership: the two communicators and the backend must outlive it. Not thread-safe, as
// Communicator.
#pragma once

#include "comm/communicator.h"
#include "kernels/backend.h"

namespace hoist::comm {

class SplitCommunicator final : public Communicator {
 public:
  SplitCommunicator(Communicator* device, Communicator* host, kernels::Backend* backend);

  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  Status AllReduce(void* buf, int64_t count, DType type, ReduceOp op) override;
  Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                       ReduceOp op) override;
  Status AllGather(const void* send, void* recv, int64_t send_count, DType type) override;
  Status Broadcast(void* buf, int64_t count, DType type, int root) override;
  Status Barrier() override { return host_->Barrier(); }
  // Ok at once for the backend's compute stream (every collective is ordered after it); the host
  // waits for any other.
  Status OrderAfter(const Stream& producer) override;
  CommHandle AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) override;
  CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType type,
                                ReduceOp op) override;
  CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count, DType type) override;
  CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) override;
  // Both sides stop: a peer waiting in either must not wait for ever.
  void Abort(const Status& reason, int exit_code) override;

 private:
  // Where a collective on these buffers (null: none) goes, after the compute stream's work so
  // far. `to` null: it must not run (the buffers mix the two kinds, or the device failed under
  // its work: both sides are aborted then); `failed`, with `to` set: the host collective runs
  // and this is returned after it.
  struct Route {
    Communicator* to;
    Status failed;
  };
  Route RouteFor(const void* a, const void* b);

  Communicator* device_;
  Communicator* host_;
  kernels::Backend* backend_;
};

}  // namespace hoist::comm
