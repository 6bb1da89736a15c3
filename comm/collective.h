// What one rank asks of a collective, shared by the backends: the call's description (for
// matching ranks and for error messages), argument checks, and the rank-order reduction that the
// thread and shared-memory backends use. Internal to comm/; pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "core/status.h"

namespace hoist::comm {

enum class CollectiveOp { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier };

const char* CollectiveOpName(CollectiveOp op);

// Every rank of a collective must pass an equal CollectiveCall.
struct CollectiveCall {
  CollectiveOp op = CollectiveOp::kBarrier;
  int64_t count = 0;  // per-rank block: count, recv_count or send_count
  DType type = DType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;

  bool operator==(const CollectiveCall&) const = default;
};

// "AllReduce(sum, 7 x fp32, 28 bytes)": the op, its arguments and the bytes of the larger buffer
// this rank passed.
std::string Describe(const CollectiveCall& call, int world_size);

// The larger of the buffers one rank passes, in bytes.
int64_t CallBytes(const CollectiveCall& call, int world_size);

// kInvalidArgument naming the op and rank for a negative count, a root outside the group or a
// null buffer with a non-zero count.
Status ValidateCall(const CollectiveCall& call, int rank, int world_size, const void* send,
                    const void* recv);

// Element i of a buffer of `type`, as fp32; and the store that rounds to nearest even.
float LoadElement(const void* base, int64_t i, DType type);
void StoreElement(void* base, int64_t i, DType type, float value);

// out[i] = reduction of inputs[0][i], inputs[1][i], ... inputs[n-1][i] for i in [0, count):
// summed in fp32 in rank order, divided by n for kAvg, rounded once to `type`. `out` may alias
// any input.
void ReduceInRankOrder(const void* const* inputs, int n, void* out, int64_t count, DType type,
                       ReduceOp op);

}  // namespace hoist::comm
