// The optimizer step of offloaded ZeRO shards on the CPU: AdamW over fp32 parameters and fp32
// moments in one threaded pass over memory, which can also take 16-bit gradients (widened on the
// fly) and write the compute-dtype (bf16 or fp16) copy of the updated parameters that goes back
// to the accelerator. Per element it reads param, grad, m, v and writes param, m, v and the copy.
//
// The math is ops.h's AdamW (torch.optim.AdamW's arrangement):
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param = param * (1 - lr wd) - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// evaluated as a fixed sequence of correctly rounded fp32 operations with no fused multiply-add,
// so every SIMD level and every thread count gives the same bits. The copy is the
// round-to-nearest-even of the updated fp32 parameter (cast.h's conversions, bit for bit).
// ops.h's AdamW may contract a*b+c into an FMA at avx2/avx512, so the two differ by a few ulp.
//
// Large shards are split into fixed chunks across the OpenMP thread team. Blocking; thread-safe
// for distinct buffers. The caller owns every buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/vector_kernels.h"

namespace hoist::kernels::cpu {

struct AdamWHyperparams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // gradient clipping and loss-scale unscaling
  int64_t step = 1;         // 1-based; the bias corrections use it
};

// One shard: n elements in each array. param, m and v are updated in place. grad holds n floats
// (kFloat32) or n uint16_t (kBFloat16, kFloat16). param_copy, when not null, receives n uint16_t
// in copy_format, which is 16-bit (checked). No two arrays may overlap.
struct AdamWShard {
  float* param = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const void* grad = nullptr;
  DType grad_format = DType::kFloat32;
  uint16_t* param_copy = nullptr;
  DType copy_format = DType::kBFloat16;
  size_t n = 0;
};

// The step at ActiveSimdLevel() (scalar where the CPU lacks F16C).
void AdamWFusedStep(const AdamWShard& shard, const AdamWHyperparams& h);

// The same at an explicit level, for tests and benchmarks. Levels above scalar need F16C as well
// as the level's ISA (the same rule as cast.h's CastLevelAvailable); passing an unavailable level
// is a bug (HOIST_CHECK).
bool AdamWFusedLevelAvailable(SimdLevel level);
// The per-step constants every AdamW kernel (32-bit and 8-bit) computes with.
AdamWCoeffs AdamWCoeffsFor(const AdamWHyperparams& h);
void AdamWFusedStepAt(SimdLevel level, const AdamWShard& shard, const AdamWHyperparams& h);

}  // namespace hoist::kernels::cpu
