// GatherBook: the bookkeeping of the stage-3 parameter gatherer and the rules it decides by. Per
// unit: how many holds the model has on it (AcquireParams without its ReleaseParams yet) and
// whether a gather of it has started; the elements of gathered units alive; and which unit's
// offloaded shard occupies the device staging until its gather is waited for. ZeroEngine gathers
// by these rules, and the memory estimate (zero/memory_estimate.cc) replays the model's calls
// through the same rules with bytes instead of buffers: one set of decisions, so the estimate
// cannot drift from the engine.
//
// Pure bookkeeping: no memory, no collectives. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "zero/partition.h"
#include "zero/zero_options.h"

namespace hoist::zero {

class GatherBook {
 public:
  // `on_nvme`: per unit, whether its offloaded shard is in the NVMe file (ParamShards::UnitsOnNvme;
  // empty: none). `plan` and `options` must outlive the book.
  GatherBook(const PartitionPlan& plan, const ZeroOptions& options, std::vector<bool> on_nvme);

  // Stage 3 and not persistent: gathered before use, freed after.
  bool sharded(int unit) const { return sharded_[static_cast<size_t>(unit)]; }
  bool gathering(int unit) const { return gathering_[static_cast<size_t>(unit)]; }
  bool on_nvme(int unit) const { return on_nvme_[static_cast<size_t>(unit)]; }
  int holds(int unit) const { return holds_[static_cast<size_t>(unit)]; }
  // Elements of the gathered units alive (started and not dropped).
  int64_t live() const { return live_; }
  // The unit whose shard the staging holds for a gather not yet waited for (-1: none).
  int staged_unit() const { return staged_unit_; }

  // AcquireParams: one more hold; true for the first, when the unit is to be served (a sharded
  // one gathered now, unless gathering() already).
  bool Hold(int unit);
  // ReleaseParams: one hold less (there must be one); true for the last, when a gathered copy
  // is to be freed (Dropped).
  bool Unhold(int unit);

  // What Prefetch(unit) does: nothing (not sharded, gathered or held already, the staging busy
  // with another's shard, or past stage3_prefetch_bucket_size / stage3_max_live_parameters),
  // read the shard ahead from NVMe (its gather starts at AcquireParams), or start its gather.
  enum class Prefetch { kNothing, kReadAhead, kGather };
  Prefetch PrefetchAction(int unit) const;

  // The unit's offloaded shard went up into the device staging (parameter offload on an
  // accelerator: one staging buffer, so another shard's gather is not prefetched meanwhile).
  void Staged(int unit) { staged_unit_ = unit; }
  // The staging no longer holds the unit's shard (its gather waited for, or never started).
  void Unstaged(int unit) {
    if (staged_unit_ == unit) staged_unit_ = -1;
  }
  // A gather of the unit started.
  void Started(int unit);
  // Its gathered copy freed (after use, or dropped unused before the weights change).
  void Dropped(int unit);
  // The units gathered ahead and not held: dropped before an optimizer step.
  std::vector<int> PrefetchedNotHeld() const;

 private:
  const PartitionPlan& plan_;
  const ZeroOptions& options_;
  std::vector<bool> sharded_, on_nvme_, gathering_;
  std::vector<int> holds_;
  int64_t live_ = 0;
  int staged_unit_ = -1;
};

}  // namespace hoist::zero
