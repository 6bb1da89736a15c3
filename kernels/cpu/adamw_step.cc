#include "kernels/cpu/adamw_step.h"

#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/adamw_kernels.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/parallel_for.h"

namespace hoist::kernels::cpu {
namespace {

// Elements per parallel work item: 64 KiB of each fp32 stream, so the thread hand-off is
// amortised and a 100M shard still gives every thread thousands of chunks to balance. A multiple
// of every vector width and of the inner block, so with 64-byte aligned arrays every chunk starts
// on a cache line and only the shard's last chunk has a tail.
constexpr size_t kChunk = 16384;

const AdamWKernels& AdamWKernelsFor(SimdLevel level) {
  HOIST_CHECK(AdamWFusedLevelAvailable(level))
      << "SIMD level " << SimdLevelName(level) << " is not available for AdamW on this CPU";
  switch (level) {
    case SimdLevel::kScalar: return scalar::kAdamWKernels;
    case SimdLevel::kAvx2: return avx2::kAdamWKernels;
    case SimdLevel::kAvx512: return avx512::kAdamWKernels;
  }
  return scalar::kAdamWKernels;
}

}  // namespace

bool AdamWFusedLevelAvailable(SimdLevel level) { return CastLevelAvailable(level); }

AdamWCoeffs AdamWCoeffsFor(const AdamWHyperparams& h) {
  // The same per-step constants as ops.h's AdamW: bias corrections in double because beta2^t
  // creeps towards 1 slowly, then rounded once to float.
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  AdamWCoeffs c;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.one_minus_beta1 = 1.0f - h.beta1;
  c.one_minus_beta2 = 1.0f - h.beta2;
  c.decay_factor = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  c.step_size = static_cast<float>(h.lr / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.eps = h.eps;
  c.grad_scale = h.grad_scale;
  return c;
}

void AdamWFusedStepAt(SimdLevel level, const AdamWShard& shard, const AdamWHyperparams& h) {
  const AdamWKernels& k = AdamWKernelsFor(level);
  HOIST_CHECK_GE(h.step, 1);
  if (shard.n == 0) return;
  HOIST_CHECK(shard.param != nullptr && shard.m != nullptr && shard.v != nullptr &&
              shard.grad != nullptr);
  HOIST_CHECK(shard.param_copy == nullptr || IsHalf(shard.copy_format))
      << "the parameter copy of the fused AdamW step is 16-bit";
  const AdamWCoeffs c = AdamWCoeffsFor(h);

  const size_t grad_bytes = DTypeSize(shard.grad_format);
  const int64_t chunks = static_cast<int64_t>((shard.n + kChunk - 1) / kChunk);
  ParallelFor(chunks, chunks > 1, [&](int64_t i) {
    const size_t begin = static_cast<size_t>(i) * kChunk;
    AdamWShard piece = shard;
    piece.param += begin;
    piece.m += begin;
    piece.v += begin;
    piece.grad = static_cast<const char*>(shard.grad) + begin * grad_bytes;
    if (piece.param_copy != nullptr) piece.param_copy += begin;
    piece.n = shard.n - begin < kChunk ? shard.n - begin : kChunk;
    k.fused_step(piece, c);
  });
}

void AdamWFusedStep(const AdamWShard& shard, const AdamWHyperparams& h) {
  static const SimdLevel level =
      AdamWFusedLevelAvailable(ActiveSimdLevel()) ? ActiveSimdLevel() : SimdLevel::kScalar;
  AdamWFusedStepAt(level, shard, h);
}

}  // namespace hoist::kernels::cpu
