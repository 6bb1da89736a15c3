// PartitionPlan: how the units of a model's parameters are split across the ranks of a ZeRO
// group. Each unit is padded to a multiple of the world size and cut into world-size equal
// shards; rank r owns elements [r * shard, (r + 1) * shard) of every unit (the padding, at the
// end of the unit, is owned by the last ranks and always holds zeros). A rank's shards of all
// units sit back to back in its shard buffers, in unit order.
//
// Partitioning per unit (rather than one flat cut over the whole model) lets stage 3 gather and
// release one unit at a time and lets stage 2 reduce a unit's gradient as soon as its backward
// pass is done; it costs at most world_size - 1 padding elements per unit.
//
// Plain value type; thread-safe to share once built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace hoist::zero {

// A range of a unit's elements and whether AdamW's weight decay applies to it.
struct ParamSegment {
  int64_t begin = 0;
  int64_t end = 0;
  bool decay = false;
};

// One unit of parameters: its size in elements and its segments, which cover [0, size) in order
// without gaps.
struct UnitSpec {
  std::string name;
  int64_t size = 0;
  std::vector<ParamSegment> segments;
  // A transformer block: its decayed segments are its matmul weights, which a frozen 4-bit base
  // quantizes (zero/quantized_store.h); embeddings, heads, norms and biases stay in 16 bits.
  bool quantizable = false;
};

struct UnitPartition {
  int64_t size = 0;          // real elements
  int64_t padded = 0;        // size rounded up to a multiple of the world size
  int64_t shard = 0;         // padded / world size: every rank's shard of this unit
  int64_t owned_begin = 0;   // rank * shard, in the unit's coordinates
  int64_t owned_real = 0;    // elements of the shard that are real (not padding)
  int64_t shard_offset = 0;  // where the shard starts in the rank's shard buffers
  int64_t full_offset = 0;   // where the padded unit starts in a whole-model buffer
};

class PartitionPlan {
 public:
  // `units` must be non-empty with positive sizes and valid segments; world_size >= 1,
  // 0 <= rank < world_size.
  static StatusOr<PartitionPlan> Build(std::vector<UnitSpec> units, int world_size, int rank);

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  const UnitSpec& spec(int unit) const { return units_[unit]; }
  const UnitPartition& unit(int unit) const { return parts_[unit]; }

  int64_t total_real() const { return total_real_; }      // sum of sizes (the model's Ψ)
  int64_t total_padded() const { return total_padded_; }  // sum of padded sizes
  int64_t total_shard() const { return total_shard_; }    // sum of shards: one rank's share
  int64_t largest_unit() const { return largest_padded_; }

 private:
  std::vector<UnitSpec> units_;
  std::vector<UnitPartition> parts_;
  int world_size_ = 1;
  int rank_ = 0;
  int64_t total_real_ = 0, total_padded_ = 0, total_shard_ = 0, largest_padded_ = 0;
};

}  // namespace hoist::zero
