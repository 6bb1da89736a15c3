// ZeroEngine's 8-bit AdamW (ZeroOptions::adam.eight_bit): the moments of this rank's shard as
// block-wise codes and absmaxes (zero/moments_8bit.h), zeroed, updated, and converted to and from
// the checkpoint's fp32 moments. A checkpoint holds the dequantized moments (the layout of a
// 32-bit run, so either optimizer resumes from either), and restoring requantizes them with
// absmaxes that reproduce them bit for bit (kernels/cpu/blockwise_quant.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/blockwise_quant.h"
#include "zero/zero_engine.h"

namespace hoist::zero {

namespace {

using kernels::cpu::DynamicMap;
using kernels::cpu::QuantBlocks;
using kernels::cpu::SignedDynamicMap;
using kernels::cpu::UnsignedDynamicMap;

}  // namespace

Status ZeroEngine::ZeroMoments8bit() {
  const kernels::CopyDirection up = StateFromHost();
  // m's zero is the signed map's middle code; v's is code 0.
  std::vector<uint8_t> codes(static_cast<size_t>(moments8_.code_elements),
                             kernels::cpu::QuantizeNearest(SignedDynamicMap(), 0.0f));
  HOIST_RETURN_IF_ERROR(StateCopy(state_qm_, codes.data(), moments8_.code_elements, up));
  HOIST_RETURN_IF_ERROR(Sync());
  std::fill(codes.begin(), codes.end(), kernels::cpu::QuantizeNearest(UnsignedDynamicMap(), 0.0f));
  HOIST_RETURN_IF_ERROR(StateCopy(state_qv_, codes.data(), moments8_.code_elements, up));
  HOIST_RETURN_IF_ERROR(Sync());
  const int64_t most = std::max(moments8_.absmax_blocks, moments8_.fp32_elements);
  const std::vector<float> zeros(static_cast<size_t>(most), 0.0f);
  const int64_t absmax_bytes = moments8_.absmax_blocks * static_cast<int64_t>(sizeof(float));
  const int64_t fp32_bytes = moments8_.fp32_elements * static_cast<int64_t>(sizeof(float));
  HOIST_RETURN_IF_ERROR(StateCopy(state_absmax_m_, zeros.data(), absmax_bytes, up));
  HOIST_RETURN_IF_ERROR(StateCopy(state_absmax_v_, zeros.data(), absmax_bytes, up));
  HOIST_RETURN_IF_ERROR(StateCopy(state_m_, zeros.data(), fp32_bytes, up));
  HOIST_RETURN_IF_ERROR(StateCopy(state_v_, zeros.data(), fp32_bytes, up));
  return Sync();
}

ZeroEngine::MomentsAt ZeroEngine::ResidentMoments(int unit) const {
  MomentsAt at;
  if (!options_.adam.eight_bit) {
    at.m = moment_at(state_m_, split_m_, unit);
    at.v = moment_at(state_v_, split_v_, unit);
    return at;
  }
  const auto u = static_cast<size_t>(unit);
  if (moments8_.code_offset[u] < 0) {
    at.m = state_m_ + moments8_.fp32_offset[u];
    at.v = state_v_ + moments8_.fp32_offset[u];
    return at;
  }
  at.qm = state_qm_ + moments8_.code_offset[u];
  at.qv = state_qv_ + moments8_.code_offset[u];
  at.absmax_m = state_absmax_m_ + moments8_.absmax_offset[u];
  at.absmax_v = state_absmax_v_ + moments8_.absmax_offset[u];
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
  const kernels::CopyDirection down = StateToHost();
  const int64_t fp32_bytes = moments8_.fp32_elements * static_cast<int64_t>(sizeof(float));
  const int64_t absmax_bytes = moments8_.absmax_blocks * static_cast<int64_t>(sizeof(float));
  std::vector<uint8_t> qm(static_cast<size_t>(moments8_.code_elements)), qv(qm.size());
  std::vector<float> am(static_cast<size_t>(moments8_.absmax_blocks)), av(am.size());
  std::vector<float> m32(static_cast<size_t>(moments8_.fp32_elements)), v32(m32.size());
  HOIST_RETURN_IF_ERROR(StateCopy(qm.data(), state_qm_, moments8_.code_elements, down));
  HOIST_RETURN_IF_ERROR(StateCopy(qv.data(), state_qv_, moments8_.code_elements, down));
  HOIST_RETURN_IF_ERROR(StateCopy(am.data(), state_absmax_m_, absmax_bytes, down));
  HOIST_RETURN_IF_ERROR(StateCopy(av.data(), state_absmax_v_, absmax_bytes, down));
  HOIST_RETURN_IF_ERROR(StateCopy(m32.data(), state_m_, fp32_bytes, down));
  HOIST_RETURN_IF_ERROR(StateCopy(v32.data(), state_v_, fp32_bytes, down));
  HOIST_RETURN_IF_ERROR(Sync());
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
      std::memcpy(m, m32.data() + at, static_cast<size_t>(owned.owned_real) * sizeof(float));
      std::memcpy(v, v32.data() + at, static_cast<size_t>(owned.owned_real) * sizeof(float));
      continue;
    }
    const auto codes = static_cast<size_t>(moments8_.code_offset[u]);
    auto block = static_cast<size_t>(moments8_.absmax_offset[u]);
    for (const OwnedPiece& piece : OwnedPieces(state_plan_, unit)) {
      const int64_t n = piece.end - piece.begin;
      const auto at = codes + static_cast<size_t>(piece.begin);
      kernels::cpu::DequantizeBlockwise(SignedDynamicMap(), qm.data() + at, am.data() + block, n,
                                        m + piece.begin);
      kernels::cpu::DequantizeBlockwise(UnsignedDynamicMap(), qv.data() + at, av.data() + block, n,
                                        v + piece.begin);
      block += static_cast<size_t>(QuantBlocks(n));
    }
  }
  return Status::Ok();
}

