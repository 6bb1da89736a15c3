// The exact sum over the ranks of one 8-byte value per rank (a double or an int64), the same on
// every rank: the values travel as their bits (gathered as two fp32 words each, copied, never
// added on the wire) and every rank adds them in rank order. An all-reduce in fp32 would round a
// double to fp32 and an int64 count past 2^24; one in the backend's own order could differ
// between ranks.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace hoist::comm {

// Collective: every rank of `comm` passes its own value.
template <typename T>
StatusOr<T> SumOverRanks(Communicator& comm, T value) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, int64_t>,
                "an 8-byte value, sent as two 4-byte words");
  std::vector<T> all(static_cast<size_t>(comm.world_size()));
  HOIST_RETURN_IF_ERROR(comm.AllGather(&value, all.data(), 2, DType::kFloat32));
  T sum = 0;
  for (T v : all) sum += v;
  return sum;
}

}  // namespace hoist::comm
