#include "zero/moments_8bit.h"

#include <algorithm>

#include "core/check.h"
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

std::vector<OwnedPieceFrom> OwnedPiecesFrom(const PartitionPlan& state_plan, int unit, int64_t lo,
                                            int64_t hi) {
  std::vector<OwnedPieceFrom> pieces;
  int64_t block = 0;
  for (const OwnedPiece& piece : OwnedPieces(state_plan, unit)) {
    const int64_t begin = std::max(piece.begin, lo);
    const int64_t end = std::min(piece.end, hi);
    if (begin >= end) continue;
    HOIST_CHECK((begin - piece.begin) % kernels::cpu::kQuantBlockSize == 0)
        << "element " << begin << " of unit " << unit << " cuts a block of 8-bit codes";
    pieces.push_back({begin, end, piece.decay, block});
    block += kernels::cpu::QuantBlocks(end - begin);
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

Moments8bitIndex Moments8bitIndexAt(const PartitionPlan& state_plan,
                                    const Moments8bitLayout& layout, int unit, int64_t at) {
  const auto u = static_cast<size_t>(unit);
  Moments8bitIndex index;
  index.absmax = layout.absmax_offset[u];
  if (layout.code_offset[u] < 0) {
    index.fp32 = layout.fp32_offset[u] + at;
    // The codes of the 8-bit units before this one.
    index.code = layout.code_elements;
    for (size_t next = u + 1; next < layout.code_offset.size(); ++next) {
      if (layout.code_offset[next] >= 0) {
        index.code = layout.code_offset[next];
        break;
      }
    }
    return index;
  }
  index.code = layout.code_offset[u] + at;
  index.fp32 = layout.fp32_elements;
  for (size_t next = u + 1; next < layout.fp32_offset.size(); ++next) {
    if (layout.fp32_offset[next] >= 0) {
      index.fp32 = layout.fp32_offset[next];
      break;
    }
  }
  for (const OwnedPiece& piece : OwnedPieces(state_plan, unit)) {
    if (at >= piece.end) {
      index.absmax += kernels::cpu::QuantBlocks(piece.end - piece.begin);
    } else if (at > piece.begin) {
      HOIST_CHECK((at - piece.begin) % kernels::cpu::kQuantBlockSize == 0)
          << "element " << at << " of unit " << unit << " cuts a block of 8-bit codes";
      index.absmax += (at - piece.begin) / kernels::cpu::kQuantBlockSize;
    }
  }
  return index;
}

Moments8bitIndex Moments8bitBefore(const PartitionPlan& state_plan, const Moments8bitLayout& layout,
                                   int64_t split) {
  for (int u = 0; u < state_plan.num_units(); ++u) {
    if (state_plan.unit(u).shard_offset >= split) {
      return Moments8bitIndexAt(state_plan, layout, u, 0);
    }
  }
  return {layout.code_elements, layout.absmax_blocks, layout.fp32_elements};
}

namespace {

// The unit whose shard holds flat element x (0 <= x < total_shard).
int UnitAt(const PartitionPlan& state_plan, int64_t x) {
  for (int u = 0; u < state_plan.num_units(); ++u) {
    const UnitPartition& owned = state_plan.unit(u);
    if (x < owned.shard_offset + owned.shard) return u;
  }
  HOIST_CHECK(false) << "element " << x << " is past the shard";
  return -1;
}

// The cut nearest flat element x that does not split a block of codes: at or before it (`up`
// false) or at or after it.
int64_t BlockCut(const PartitionPlan& state_plan, const Moments8bitLayout& layout, int64_t x,
                 bool up) {
  if (x >= state_plan.total_shard()) return state_plan.total_shard();
  const int unit = UnitAt(state_plan, x);
  if (layout.code_offset[static_cast<size_t>(unit)] < 0) return x;
  const int64_t base = state_plan.unit(unit).shard_offset;
  const int64_t at = x - base;
  constexpr int64_t kBlock = kernels::cpu::kQuantBlockSize;
  for (const OwnedPiece& piece : OwnedPieces(state_plan, unit)) {
    if (at <= piece.begin || at >= piece.end) continue;
    const int64_t down = piece.begin + (at - piece.begin) / kBlock * kBlock;
    if (down == at || !up) return base + down;
    return base + std::min(piece.end, down + kBlock);
  }
  return x;
}

}  // namespace

std::vector<offload::SwapArray> Moments8bitSwapArrays(const PartitionPlan& state_plan,
                                                      const Moments8bitLayout& layout,
                                                      int64_t sub_group_size) {
  const int64_t total = state_plan.total_shard();
  std::vector<int64_t> cuts = {0};
  while (cuts.back() < total) {
    const int64_t start = cuts.back();
    const int64_t target = start + std::min(std::max<int64_t>(sub_group_size, 1), total - start);
    const int64_t before = BlockCut(state_plan, layout, target, /*up=*/false);
    cuts.push_back(before > start ? before : BlockCut(state_plan, layout, target, /*up=*/true));
  }
  std::vector<offload::SwapArray> arrays(kSwapArrays);
  const int64_t sizes[kSwapArrays] = {4, 1, 1, 4, 4, 4, 4};
  for (int a = 0; a < kSwapArrays; ++a) arrays[static_cast<size_t>(a)].element_bytes = sizes[a];
  for (int64_t x : cuts) {
    Moments8bitIndex index{layout.code_elements, layout.absmax_blocks, layout.fp32_elements};
    if (x < total) {
      const int unit = UnitAt(state_plan, x);
      index = Moments8bitIndexAt(state_plan, layout, unit, x - state_plan.unit(unit).shard_offset);
    }
    const int64_t firsts[kSwapArrays] = {
        x, index.code, index.code, index.absmax, index.absmax, index.fp32, index.fp32};
    for (int a = 0; a < kSwapArrays; ++a)
      arrays[static_cast<size_t>(a)].bounds.push_back(firsts[a]);
  }
  return arrays;
}

}  // namespace hoist::zero
