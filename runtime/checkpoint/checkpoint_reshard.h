// Reading this rank's shard of the optimizer states (fp32 master weights, Adam's m and v) from a
// checkpoint that another partition wrote: another world size, another ZeRO stage, states that
// were on the device, in host memory or on NVMe. A checkpoint holds, per rank, that rank's shard
// of the states in the engine's flat order (zero/partition.h), or at stage 0 the whole state in
// rank 0's shard; the partition is a function of the model's units and the number of ranks the
// states were split over, so the manifest's world_size and zero_stage recompute it.
//
// Each rank reads only the ranges of the saved shards that overlap its own new shard, at most a
// piece at a time (Fill), so its extra memory is the piece it is asked for. The checksums are
// checked by streaming the saved shards' state blobs through once, split between the new ranks
// (VerifyShare), before any range read from them is used.
//
// Not thread-safe; blocks on disk reads. Owns the shard files it opened.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"
#include "runtime/checkpoint/checkpoint.h"
#include "zero/partition.h"

namespace hoist::runtime {

// The number of ranks the optimizer states of a job of `world_size` ranks at `zero_stage` are
// split over: 1 at stage 0 (every rank holds them whole; rank 0 writes them), else world_size.
inline int StatePartitionWorld(int world_size, int zero_stage) {
  return zero_stage == 0 ? 1 : world_size;
}

class StateReshard {
 public:
  // For the committed step `step_dir`, written by `saved_world_size` ranks at `saved_stage`, read
  // into `target`, this rank's state plan (which must outlive this object). The units of both
  // partitions are target's: the run identity pins the model. Opens nothing yet.
  static StatusOr<StateReshard> Create(std::string step_dir, int saved_world_size, int saved_stage,
                                       const zero::PartitionPlan& target, FileSystem& fs);

  // The number of saved shards that hold states.
  int saved_shards() const { return saved_.world_size(); }

  // Checks the checksums of the state blobs of the saved shards k with k % world == rank, reading
  // each through in pieces. Ok, or the error of the first one that is missing (NotFound naming
  // the file), of the wrong size or damaged (DataLoss naming the blob and the file).
  Status VerifyShare(int rank, int world);

  // Fills elements [begin, begin + count) of this rank's flat state shard (target coordinates)
  // of master, m and v from the saved shards; padding elements are zero.
  Status Fill(int64_t begin, int64_t count, float* master, float* m, float* v);

 private:
  StateReshard(std::string step_dir, FileSystem* fs, const zero::PartitionPlan* target,
               zero::PartitionPlan saved);
  // The reader of saved shard `k`, opened on first use.
  StatusOr<const CheckpointReader*> Shard(int k);
  // Elements [first, first + count) of the unit `unit`'s real elements, from the saved shards.
  Status ReadUnitRange(int unit, int64_t first, int64_t count, float* master, float* m, float* v);

  std::string step_dir_;
  FileSystem* fs_;
  const zero::PartitionPlan* target_;
  zero::PartitionPlan saved_;  // rank 0's plan of the saved partition (offsets are every rank's)
  std::vector<std::unique_ptr<CheckpointReader>> shards_;  // by saved rank; null until opened
};

}  // namespace hoist::runtime
