// ZeroEngine's 8-bit AdamW (ZeroOptions::adam.eight_bit): the moments of this rank's shard as
// block-wise codes and absmaxes (zero/moments_8bit.h), zeroed, updated, and converted to and from
// the checkpoint's fp32 moments. A checkpoint holds the dequantized moments (the layout of a
// 32-bit run, so either optimizer resumes from either), and restoring requantizes them with
// absmaxes that reproduce them bit for bit (kernels/cpu/blockwise_quant.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/blockwise_quant.h"
#include "zero/zero_engine.h"

namespace hoist::zero {

namespace {

using kernels::cpu::DynamicMap;
using kernels::cpu::QuantBlocks;
using kernels::cpu::SignedDynamicMap;
using kernels::cpu::UnsignedDynamicMap;

}  // namespace

StatusOr<void*> ZeroEngine::AllocateStateArray(int64_t bytes, bool offloaded) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  const OptimizerOffload& offload = options_.offload_optimizer;
  if (offloaded && offload.pin_memory) {
    HOIST_ASSIGN_OR_RETURN(offload::PinnedBuffer buffer,
                           pool_->Allocate(bytes, Category::kOptimizer));
    pinned8_.push_back(std::move(buffer));
    return static_cast<void*>(pinned8_.back().data());
  }
  HOIST_CHECK(!offloaded || host_device_ != nullptr) << "an offloaded part without its host";
  Device& place = offloaded ? *host_device_ : *device_;
  HOIST_ASSIGN_OR_RETURN(Buffer buffer, place.Allocate(bytes, Category::kOptimizer));
  buffers8_.push_back(std::move(buffer));
  return buffers8_.back().data();
}

ZeroEngine::Moments8bitCopy::Moments8bitCopy(const Moments8bitLayout& layout)
    : qm(static_cast<size_t>(layout.code_elements)),
      qv(qm.size()),
      absmax_m(static_cast<size_t>(layout.absmax_blocks)),
      absmax_v(absmax_m.size()),
      m(static_cast<size_t>(layout.fp32_elements)),
      v(m.size()) {}

Status ZeroEngine::TransferMoments8bit(Moments8bitCopy& copy, bool down) const {
  const Moments8bitIndex ends[2] = {
      parts8_[1].first,
      {moments8_.code_elements, moments8_.absmax_blocks, moments8_.fp32_elements}};
  for (int part = 0; part < 2; ++part) {
    const bool offloaded = part == 1;
    const Moments8bitPart& arrays = parts8_[part];
    const Moments8bitIndex& first = arrays.first;
    // Part 0 is device memory, part 1 host memory (StateCopy's host part).
    const kernels::CopyDirection direction = down ? PartToHost(offloaded) : PartFromHost(offloaded);
    auto move = [&](void* state, void* host, int64_t bytes) -> Status {
      if (bytes == 0) return Status::Ok();
      return down ? StateCopy(host, state, bytes, direction, offloaded)
                  : StateCopy(state, host, bytes, direction, offloaded);
    };
    const int64_t codes = ends[part].code - first.code;
    const int64_t absmax = (ends[part].absmax - first.absmax) * int64_t{sizeof(float)};
    const int64_t fp32 = (ends[part].fp32 - first.fp32) * int64_t{sizeof(float)};
    HOIST_RETURN_IF_ERROR(move(arrays.qm, copy.qm.data() + first.code, codes));
    HOIST_RETURN_IF_ERROR(move(arrays.qv, copy.qv.data() + first.code, codes));
    HOIST_RETURN_IF_ERROR(move(arrays.absmax_m, copy.absmax_m.data() + first.absmax, absmax));
    HOIST_RETURN_IF_ERROR(move(arrays.absmax_v, copy.absmax_v.data() + first.absmax, absmax));
    HOIST_RETURN_IF_ERROR(move(arrays.m, copy.m.data() + first.fp32, fp32));
    HOIST_RETURN_IF_ERROR(move(arrays.v, copy.v.data() + first.fp32, fp32));
  }
  return Sync();
}

Status ZeroEngine::ZeroMoments8bit() {
  Moments8bitCopy zeros(moments8_);
  // m's zero is the signed map's middle code; v's is code 0.
  std::fill(zeros.qm.begin(), zeros.qm.end(),
            kernels::cpu::QuantizeNearest(SignedDynamicMap(), 0.0f));
  std::fill(zeros.qv.begin(), zeros.qv.end(),
            kernels::cpu::QuantizeNearest(UnsignedDynamicMap(), 0.0f));
  return TransferMoments8bit(zeros, /*down=*/false);
}

ZeroEngine::MomentsAt ZeroEngine::ResidentMoments(int unit) const {
  MomentsAt at;
  if (!options_.adam.eight_bit) {
    at.m = moment_at(state_m_, split_m_, unit);
    at.v = moment_at(state_v_, split_v_, unit);
    return at;
  }
  const auto u = static_cast<size_t>(unit);
  const Moments8bitPart& part = parts8_[host_part(unit) ? 1 : 0];
  if (moments8_.code_offset[u] < 0) {
    at.m = part.m + (moments8_.fp32_offset[u] - part.first.fp32);
    at.v = part.v + (moments8_.fp32_offset[u] - part.first.fp32);
    return at;
  }
  at.qm = part.qm + (moments8_.code_offset[u] - part.first.code);
  at.qv = part.qv + (moments8_.code_offset[u] - part.first.code);
  at.absmax_m = part.absmax_m + (moments8_.absmax_offset[u] - part.first.absmax);
  at.absmax_v = part.absmax_v + (moments8_.absmax_offset[u] - part.first.absmax);
  return at;
}

