#include "kernels/cpu/adamw8bit_step.h"

#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/adamw8bit_kernels.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/parallel_for.h"

namespace hoist::kernels::cpu {
namespace {

// Quantization blocks per parallel work item: 16384 elements, as adamw_step.cc's chunks.
constexpr size_t kBlocksPerChunk = 64;

const AdamW8bitKernels& KernelsFor(SimdLevel level) {
  HOIST_CHECK(AdamWFusedLevelAvailable(level))
      << "SIMD level " << SimdLevelName(level) << " is not available for AdamW on this CPU";
  switch (level) {
    case SimdLevel::kScalar: return scalar::kAdamW8bitKernels;
    case SimdLevel::kAvx2: return avx2::kAdamW8bitKernels;
    case SimdLevel::kAvx512: return avx512::kAdamW8bitKernels;
  }
  return scalar::kAdamW8bitKernels;
}

}  // namespace

void AdamW8bitStepAt(SimdLevel level, const AdamW8bitShard& shard, const AdamWHyperparams& h) {
  const AdamW8bitKernels& k = KernelsFor(level);
  HOIST_CHECK_GE(h.step, 1);
  if (shard.n == 0) return;
  HOIST_CHECK(shard.param != nullptr && shard.m != nullptr && shard.v != nullptr &&
              shard.absmax_m != nullptr && shard.absmax_v != nullptr && shard.grad != nullptr);
  HOIST_CHECK(shard.param_copy == nullptr || IsHalf(shard.copy_format))
      << "the parameter copy of the 8-bit AdamW step is 16-bit";
  const AdamWCoeffs c = AdamWCoeffsFor(h);  // the 32-bit step's constants
  const DynamicMap& m_map = SignedDynamicMap();
  const DynamicMap& v_map = UnsignedDynamicMap();

  const size_t chunk = kBlocksPerChunk * static_cast<size_t>(kQuantBlockSize);
  const size_t grad_bytes = DTypeSize(shard.grad_format);
  const int64_t chunks = static_cast<int64_t>((shard.n + chunk - 1) / chunk);
  ParallelFor(chunks, chunks > 1, [&](int64_t i) {
    const size_t begin = static_cast<size_t>(i) * chunk;
    const size_t block = static_cast<size_t>(i) * kBlocksPerChunk;
    AdamW8bitShard piece = shard;
    piece.param += begin;
    piece.m += begin;
    piece.v += begin;
    piece.absmax_m += block;
    piece.absmax_v += block;
    piece.grad = static_cast<const char*>(shard.grad) + begin * grad_bytes;
    if (piece.param_copy != nullptr) piece.param_copy += begin;
    piece.n = shard.n - begin < chunk ? shard.n - begin : chunk;
    k.step(piece, c, m_map, v_map);
  });
}

void AdamW8bitStep(const AdamW8bitShard& shard, const AdamWHyperparams& h) {
  static const SimdLevel level =
      AdamWFusedLevelAvailable(ActiveSimdLevel()) ? ActiveSimdLevel() : SimdLevel::kScalar;
  AdamW8bitStepAt(level, shard, h);
}

}  // namespace hoist::kernels::cpu
