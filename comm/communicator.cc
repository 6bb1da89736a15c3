#include "comm/communicator.h"

#include "core/check.h"

namespace hoist::comm {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

}  // namespace hoist::comm
