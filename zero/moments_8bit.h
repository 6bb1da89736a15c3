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

Moments8bitLayout Moments8bitLayoutFor(const PartitionPlan& state_plan, int64_t min_8bit_size);

}  // namespace hoist::zero
