// ZeroEngine's record of a collective in flight, shared by the files that implement the engine
// (zero_engine.cc, zero_engine_passes.cc); not part of its interface.
#pragma once

#include "comm/communicator.h"
#include "core/device.h"
#include "zero/zero_engine.h"

namespace hoist::zero {

// A collective in flight and the buffers it owns until it completes.
struct ZeroEngine::Pending {
  int unit = 0;
  Buffer send;                   // stage 2/3 reductions: the unit's gradient in comm_type, padded
  Buffer recv;                   // reductions: this rank's reduced shard (reduce-scatter)
  const void* result = nullptr;  // where the reduced shard is (recv, or inside send)
  Buffer gathered;               // stage 3 gathers: the whole unit in compute type, padded
  bool done = false;
  bool last = false;  // a reduction of the step's last backward pass (SetAccumulationBoundary)
  // Last, so destroyed first: a handle still running is waited for before its buffers go.
  comm::CommHandle handle;
};

}  // namespace hoist::zero
