#include "runtime/checkpoint/checkpoint_reshard.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace hoist::runtime {
namespace {

constexpr const char* kStateBlobs[] = {"master", "adam_m", "adam_v"};

}  // namespace

StateReshard::StateReshard(std::string step_dir, FileSystem* fs, const zero::PartitionPlan* target,
                           zero::PartitionPlan saved)
    : step_dir_(std::move(step_dir)), fs_(fs), target_(target), saved_(std::move(saved)) {
  shards_.resize(static_cast<size_t>(saved_.world_size()));
}

StatusOr<StateReshard> StateReshard::Create(std::string step_dir, int saved_world_size,
                                            int saved_stage, const zero::PartitionPlan& target,
                                            FileSystem& fs) {
  std::vector<zero::UnitSpec> units;
  units.reserve(static_cast<size_t>(target.num_units()));
  for (int u = 0; u < target.num_units(); ++u) units.push_back(target.spec(u));
  // Every saved shard has the same size and the same unit offsets: rank 0's plan describes all.
  HOIST_ASSIGN_OR_RETURN(
      zero::PartitionPlan saved,
      zero::PartitionPlan::Build(std::move(units),
                                 StatePartitionWorld(saved_world_size, saved_stage), 0));
  return StateReshard(std::move(step_dir), &fs, &target, std::move(saved));
}

StatusOr<const CheckpointReader*> StateReshard::Shard(int k) {
  HOIST_CHECK(k >= 0 && k < saved_.world_size()) << k;
  std::unique_ptr<CheckpointReader>& shard = shards_[static_cast<size_t>(k)];
  if (shard == nullptr) {
    HOIST_ASSIGN_OR_RETURN(CheckpointReader opened, CheckpointReader::Open(step_dir_, k, *fs_));
    shard = std::make_unique<CheckpointReader>(std::move(opened));
  }
  return shard.get();
}

Status StateReshard::VerifyShare(int rank, int world) {
  const int64_t bytes = saved_.total_shard() * int64_t{sizeof(float)};
  for (int k = rank; k < saved_.world_size(); k += world) {
    HOIST_ASSIGN_OR_RETURN(const CheckpointReader* shard, Shard(k));
    for (const char* name : kStateBlobs) HOIST_RETURN_IF_ERROR(shard->Verify(name, bytes));
  }
  return Status::Ok();
}

Status StateReshard::ReadUnitRange(int unit, int64_t first, int64_t count, float* master, float* m,
                                   float* v) {
  const zero::UnitPartition& saved = saved_.unit(unit);
  const int64_t blob_bytes = saved_.total_shard() * int64_t{sizeof(float)};
  float* const outs[] = {master, m, v};
  for (int64_t e = first; e < first + count;) {
    // Saved rank k owned elements [k * shard, (k + 1) * shard) of the unit.
    const int k = static_cast<int>(e / saved.shard);
    const int64_t n = std::min(first + count, (k + 1) * saved.shard) - e;
    const int64_t offset = (saved.shard_offset + e - k * saved.shard) * int64_t{sizeof(float)};
    HOIST_ASSIGN_OR_RETURN(const CheckpointReader* shard, Shard(k));
    for (int b = 0; b < 3; ++b) {
      HOIST_RETURN_IF_ERROR(shard->ReadRange(kStateBlobs[b], blob_bytes, offset,
                                             outs[b] + (e - first), n * int64_t{sizeof(float)}));
    }
    e += n;
  }
  return Status::Ok();
}

Status StateReshard::Fill(int64_t begin, int64_t count, float* master, float* m, float* v) {
  const int64_t end = begin + count;
  HOIST_CHECK(begin >= 0 && count >= 0 && end <= target_->total_shard())
      << "[" << begin << ", " << end << ") of a shard of " << target_->total_shard();
  for (int u = 0; u < target_->num_units(); ++u) {
    const zero::UnitPartition& owned = target_->unit(u);
    const int64_t lo = std::max(begin, owned.shard_offset);
    const int64_t hi = std::min(end, owned.shard_offset + owned.shard);
    if (lo >= hi) continue;
    const int64_t real_hi = std::min(hi, owned.shard_offset + owned.owned_real);
    if (real_hi > lo) {
      const int64_t at = lo - begin;
      HOIST_RETURN_IF_ERROR(ReadUnitRange(u, owned.owned_begin + (lo - owned.shard_offset),
                                          real_hi - lo, master + at, m + at, v + at));
    }
    // The padding past the unit's real elements holds zeros, as the engine keeps it.
    for (int64_t i = std::max(lo, real_hi); i < hi; ++i) {
      master[i - begin] = m[i - begin] = v[i - begin] = 0.0f;
    }
  }
  return Status::Ok();
}

}  // namespace hoist::runtime