Status ZeroEngine::RestoreMoments8bit(const float* m_in, const float* v_in) {
  std::vector<uint8_t> qm(static_cast<size_t>(moments8_.code_elements)), qv(qm.size());
  std::vector<float> am(static_cast<size_t>(moments8_.absmax_blocks)), av(am.size());
  std::vector<float> m32(static_cast<size_t>(moments8_.fp32_elements)), v32(m32.size());
  for (int unit = 0; unit < plan_.num_units(); ++unit) {
    const auto u = static_cast<size_t>(unit);
    const UnitPartition& owned = state_plan_.unit(unit);
    const float* m = m_in + owned.shard_offset;
    const float* v = v_in + owned.shard_offset;
    if (moments8_.code_offset[u] < 0) {
      const auto at = static_cast<size_t>(moments8_.fp32_offset[u]);
      std::memcpy(m32.data() + at, m, static_cast<size_t>(owned.owned_real) * sizeof(float));
      std::memcpy(v32.data() + at, v, static_cast<size_t>(owned.owned_real) * sizeof(float));
      continue;
    }
    const auto codes = static_cast<size_t>(moments8_.code_offset[u]);
    auto block = static_cast<size_t>(moments8_.absmax_offset[u]);
    // The codes of the padding stay the zero codes (never read).
    std::fill(qm.begin() + static_cast<std::ptrdiff_t>(codes),
              qm.begin() + static_cast<std::ptrdiff_t>(codes + static_cast<size_t>(owned.shard)),
              kernels::cpu::QuantizeNearest(SignedDynamicMap(), 0.0f));
    for (const OwnedPiece& piece : OwnedPieces(state_plan_, unit)) {
      const int64_t n = piece.end - piece.begin;
      const auto at = codes + static_cast<size_t>(piece.begin);
      kernels::cpu::RequantizeBlockwise(SignedDynamicMap(), m + piece.begin, n, qm.data() + at,
                                        am.data() + block);
      kernels::cpu::RequantizeBlockwise(UnsignedDynamicMap(), v + piece.begin, n, qv.data() + at,
                                        av.data() + block);
      block += static_cast<size_t>(QuantBlocks(n));
    }
  }
  const kernels::CopyDirection up = StateFromHost();
  const int64_t fp32_bytes = moments8_.fp32_elements * static_cast<int64_t>(sizeof(float));
  const int64_t absmax_bytes = moments8_.absmax_blocks * static_cast<int64_t>(sizeof(float));
  HOIST_RETURN_IF_ERROR(StateCopy(state_qm_, qm.data(), moments8_.code_elements, up));
  HOIST_RETURN_IF_ERROR(StateCopy(state_qv_, qv.data(), moments8_.code_elements, up));
  HOIST_RETURN_IF_ERROR(StateCopy(state_absmax_m_, am.data(), absmax_bytes, up));
  HOIST_RETURN_IF_ERROR(StateCopy(state_absmax_v_, av.data(), absmax_bytes, up));
  HOIST_RETURN_IF_ERROR(StateCopy(state_m_, m32.data(), fp32_bytes, up));
  HOIST_RETURN_IF_ERROR(StateCopy(state_v_, v32.data(), fp32_bytes, up));
  return Sync();
}

}  // namespace hoist::zero
