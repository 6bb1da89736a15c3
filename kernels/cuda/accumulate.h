// The ZeRO engine's arithmetic on gradient buffers, on the GPU: accumulation across types and the
// scaled sum of squares of the global gradient norm. CPU twins: kernels/cpu/convert.h's
// Accumulate / AccumulateFloat (the same fp32 arithmetic, the same rounding: bit for bit) and
// ScaledSumOfSquares (a double; the order of the additions differs, so the CPU value is matched to
// a rounding bound, not to the bit).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/workspace.h"

namespace hoist::kernels::cuda {

// acc[i] = round_acc_type(acc[i] + scale * add[i]) for i < n, in fp32. acc and add must not
// overlap. Deterministic.
Status Accumulate(void* acc, DType acc_type, const void* add, DType add_type, float scale,
                  int64_t n, cudaStream_t stream);

// *sum (one double, device memory) += the sum over i < n of (x[i] * scale)^2: every block sums a
// fixed slice in double, then one block adds the partials in a fixed order, so the result is the
// same from run to run. `workspace` holds ScaledSumOfSquaresWorkspaceDoubles() doubles (device);
// calls on one stream may share it. n == 0 adds nothing.
Status ScaledSumOfSquares(const void* x, DType type, float scale, int64_t n, double* sum,
                          double* workspace, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
