// ZeroEngine's states in and out: the fp32 weights gathered for export, and this rank's shard of
// the optimizer states read for a checkpoint and restored from one, whole or (states on NVMe) a
// sub-group at a time.
#include <algorithm>
#include <cstring>
#include <span>

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
  if (swapper_ != nullptr) {
    swapped.resize(static_cast<size_t>(state_plan_.total_shard()));
    HOIST_RETURN_IF_ERROR(AgreeOnFailure(swapper_->ForEachSubGroup(
        offload::StateSwapper::Access::kRead,
        [&](int64_t begin, int64_t count, std::span<float* const> arrays) {
          std::memcpy(swapped.data() + begin, arrays[0],
                      static_cast<size_t>(count) * sizeof(float));
          return Status::Ok();
        })));
  }
  // Otherwise the master shard is read down from where it lives, unit by unit.
  auto read_master = [&](int u, float* out, int64_t count) -> Status {
    if (swapper_ != nullptr) {
      std::memcpy(out, swapped.data() + state_plan_.unit(u).shard_offset,
                  static_cast<size_t>(count) * sizeof(float));
      return Status::Ok();
    }
    HOIST_RETURN_IF_ERROR(StateCopy(out, master(u), count * static_cast<int64_t>(sizeof(float)),
                                    PartToHost(host_part(u)), host_part(u)));
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
  if (swapper_ != nullptr) {
    // The file holds zeros in the padding, as the outputs must.
    return AgreeOnFailure(swapper_->ForEachSubGroup(
        offload::StateSwapper::Access::kRead,
        [&](int64_t begin, int64_t count, std::span<float* const> arrays) {
          const auto bytes = static_cast<size_t>(count) * sizeof(float);
          std::memcpy(master_out + begin, arrays[0], bytes);
          std::memcpy(m_out + begin, arrays[1], bytes);
          std::memcpy(v_out + begin, arrays[2], bytes);
          return Status::Ok();
        }));
  }
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    float* dst = master_out + owned.shard_offset;
    std::memset(dst, 0, static_cast<size_t>(owned.shard) * sizeof(float));
    HOIST_RETURN_IF_ERROR(StateCopy(dst, master(u),
                                    owned.owned_real * static_cast<int64_t>(sizeof(float)),
                                    PartToHost(host_part(u)), host_part(u)));
  }
  if (options_.adam.eight_bit) return ReadMoments8bit(m_out, v_out);
  // The same flat layout whatever the split (a checkpoint resumes at any ratio).
  return CopyMoments(m_out, v_out, /*down=*/true);
}

Status ZeroEngine::RestoreState(const float* master_in, const float* m_in, const float* v_in,
                                int64_t step_count) {
  if (options_.frozen) return FailedPreconditionError("frozen weights have no optimizer states");
  const DType type = options_.compute_type;
  for (int u = 0; u < plan_.num_units(); ++u) {
    const UnitPartition& owned = state_plan_.unit(u);
    const float* weights = master_in + owned.shard_offset;
    const int64_t bytes = owned.owned_real * static_cast<int64_t>(sizeof(float));
    if (swapper_ == nullptr && (param_shards_ != nullptr || master(u) != owned_params(u))) {
      HOIST_RETURN_IF_ERROR(
          StateCopy(master(u), weights, bytes, PartFromHost(host_part(u)), host_part(u)));
    }
    // The model's copy of the owned range (for fp32 on the device, the master itself).
    HOIST_RETURN_IF_ERROR(StoreFromHost(BeginOwnedWrite(u), type, weights, owned.owned_real));
    EndOwnedWrite(u);
  }
  HOIST_RETURN_IF_ERROR(Sync());
  HOIST_RETURN_IF_ERROR(AgreeOnFailure(FinishOwnedWrites()));
  if (swapper_ != nullptr) {
    HOIST_RETURN_IF_ERROR(AgreeOnFailure(swapper_->ForEachSubGroup(
        offload::StateSwapper::Access::kWrite,
        [&](int64_t begin, int64_t count, std::span<float* const> arrays) {
          const auto bytes = static_cast<size_t>(count) * sizeof(float);
          std::memcpy(arrays[0], master_in + begin, bytes);
          std::memcpy(arrays[1], m_in + begin, bytes);
          std::memcpy(arrays[2], v_in + begin, bytes);
          return Status::Ok();
        })));
  } else if (options_.adam.eight_bit) {
    HOIST_RETURN_IF_ERROR(RestoreMoments8bit(m_in, v_in));
  } else {
    HOIST_RETURN_IF_ERROR(
        CopyMoments(const_cast<float*>(m_in), const_cast<float*>(v_in), /*down=*/false));
  }
  step_count_ = step_count;
  HOIST_RETURN_IF_ERROR(GatherUpdatedParams());
  return AgreeOnDeferredErrors();
}

Status ZeroEngine::CopyMoments(float* m, float* v, bool down) const {
  const int64_t split_bytes = split_ * static_cast<int64_t>(sizeof(float));
  const int64_t rest =
      state_plan_.total_shard() * static_cast<int64_t>(sizeof(float)) - split_bytes;
  const bool host = !states_on_device();
  auto copy = [&](float* host_side, float* state, int64_t bytes, bool host_part) -> Status {
    if (bytes == 0) return Status::Ok();
    return down ? StateCopy(host_side, state, bytes, PartToHost(host_part), host_part)
                : StateCopy(state, host_side, bytes, PartFromHost(host_part), host_part);
  };
  HOIST_RETURN_IF_ERROR(copy(m, split_m_.as<float>(), split_bytes, false));
  HOIST_RETURN_IF_ERROR(copy(v, split_v_.as<float>(), split_bytes, false));
  HOIST_RETURN_IF_ERROR(copy(m + split_, state_m_, rest, host));
  HOIST_RETURN_IF_ERROR(copy(v + split_, state_v_, rest, host));
  return Sync();
}

Status ZeroEngine::ReadStateInPieces(const StatePiece& visit) const {
  if (options_.frozen) return FailedPreconditionError("frozen weights have no optimizer states");
  HOIST_CHECK(swapper_ != nullptr) << "ReadStateInPieces needs the optimizer states on NVMe";
  return AgreeOnFailure(
      swapper_->ForEachSubGroup(offload::StateSwapper::Access::kRead,
                                [&](int64_t begin, int64_t count, std::span<float* const> arrays) {
                                  return visit(begin, count, arrays[0], arrays[1], arrays[2]);
                                }));
}

Status ZeroEngine::RestoreStateInPieces(const StatePiece& fill, int64_t step_count) {
  HOIST_CHECK(swapper_ != nullptr) << "RestoreStateInPieces needs the optimizer states on NVMe";
  const DType type = options_.compute_type;
  Status written = swapper_->ForEachSubGroup(
      offload::StateSwapper::Access::kWrite,
      [&](int64_t begin, int64_t count, std::span<float* const> arrays) {
        HOIST_RETURN_IF_ERROR(fill(begin, count, arrays[0], arrays[1], arrays[2]));
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
                                                type, arrays[0] + (lo - begin), real_hi - lo));
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
