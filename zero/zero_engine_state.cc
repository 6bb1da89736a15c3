// ZeroEngine's states in and out: the fp32 weights gathered for export, and this rank's shard of
// the optimizer states read for a checkpoint and restored from one, whole or (states on NVMe) a
// sub-group at a time.
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "core/check.h"
#include "zero/zero_engine.h"

namespace hoist::zero {

StatusOr<std::vector<float>> ZeroEngine::GatherFullParams() {
  HOIST_RETURN_IF_ERROR(status_);
  if (options_.frozen) {
    return FailedPreconditionError(
        "GatherFullParams of frozen weights: they are the base checkpoint's, unchanged (read them "
        "from model.init_from)");
  }
  // NVMe: this rank's master shard read back first (flat, state plan layout).
  std::vector<float> swapped;
  if (swapper() != nullptr) {
    swapped.resize(static_cast<size_t>(state_plan_.total_shard()));
    HOIST_RETURN_IF_ERROR(AgreeOnFailure(swapper()->ForEachSubGroupView(
        offload::StateSwapper::Access::kRead,
        [&](int64_t, std::span<const offload::SwapPiece> pieces) {
          std::memcpy(swapped.data() + pieces[0].first, pieces[0].data,
                      static_cast<size_t>(pieces[0].bytes()));
          return Status::Ok();
        })));
  }
  // Otherwise the master shard is read down from where it lives, unit by unit.
  auto read_master = [&](int u, float* out, int64_t count) -> Status {
    if (swapper() != nullptr) {
      std::memcpy(out, swapped.data() + state_plan_.unit(u).shard_offset,
                  static_cast<size_t>(count) * sizeof(float));
      return Status::Ok();
    }
    HOIST_RETURN_IF_ERROR(StateCopy(out, master(u), count * static_cast<int64_t>(sizeof(float)),
                                    /*to_host=*/true, u));
    return Sync();
  };
  std::vector<float> out;
  out.reserve(static_cast<size_t>(plan_.total_real()));
  std::vector<float> unit;
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    unit.assign(static_cast<size_t>(owned.padded), 0.0f);
    if (state_plan_.world_size() == 1) {
      HOIST_RETURN_IF_ERROR(read_master(u, unit.data(), owned.size));
    } else {
      std::vector<float> shard(static_cast<size_t>(owned.shard), 0.0f);
      HOIST_RETURN_IF_ERROR(read_master(u, shard.data(), owned.owned_real));
      HOIST_RETURN_IF_ERROR(
          comm_->AllGather(shard.data(), unit.data(), owned.shard, DType::kFloat32));
    }
    out.insert(out.end(), unit.begin(), unit.begin() + owned.size);
  }
  return out;
}

Status ZeroEngine::ReadState(float* master_out, float* m_out, float* v_out) const {
  if (options_.frozen) return FailedPreconditionError("frozen weights have no optimizer states");
  if (swapper() != nullptr) {
    // The file holds zeros in the padding, as the outputs must.
    return AgreeOnFailure(swapper()->ForEachSubGroupView(
        offload::StateSwapper::Access::kRead,
        [&](int64_t, std::span<const offload::SwapPiece> pieces) {
          const int64_t begin = pieces[0].first;
          std::memcpy(master_out + begin, pieces[0].data, static_cast<size_t>(pieces[0].bytes()));
          return states_->SwappedMomentsToFloat(pieces, m_out + begin, v_out + begin);
        }));
  }
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    float* dst = master_out + owned.shard_offset;
    std::memset(dst, 0, static_cast<size_t>(owned.shard) * sizeof(float));
    HOIST_RETURN_IF_ERROR(StateCopy(dst, master(u),
                                    owned.owned_real * static_cast<int64_t>(sizeof(float)),
                                    /*to_host=*/true, u));
  }
  return states_->ReadMoments(m_out, v_out, [this] { return Sync(); });
}

Status ZeroEngine::RestoreState(const float* master_in, const float* m_in, const float* v_in,
                                int64_t step_count) {
  if (options_.frozen) return FailedPreconditionError("frozen weights have no optimizer states");
  HOIST_RETURN_IF_ERROR(DropPrefetchedGathers());  // of the weights replaced here
  const DType type = options_.compute_type;
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    const float* weights = master_in + owned.shard_offset;
    const int64_t bytes = owned.owned_real * static_cast<int64_t>(sizeof(float));
    if (swapper() == nullptr && (param_shards_ != nullptr || master(u) != owned_params(u))) {
      HOIST_RETURN_IF_ERROR(StateCopy(master(u), weights, bytes, /*to_host=*/false, u));
    }
    // The model's copy of the owned range (for fp32 on the device, the master itself).
    const Status stored = StoreFromHost(BeginOwnedWrite(u), type, weights, owned.owned_real);
    EndOwnedWrite(u);  // whatever the store returned: a write left open would hold the staging
    HOIST_RETURN_IF_ERROR(stored);
  }
  HOIST_RETURN_IF_ERROR(Sync());
  HOIST_RETURN_IF_ERROR(AgreeOnFailure(FinishOwnedWrites()));
  if (swapper() != nullptr) {
    HOIST_RETURN_IF_ERROR(AgreeOnFailure(swapper()->ForEachSubGroupView(
        offload::StateSwapper::Access::kWrite,
        [&](int64_t, std::span<const offload::SwapPiece> pieces) {
          const int64_t begin = pieces[0].first;
          std::memcpy(pieces[0].data, master_in + begin, static_cast<size_t>(pieces[0].bytes()));
          return states_->SwappedMomentsFromFloat(pieces, m_in + begin, v_in + begin);
        })));
  } else {
    HOIST_RETURN_IF_ERROR(states_->WriteMoments(m_in, v_in, [this] { return Sync(); }));
  }
  step_count_ = step_count;
  HOIST_RETURN_IF_ERROR(GatherUpdatedParams());
  return AgreeOnDeferredErrors();
}

