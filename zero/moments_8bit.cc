#include "zero/moments_8bit.h"

#include <algorithm>

#include "kernels/cpu/blockwise_quant.h"

namespace hoist::zero {

std::vector<OwnedPiece> OwnedPieces(const PartitionPlan& state_plan, int unit) {
  const UnitPartition& owned = state_plan.unit(unit);
  std::vector<OwnedPiece> pieces;
  for (const ParamSegment& segment : state_plan.spec(unit).segments) {
    const int64_t begin = std::max(owned.owned_begin, segment.begin);
    const int64_t end = std::min(owned.owned_begin + owned.owned_real, segment.end);
    if (begin >= end) continue;
    pieces.push_back({begin - owned.owned_begin, end - owned.owned_begin, segment.decay});
  }
  return pieces;
}

Moments8bitLayout Moments8bitLayoutFor(const PartitionPlan& state_plan, int64_t min_8bit_size) {
  Moments8bitLayout layout;
  const int units = state_plan.num_units();
  layout.code_offset.assign(static_cast<size_t>(units), -1);
  layout.absmax_offset.assign(static_cast<size_t>(units), 0);
  layout.fp32_offset.assign(static_cast<size_t>(units), -1);
  for (int u = 0; u < units; ++u) {
    const UnitPartition& owned = state_plan.unit(u);
    const auto i = static_cast<size_t>(u);
    layout.absmax_offset[i] = layout.absmax_blocks;
    if (owned.size < min_8bit_size) {
      layout.fp32_offset[i] = layout.fp32_elements;
      layout.fp32_elements += owned.shard;
      continue;
    }
    layout.code_offset[i] = layout.code_elements;
    layout.code_elements += owned.shard;
    for (const OwnedPiece& piece : OwnedPieces(state_plan, u)) {
      layout.absmax_blocks += kernels::cpu::QuantBlocks(piece.end - piece.begin);
    }
  }
  return layout;
}

}  // namespace hoist::zero