Status ZeroEngine::Update8bit(kernels::Backend* ops, const Stream& ops_stream, int unit, int64_t lo,
                              int64_t hi, float* master, const MomentsAt& moments,
                              const void* grads, void* copies, int64_t origin,
                              const kernels::AdamWStepScalars& h) {
  const DType type = options_.compute_type;
  if (moments8_.code_offset[static_cast<size_t>(unit)] < 0) {
    return ops->AdamW(
        AdamWPieces(unit, lo, hi, master, moments.m, moments.v, grads, copies, origin), type, type,
        h, ops_stream);
  }
  std::vector<kernels::AdamW8bitTensorRef> refs;
  for (const OwnedPieceFrom& piece : OwnedPiecesFrom(state_plan_, unit, lo, hi)) {
    kernels::AdamW8bitTensorRef& ref = refs.emplace_back();
    ref.param = master + (piece.begin - lo);
    ref.m = moments.qm + (piece.begin - lo);
    ref.v = moments.qv + (piece.begin - lo);
    ref.absmax_m = moments.absmax_m + piece.block;
    ref.absmax_v = moments.absmax_v + piece.block;
    ref.grad = ElementPtr(grads, type, piece.begin - origin);
    if (IsHalf(type)) ref.copy = ElementPtr(copies, type, piece.begin - origin);
    ref.n = piece.end - piece.begin;
    ref.weight_decay = piece.decay ? options_.adam.weight_decay : 0.0f;
  }
  return ops->AdamW8bit(refs, type, type, h, ops_stream);
}

Status ZeroEngine::ReadMoments8bit(float* m_out, float* v_out) const {
  Moments8bitCopy copy(moments8_);
  HOIST_RETURN_IF_ERROR(TransferMoments8bit(copy, /*down=*/true));
  const int64_t total = state_plan_.total_shard();
  std::memset(m_out, 0, static_cast<size_t>(total) * sizeof(float));
  std::memset(v_out, 0, static_cast<size_t>(total) * sizeof(float));
  for (int unit = 0; unit < plan_.num_units(); ++unit) {
    const auto u = static_cast<size_t>(unit);
    const UnitPartition& owned = state_plan_.unit(unit);
    float* m = m_out + owned.shard_offset;
    float* v = v_out + owned.shard_offset;
    if (moments8_.code_offset[u] < 0) {
      const auto at = static_cast<size_t>(moments8_.fp32_offset[u]);
      std::memcpy(m, copy.m.data() + at, static_cast<size_t>(owned.owned_real) * sizeof(float));
      std::memcpy(v, copy.v.data() + at, static_cast<size_t>(owned.owned_real) * sizeof(float));
      continue;
    }
    const auto codes = static_cast<size_t>(moments8_.code_offset[u]);
    auto block = static_cast<size_t>(moments8_.absmax_offset[u]);
    for (const OwnedPiece& piece : OwnedPieces(state_plan_, unit)) {
      const int64_t n = piece.end - piece.begin;
      const auto at = codes + static_cast<size_t>(piece.begin);
      kernels::cpu::DequantizeBlockwise(SignedDynamicMap(), copy.qm.data() + at,
                                        copy.absmax_m.data() + block, n, m + piece.begin);
      kernels::cpu::DequantizeBlockwise(UnsignedDynamicMap(), copy.qv.data() + at,
                                        copy.absmax_v.data() + block, n, v + piece.begin);
      block += static_cast<size_t>(QuantBlocks(n));
    }
  }
  return Status::Ok();
}

Status ZeroEngine::RestoreMoments8bit(const float* m_in, const float* v_in) {
  Moments8bitCopy copy(moments8_);  // v's zero code is 0: the padding's codes stay zero
  for (int unit = 0; unit < plan_.num_units(); ++unit) {
    const auto u = static_cast<size_t>(unit);
    const UnitPartition& owned = state_plan_.unit(unit);
    const float* m = m_in + owned.shard_offset;
    const float* v = v_in + owned.shard_offset;
    if (moments8_.code_offset[u] < 0) {
      const auto at = static_cast<size_t>(moments8_.fp32_offset[u]);
      std::memcpy(copy.m.data() + at, m, static_cast<size_t>(owned.owned_real) * sizeof(float));
      std::memcpy(copy.v.data() + at, v, static_cast<size_t>(owned.owned_real) * sizeof(float));
      continue;
    }
    const auto codes = static_cast<size_t>(moments8_.code_offset[u]);
    auto block = static_cast<size_t>(moments8_.absmax_offset[u]);
    // The codes of the padding stay the zero codes (never read).
    std::fill(
        copy.qm.begin() + static_cast<std::ptrdiff_t>(codes),
        copy.qm.begin() + static_cast<std::ptrdiff_t>(codes + static_cast<size_t>(owned.shard)),
        kernels::cpu::QuantizeNearest(SignedDynamicMap(), 0.0f));
    for (const OwnedPiece& piece : OwnedPieces(state_plan_, unit)) {
      const int64_t n = piece.end - piece.begin;
      const auto at = codes + static_cast<size_t>(piece.begin);
      kernels::cpu::RequantizeBlockwise(SignedDynamicMap(), m + piece.begin, n, copy.qm.data() + at,
                                        copy.absmax_m.data() + block);
      kernels::cpu::RequantizeBlockwise(UnsignedDynamicMap(), v + piece.begin, n,
                                        copy.qv.data() + at, copy.absmax_v.data() + block);
      block += static_cast<size_t>(QuantBlocks(n));
    }
  }
  return TransferMoments8bit(copy, /*down=*/false);
}

}  // namespace hoist::zero