Status ZeroEngine::ReadStateInPieces(const StatePiece& visit) const {
  if (options_.frozen) return FailedPreconditionError("frozen weights have no optimizer states");
  if (swapper() == nullptr) {
    // Resident states: the shard in one piece.
    const auto n = static_cast<size_t>(state_elements());
    std::vector<float> master(n), m(n), v(n);
    HOIST_RETURN_IF_ERROR(ReadState(master.data(), m.data(), v.data()));
    return visit(0, state_elements(), master.data(), m.data(), v.data());
  }
  std::vector<float> m, v;  // 8-bit: the sub-group's moments as fp32
  return AgreeOnFailure(swapper()->ForEachSubGroupView(
      offload::StateSwapper::Access::kRead,
      [&](int64_t, std::span<const offload::SwapPiece> pieces) {
        const int64_t begin = pieces[0].first, count = pieces[0].count;
        if (!options_.adam.eight_bit) {
          return visit(begin, count, pieces[0].floats(), pieces[1].floats(), pieces[2].floats());
        }
        m.resize(static_cast<size_t>(count));
        v.resize(static_cast<size_t>(count));
        HOIST_RETURN_IF_ERROR(states_->SwappedMomentsToFloat(pieces, m.data(), v.data()));
        return visit(begin, count, pieces[0].floats(), m.data(), v.data());
      }));
}

Status ZeroEngine::RestoreStateInPieces(const StatePiece& fill, int64_t step_count) {
  if (options_.frozen) return FailedPreconditionError("frozen weights have no optimizer states");
  if (swapper() == nullptr) {
    // Resident states: the shard in one piece, restored once every rank has its own.
    const auto n = static_cast<size_t>(state_elements());
    std::vector<float> master(n), m(n), v(n);
    HOIST_RETURN_IF_ERROR(
        AgreeOnFailure(fill(0, state_elements(), master.data(), m.data(), v.data())));
    return RestoreState(master.data(), m.data(), v.data(), step_count);
  }
  HOIST_RETURN_IF_ERROR(DropPrefetchedGathers());  // of the weights replaced here
  const DType type = options_.compute_type;
  std::vector<float> m, v;  // 8-bit: the sub-group's moments as fp32, requantized after
  Status written = swapper()->ForEachSubGroupView(
      offload::StateSwapper::Access::kWrite,
      [&](int64_t, std::span<const offload::SwapPiece> pieces) {
        const int64_t begin = pieces[0].first, count = pieces[0].count;
        float* master = pieces[0].floats();
        if (!options_.adam.eight_bit) {
          HOIST_RETURN_IF_ERROR(fill(begin, count, master, pieces[1].floats(), pieces[2].floats()));
        } else {
          m.resize(static_cast<size_t>(count));
          v.resize(static_cast<size_t>(count));
          HOIST_RETURN_IF_ERROR(fill(begin, count, master, m.data(), v.data()));
          HOIST_RETURN_IF_ERROR(states_->SwappedMomentsFromFloat(pieces, m.data(), v.data()));
        }
        // The model's copy of every unit whose shard overlaps this piece.
        for (int u = 0; u < plan_.num_units(); ++u) {
          const UnitPartition& owned = state_plan_.unit(u);
          const int64_t lo = std::max(begin, owned.shard_offset);
          const int64_t hi = std::min(begin + count, owned.shard_offset + owned.shard);
          if (lo >= hi) continue;
          void* compute = OpenOwnedWrite(u);
          const int64_t real_hi = std::min(hi, owned.shard_offset + owned.owned_real);
          if (real_hi > lo) {
            HOIST_RETURN_IF_ERROR(StoreFromHost(ElementPtr(compute, type, lo - owned.shard_offset),
                                                type, master + (lo - begin), real_hi - lo));
          }
        }
        return Sync();  // the swapper writes the sub-group out once this returns
      });
  CloseOwnedWrite();
  Status stored = FinishOwnedWrites();
  HOIST_RETURN_IF_ERROR(AgreeOnFailure(written.ok() ? stored : written));
  step_count_ = step_count;
  HOIST_RETURN_IF_ERROR(GatherUpdatedParams());
  return AgreeOnDeferredErrors();
}

}  // namespace hoist::zero
