// NcclCommunicator: the Communicator for device buffers, one rank per GPU, over NCCL. Every
// buffer passed to it is device memory of this rank's GPU (cudaMalloc, e.g. a CudaDevice Buffer).
//
// Streams. Collectives run on the communicator's own comm stream, in the order they were issued.
// The comm stream does not wait for the caller's compute streams by itself: work that produced a
// collective's input is ordered before it with OrderAfter(producer stream), or WaitFor(event)
// recorded on the producer's stream (the host does not stop). Work that consumes a result is
// ordered after it either on the host, by the blocking form or a handle's Wait, or on the GPU,
// by the handle's StreamWait. A stream that waits on a collective that never completes waits
// for ever: only Wait has the deadline, so the caller Waits before it waits for that stream.
//
// Reductions. NCCL chooses the reduction order (ring or tree, by size and topology), so for more
// than two ranks the floating-point sum is not the rank-ordered one the Communicator contract
// describes and bf16/fp16 partial sums may round on the way; results are still identical on
// every rank of one job. kAvg is NCCL's ncclAvg.
//
// Failures. A collective that has not completed `timeout_s` after it was issued, or an
// asynchronous NCCL error (a peer that died, a broken network), aborts the NCCL communicator
// (ncclCommAbort) and returns kDeadlineExceeded or the error, naming the op, the rank and the
// bytes; every later call fails fast with that error. Creation has the same deadline. The abort
// itself returns only once the work already queued on the comm stream can drain, so a WaitFor on
// a producer's event that never completes holds it (seen on an H100: the abort waited for the
// producer kernel to end).
//
// Ownership and threads: one object per rank, used from one thread at a time; its handles are
// waited on from that thread. Each call makes this rank's GPU current on the calling thread. The
// host communicator passed to Create must outlive this object (Abort forwards to it). Handles
// may outlive the communicator.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/cuda/event.h"
#include "core/cuda/stream.h"
#include "core/status.h"

namespace hoist::comm {

struct NcclOptions {
  // This process's rank on its node; the GPU is local_rank % visible GPUs.
  int local_rank = 0;
  // How long creation, a collective or the final flush may take before the communicator is
  // aborted (comm.timeout_s of the config).
  double timeout_s = 600.0;
};

// The completion of one NCCL collective: an event recorded on the comm stream after it.
// Wait blocks the host (polling the event and NCCL's asynchronous error until the deadline);
// StreamWait only makes another stream wait, on the GPU.
class NcclWork final : public CommWork {
 public:
  class Impl;
  explicit NcclWork(std::unique_ptr<Impl> impl);
  // Waits for the collective if nobody has; a failure is logged, since nobody can receive it.
  ~NcclWork() override;
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  Status Wait() override;
  bool Done() override;

  // Work issued to `consumer` after this call runs after the collective; the host does not wait
  // where `consumer` is a CUDA stream (any other stream: the host Waits). Fails (without touching
  // the stream) when the collective could not even be issued.
  Status StreamWait(const Stream& consumer) override;

 private:
  std::unique_ptr<Impl> impl_;
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host`: every rank of `host` calls it. Rank 0 creates NCCL's unique id and
  // broadcasts it over `host`; the NCCL group has host's ranks and world size. A rank without a
  // usable GPU or NCCL makes every rank fail (kUnavailable), decided together over `host`.
  // Blocks until the group is formed or options.timeout_s has passed (kDeadlineExceeded).
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(Communicator* host,
                                                            const NcclOptions& options);

  // Flushes issued collectives (up to timeout_s, then aborts) and releases the NCCL resources.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int world_size() const override;
  // The CUDA ordinal of this rank's GPU.
  int device() const;
  // The comm stream, owned by the communicator (for events and timing, not for other work).
  const CudaStream& stream() const;

  // Later collectives wait on the GPU until `ready` (already recorded on a producer's stream)
  // completes. Never blocks the host.
  Status WaitFor(const CudaEvent& ready);
  // The same for the work on `producer` so far, through an event of the communicator's own; a
  // stream that is not CUDA's is waited for on the host.
  Status OrderAfter(const Stream& producer) override;

  Status AllReduce(void* buf, int64_t count, DType type, ReduceOp op) override;
  Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                       ReduceOp op) override;
  Status AllGather(const void* send, void* recv, int64_t send_count, DType type) override;
  Status Broadcast(void* buf, int64_t count, DType type, int root) override;
  // A one-element all-reduce on a scratch buffer, waited for on the host.
  Status Barrier() override;

  // Each returns an NcclWork (dynamic_cast the handle to reach StreamWait). A call that fails
  // before anything is issued returns a handle whose Wait reports why.
  CommHandle AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) override;
  CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType type,
                                ReduceOp op) override;
  CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count, DType type) override;
  CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) override;

  // Aborts the NCCL communicator (its kernels stop; later calls fail with `reason`), then hands
  // the job's end to the host communicator's Abort.
  void Abort(const Status& reason, int exit_code) override;

  class State;

 private:
  explicit NcclCommunicator(std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
  // OrderAfter's mark, created on first use. A later Record moves it without releasing a wait
  // already enqueued on the comm stream (CUDA's semantics).
  CudaEvent ready_;
};

}  // namespace hoist::comm
