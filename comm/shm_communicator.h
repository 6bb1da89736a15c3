// ShmCommunicator: the Communicator for ranks that are separate processes on one node, started by
// `hoist launch` without MPI. The ranks meet in a POSIX shared-memory segment named from
// HOIST_JOB_ID ("/hoist-<job id>"), created by rank 0 (a stale segment of the same name, left by a
// crashed run, is replaced) and unlinked as soon as every rank has attached (the mappings keep it
// alive), so that a crash after that cannot leave it behind in /dev/shm. A group that never
// assembles is unlinked by the last rank to leave; only a crash before every rank attached leaves
// the name, which the next rank 0 with that HOIST_JOB_ID replaces.
//
// The segment holds a control block (one record per rank: a phase counter, the collective it
// entered, its pid) and a staging slot of `slot_bytes` per rank plus one for results. A collective
// runs in chunks of at most a slot: each rank copies its input chunk into its slot, then every
// rank reduces its own 1/N of the elements from all slots in rank order (fp32 arithmetic, kAvg
// divides by N, one rounding to bf16/fp16), then everyone copies the result out. Results are
// therefore bit-identical to ThreadGroup's, deterministic and identical on every rank. Ranks wait
// for each other by spinning briefly, then on a futex in the segment.
//
// Failures: a collective that has not completed within `timeout_s` returns kDeadlineExceeded
// naming the op, this rank, the bytes and the ranks that did not arrive; ranks that disagree on a
// collective's arguments get kInvalidArgument naming both calls; a peer process that died is
// noticed (by its pid) while waiting and reported as kUnavailable. Any of these marks the whole
// group failed in the segment, so every rank's current and later calls fail at once. Abort marks
// the group failed with the reason, then ends this process with the exit code.
//
// Thread-safety: one object per rank, used from one thread at a time (the Communicator rule);
// collectives run on the object's WorkQueue. Linux only (futexes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/status.h"

namespace hoist::comm {

struct ShmOptions {
  std::string job_id;  // HOIST_JOB_ID: letters, digits, '.', '_' and '-', at most 200 characters
  int rank = 0;
  int world_size = 1;
  double timeout_s = 600.0;  // for creation (waiting for rank 0's segment) and each collective
  int64_t slot_bytes = int64_t{4} << 20;  // per-rank staging; larger collectives run in chunks
};

// Joins (rank 0: creates) the job's segment. Does not wait for the other ranks; the first
// collective does.
StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(const ShmOptions& options);

// The segment name for `job_id`, or kInvalidArgument naming HOIST_JOB_ID and what it may hold.
StatusOr<std::string> ShmSegmentName(const std::string& job_id);

}  // namespace hoist::comm
