// Where an 8-bit AdamW (bitsandbytes' block-wise AdamW8bit) keeps the moments of this rank's
// shard. A unit of at least min_8bit_size elements (the whole unit's size, so the choice is the
// same on every rank and at every stage, as bitsandbytes decides per tensor) keeps m and v as
// one byte of code each per element of its owned shard, plus one fp32 absmax each per block of
// kQuantBlockSize; a smaller unit keeps fp32 moments. The blocks start afresh in every
// weight-decay segment of the owned range (AdamW's pieces: for a unit made of tensors, a tensor).
//
// Pure functions of the plan; the engine allocates by this layout and the estimate adds it up.
#pragma once

#include <cstdint>
#include <vector>

#include "offload/state_swapper.h"
#include "zero/partition.h"

namespace hoist::zero {

struct Moments8bitLayout {
  // Per unit: the unit's first code in the code arrays (-1: fp32 moments), first absmax in the
  // absmax arrays, and first element in the fp32 moment arrays (-1: 8-bit).
  std::vector<int64_t> code_offset, absmax_offset, fp32_offset;
  int64_t code_elements = 0;  // bytes of each code array (sum of the 8-bit units' shards)
  int64_t absmax_blocks = 0;  // floats of each absmax array
  int64_t fp32_elements = 0;  // floats of each fp32 moment array (the small units' shards)
};

// The pieces of a unit's owned range that the optimizer updates one at a time: its weight-decay
// segments cut to [owned_begin, owned_begin + owned_real), in owned-range coordinates.
struct OwnedPiece {
  int64_t begin = 0, end = 0;
  bool decay = false;
};
std::vector<OwnedPiece> OwnedPieces(const PartitionPlan& state_plan, int unit);
// The same cut to [lo, hi), lo not cutting a block of 8-bit codes, each with its first block
// counted from lo's (`block`).
struct OwnedPieceFrom {
  int64_t begin = 0, end = 0;
  bool decay = false;
  int64_t block = 0;
};
std::vector<OwnedPieceFrom> OwnedPiecesFrom(const PartitionPlan& state_plan, int unit, int64_t lo,
                                            int64_t hi);

Moments8bitLayout Moments8bitLayoutFor(const PartitionPlan& state_plan, int64_t min_8bit_size);

// Where element `at` of `unit`'s owned shard (0 <= at <= shard) falls in the layout's arrays:
// how many codes, absmaxes and fp32 moments come before it. `at` must not cut a block: it is a
// block boundary of its weight-decay piece, a piece's end, or in the shard's padding, or the
// unit keeps fp32 moments.
struct Moments8bitIndex {
  int64_t code = 0, absmax = 0, fp32 = 0;
};
Moments8bitIndex Moments8bitIndexAt(const PartitionPlan& state_plan,
                                    const Moments8bitLayout& layout, int unit, int64_t at);

// Codes, absmaxes and fp32 moments of the units before the first whose shard starts at or past
// flat element `split` (all of them when none does): the device part of a partial offload,
// whose arrays the offloaded part's follow.
Moments8bitIndex Moments8bitBefore(const PartitionPlan& state_plan, const Moments8bitLayout& layout,
                                   int64_t split);

// The 8-bit states on NVMe (offload/state_swapper.h): this rank's shard as seven arrays, in this
// order, cut into sub-groups of about `sub_group_size` elements of the master weights (flat,
// state plan order) that never cut a block of codes (a cut inside a piece moves to the block
// boundary before it, or after it where that one is the sub-group's start).
enum Moments8bitSwapArray {
  kSwapMaster,   // fp32 master weights, per element of the shard
  kSwapCodesM,   // 1 byte per element of the 8-bit units' shards
  kSwapCodesV,   //
  kSwapAbsmaxM,  // fp32, per block
  kSwapAbsmaxV,  //
  kSwapM32,      // fp32 moments of the units below min_8bit_size
  kSwapV32,      //
  kSwapArrays
};
std::vector<offload::SwapArray> Moments8bitSwapArrays(const PartitionPlan& state_plan,
                                                      const Moments8bitLayout& layout,
                                                      int64_t sub_group_size);

}  // namespace hoist::zero
