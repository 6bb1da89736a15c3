// StagedCommunicator: collectives on a backend's device buffers over a communicator that moves
// host buffers (MPI, shared memory, threads). Each collective copies its input from the device
// into staging buffers in host memory on the backend's copy stream, runs the inner collective on
// them, and copies the result back. This is how GPU ranks talk where NCCL cannot run (several
// ranks sharing one GPU, or a build without NCCL), so that the multi-rank GPU engine can be tested
// on one GPU; NCCL remains the path between GPUs. Over the CPU backend it is a (slower) identity,
// which is how its tests check it.
//
// Ordering: a collective reads its input after the work enqueued on the backend's compute stream
// before the call (the copy stream waits on an event recorded there), and its result is in place
// for compute-stream work enqueued after the blocking call, or the handle's Wait, returns. The
// staging buffers come from `staging` (pinned host memory for a GPU backend, so that the copies
// are asynchronous), counted as Category::kComm, and are kept for reuse: their bytes are the
// largest set of collectives in flight at once.
//
// Host buffers (a scalar the engine agrees on, a status code: what the backend says is not its
// device memory) go to the inner communicator as they are. Alone (one rank), a collective on
// device buffers stages nothing: its result is its input, copied on the compute stream where the
// output is another buffer.
//
// Ownership: the inner communicator, the backend and the staging device must outlive it. Not
// thread-safe, as Communicator; handles are waited on from the thread that issued them.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "kernels/backend.h"

namespace hoist::comm {

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(Communicator* inner, kernels::Backend* backend, Device* staging);
  ~StagedCommunicator() override;

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Status AllReduce(void* buf, int64_t count, DType type, ReduceOp op) override;
  Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                       ReduceOp op) override;
  Status AllGather(const void* send, void* recv, int64_t send_count, DType type) override;
  Status Broadcast(void* buf, int64_t count, DType type, int root) override;
  Status Barrier() override { return inner_->Barrier(); }
  // Ok at once for the backend's compute stream (every collective is ordered after it); the host
  // waits for any other.
  Status OrderAfter(const Stream& producer) override;
  CommHandle AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) override;
  CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType type,
                                ReduceOp op) override;
  CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count, DType type) override;
  CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) override;
  void Abort(const Status& reason, int exit_code) override { inner_->Abort(reason, exit_code); }

  // Host bytes the staging buffers hold now (in use or kept for reuse).
  int64_t staging_bytes() const;

 private:
  class StagedWork;
  friend class StagedWork;

  // Whether every given buffer (null: none) is host memory: the call needs no staging. Waits
  // for the compute stream first when they are (it may have written them).
  bool OnHost(const void* a, const void* b) const;

  // A staging buffer of at least `bytes`, from the kept ones or newly allocated.
  StatusOr<Buffer> TakeStaging(int64_t bytes);
  void ReturnStaging(Buffer buffer);
  // Copies `bytes` of device memory at `src` into `dst` (host), after the compute stream's work so
  // far, and waits for it.
  Status Download(void* dst, const void* src, int64_t bytes);
  // Copies `bytes` of host memory at `src` to device memory at `dst`, ahead of the compute
  // stream's later work, and waits for the copy (the staging buffer is reused after).
  Status Upload(void* dst, const void* src, int64_t bytes);
  // Stages `in_bytes` from `in` (null: nothing to read) into one buffer and gives the collective
  // `start` the staged input and an output buffer of `out_bytes` (0: in place), copied to `out`
  // when it completes.
  CommHandle Run(const void* in, int64_t in_bytes, void* out, int64_t out_bytes,
                 const std::function<CommHandle(void* staged_in, void* staged_out)>& start);

  // One rank's collective on device buffers: `bytes` copied from src to dst on the compute
  // stream (none when they are one buffer), nothing staged.
  CommHandle Alone(void* dst, const void* src, int64_t bytes);

  // Creates the two events below on first use.
  Status Events();

  Communicator* inner_;
  kernels::Backend* backend_;
  Device* staging_;
  std::vector<Buffer> free_;  // staging buffers kept for reuse
  // Marks on the compute stream (before a copy) and on the copy stream (before compute goes on).
  // Kept for the communicator's life: a stream's wait on an event must not outlive the event.
  std::unique_ptr<Event> compute_mark_, copy_mark_;
};

}  // namespace hoist::comm
