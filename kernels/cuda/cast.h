// Casts between fp32 and the 16-bit types, and the unscale-with-overflow-check of fp16 loss
// scaling, on the GPU; CPU twins: cpu::CastFp32ToBf16 / ... and cpu::UnscaleInPlace (the same
// round-to-nearest-even bits). Deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// out[:n] (out_type) = in[:n] (in_type), rounded to nearest even when narrowing. Same types are
// a copy. out and in must not overlap.
Status Cast(void* out, DType out_type, const void* in, DType in_type, int64_t n,
            cudaStream_t stream);

// x[:n] *= 1 / scale, in place, and sets *found_nonfinite (device memory) to 1 when an input or
// a result is an infinity or a NaN; it never clears it (the caller zeroes it once per step, so
// several calls gather one answer). scale must be > 0 and finite.
Status UnscaleAndCheck(float* x, int64_t n, float scale, int* found_nonfinite, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
