// Conversions between fp32 and the storage types of mixed precision (bf16, fp16) over arrays of
// any DType, with round-to-nearest-even on the way down, and the sums built on them. On the CPU the
// compute type is a storage format: values are widened to fp32 before any arithmetic and rounded
// once when stored.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hoist::kernels::cpu {

// dst[i] = src[i] widened to fp32.
void ToFloat(const void* src, DType type, float* dst, int64_t n);
// dst[i] = src[i] rounded to `type` (a plain copy for fp32).
void FromFloat(const float* src, void* dst, DType type, int64_t n);
// acc[i] = round(acc[i] + scale * add[i]), acc and add both of `type`.
void Accumulate(void* acc, const void* add, DType type, float scale, int64_t n);
// acc[i] = round(acc[i] + add[i]) where add is fp32.
void AccumulateFloat(void* acc, DType type, const float* add, int64_t n);
// Sum of squares of x * scale in double, widening 16-bit values first; deterministic.
// Blocking; the OpenMP team works inside. The caller owns every array.
double ScaledSumOfSquares(const void* x, DType type, float scale, int64_t n);

}  // namespace hoist::kernels::cpu
