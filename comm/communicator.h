// Communicator: the seam between the training runtime and whatever moves bytes between ranks
// (N threads in one process for tests, MPI for host buffers, NCCL for device buffers).
//
// Every collective is called by all ranks of the group, in the same order, with matching
// arguments. Each comes in two forms. The blocking form returns when this rank's part is done:
// its output buffer holds the result and its input buffer may be reused. The asynchronous form
// (`...Async`) returns a CommHandle at once; the collective runs in the background and its
// buffers belong to it until the handle's Wait returns (or the handle is destroyed, which waits).
// A rank's collectives, blocking and asynchronous alike, run one after another in the order this
// rank issued them, so a blocking call issued after asynchronous ones completes after them.
//
// Reductions are deterministic for a given backend, world size and count, and identical on every
// rank. bf16 and fp16 are reduced in fp32 arithmetic and kAvg is the fp32 sum divided by N; what
// differs between backends is the order of the additions:
//   - ThreadGroup and the shared-memory backend sum in rank order 0..N-1 and round once to 16
//     bits at the end, so their results are bit-identical to each other;
//   - MPI adds in the order of the library's algorithm (chosen by size and world size); bf16 and
//     fp16 are widened to fp32 on the way, so the 16-bit rounding is still the final one only;
//   - NCCL adds in ring or tree order and may round 16-bit partial sums on the way.
//
// A collective that does not complete within the communicator's timeout returns
// kDeadlineExceeded naming the op, this rank, the bytes and the ranks that did not arrive; it
// never hangs. After any failed collective the group is unusable: later calls fail fast with
// the original error, because peers may be half-way through the failed op.
//
// Streams. A collective on buffers that work on a compute stream writes or reads is ordered
// against that stream without the host waiting where the backend allows it: OrderAfter(producer)
// makes later collectives read their inputs after the producer's work so far, and a handle's
// StreamWait(consumer) makes the consumer's later work run after the collective. A device
// communicator does both on the device (NCCL: its comm stream waits on an event recorded on the
// producer; the consumer waits on one recorded after the collective); a host communicator does
// them on its worker thread and the consumer stream's (a threaded host stream, core/host_stream.h),
// and on the host where a stream is of a kind it cannot wait on. The collective's outcome is
// always Wait's to return: a host backend's consumer stream also carries a failure as its error,
// but a GPU stream that waited on a failed NCCL collective goes on without one (the collective's
// output is then not the reduction). Only Wait bounds the wait by the timeout: a caller that only
// StreamWaits must Wait before the host waits for the consumer stream.
//
// Buffers are borrowed for the duration of a call (or until its handle completes) and never
// retained beyond it. One Communicator belongs to one rank and is not safe to call from two
// threads at once; a handle may be waited on from the thread that issued it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/status.h"
#include "core/stream.h"

namespace hoist::comm {

enum class ReduceOp { kSum, kAvg };

// "sum", "avg".
const char* ReduceOpName(ReduceOp op);

// The completion of one asynchronous collective.
class CommWork {
 public:
  virtual ~CommWork() = default;
  // Blocks until the collective finished on this rank and returns its outcome (a timeout or a
  // failure of the group included). May be called again; returns the same status.
  virtual Status Wait() = 0;
  // True once Wait would return without blocking.
  virtual bool Done() = 0;
  // Work issued to `consumer` after this call runs after the collective. The base waits on the
  // host (Wait) and returns the collective's outcome; a backend that can make the stream wait
  // instead returns at once, Ok unless the wait could not be enqueued (the outcome then reaches
  // the stream, and Wait).
  virtual Status StreamWait(const Stream& consumer) {
    (void)consumer;
    return Wait();
  }
};
// Destroying a handle whose collective is still running waits for it.
using CommHandle = std::unique_ptr<CommWork>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In place: every rank's `buf` of `count` elements becomes the reduction over all ranks.
  virtual Status AllReduce(void* buf, int64_t count, DType type, ReduceOp op) = 0;

  // `send` holds world_size() * recv_count elements; rank r receives the reduction of block r
  // (elements [r * recv_count, (r + 1) * recv_count)) into `recv`.
  virtual Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                               ReduceOp op) = 0;

  // Each rank contributes `send_count` elements; `recv` holds world_size() * send_count
  // elements, rank r's contribution at block r. `send` may alias block rank() of `recv`.
  virtual Status AllGather(const void* send, void* recv, int64_t send_count, DType type) = 0;

  // Rank `root`'s `buf` is copied into every other rank's `buf`.
  virtual Status Broadcast(void* buf, int64_t count, DType type, int root) = 0;

  // Returns once every rank has entered Barrier.
  virtual Status Barrier() = 0;

  // Collectives issued after this call read their inputs after the work enqueued on `producer`
  // so far. The base waits on the host for the producer (Synchronize) and returns its error;
  // backends that can order on the device or on their worker thread do so and return at once.
  virtual Status OrderAfter(const Stream& producer) { return producer.Synchronize(); }

  // Asynchronous forms of the collectives above, with the same arguments and results.
  virtual CommHandle AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) = 0;
  virtual CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count,
                                        DType type, ReduceOp op) = 0;
  virtual CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count,
                                    DType type) = 0;
  virtual CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) = 0;

  // Ends the whole job, every rank, after a failure this rank cannot recover from (a collective
  // that timed out, say): MPI aborts MPI_COMM_WORLD with `exit_code`; backends without a job of
  // their own (threads in one process) mark the group failed so every rank's next call fails.
  // `reason` is logged first. Does not return for backends that end the process.
  virtual void Abort(const Status& reason, int exit_code) = 0;
};

}  // namespace hoist::comm
