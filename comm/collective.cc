#include "comm/collective.h"

#include <sstream>

#include "comm/half.h"

namespace hoist::comm {

const char* CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "AllReduce";
    case CollectiveOp::kReduceScatter: return "ReduceScatter";
    case CollectiveOp::kAllGather: return "AllGather";
    case CollectiveOp::kBroadcast: return "Broadcast";
    case CollectiveOp::kBarrier: return "Barrier";
  }
  return "unknown";
}

int64_t CallBytes(const CollectiveCall& call, int world_size) {
  int64_t elements = call.count;
  if (call.op == CollectiveOp::kReduceScatter || call.op == CollectiveOp::kAllGather) {
    elements *= world_size;
  }
  return elements * static_cast<int64_t>(DTypeSize(call.type));
}

std::string Describe(const CollectiveCall& call, int world_size) {
  std::ostringstream out;
  out << CollectiveOpName(call.op);
  if (call.op == CollectiveOp::kBarrier) return out.str();
  out << "(";
  if (call.op == CollectiveOp::kAllReduce || call.op == CollectiveOp::kReduceScatter) {
    out << ReduceOpName(call.reduce) << ", ";
  }
  if (call.op == CollectiveOp::kBroadcast) out << "root " << call.root << ", ";
  out << call.count << " x " << DTypeName(call.type) << ", " << CallBytes(call, world_size)
      << " bytes)";
  return out.str();
}

Status ValidateCall(const CollectiveCall& call, int rank, int world_size, const void* send,
                    const void* recv) {
  const std::string where =
      std::string(CollectiveOpName(call.op)) + " on rank " + std::to_string(rank);
  if (call.count < 0) {
    return InvalidArgumentError(where + ": negative count " + std::to_string(call.count));
  }
  if (call.op == CollectiveOp::kBroadcast && (call.root < 0 || call.root >= world_size)) {
    return InvalidArgumentError(where + ": root " + std::to_string(call.root) +
                                " is outside a group of " + std::to_string(world_size));
  }
  if (call.op != CollectiveOp::kBarrier && call.count > 0 && (send == nullptr || recv == nullptr)) {
    return InvalidArgumentError(where + ": null buffer for " + std::to_string(call.count) +
                                " elements");
  }
  return Status::Ok();
}

float LoadElement(const void* base, int64_t i, DType type) {
  switch (type) {
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
  }
  return 0.0f;
}

void StoreElement(void* base, int64_t i, DType type, float value) {
  switch (type) {
    case DType::kFloat32: static_cast<float*>(base)[i] = value; return;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[i] = FloatToBFloat16(value); return;
    case DType::kFloat16: static_cast<uint16_t*>(base)[i] = FloatToHalf(value); return;
  }
}

namespace {

// The loop specialised per type so the compiler can vectorise the fp32 case.
template <typename Load, typename Store>
void ReduceLoop(const void* const* inputs, int n, void* out, int64_t count, ReduceOp op, Load load,
                Store store) {
  for (int64_t i = 0; i < count; ++i) {
    float sum = load(inputs[0], i);
    for (int r = 1; r < n; ++r) sum += load(inputs[r], i);
    // Division, not multiplication by 1/n: the contract is sum / n, rounded once.
    if (op == ReduceOp::kAvg) sum /= static_cast<float>(n);
    store(out, i, sum);
  }
}

}  // namespace

void ReduceInRankOrder(const void* const* inputs, int n, void* out, int64_t count, DType type,
                       ReduceOp op) {
  switch (type) {
    case DType::kFloat32:
      ReduceLoop(
          inputs, n, out, count, op,
          [](const void* b, int64_t i) { return static_cast<const float*>(b)[i]; },
          [](void* b, int64_t i, float v) { static_cast<float*>(b)[i] = v; });
      return;
    case DType::kBFloat16:
      ReduceLoop(
          inputs, n, out, count, op,
          [](const void* b, int64_t i) {
            return BFloat16ToFloat(static_cast<const uint16_t*>(b)[i]);
          },
          [](void* b, int64_t i, float v) { static_cast<uint16_t*>(b)[i] = FloatToBFloat16(v); });
      return;
    case DType::kFloat16:
      ReduceLoop(
          inputs, n, out, count, op,
          [](const void* b, int64_t i) { return HalfToFloat(static_cast<const uint16_t*>(b)[i]); },
          [](void* b, int64_t i, float v) { static_cast<uint16_t*>(b)[i] = FloatToHalf(v); });
      return;
  }
}

}  // namespace hoist::comm
