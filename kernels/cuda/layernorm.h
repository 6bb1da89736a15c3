// LayerNorm over the last dimension on the GPU, eps 1e-5; CPU twin: cpu::LayerNormForward /
// LayerNormBackward.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) fp32. inp, weight, bias and
// out are `type`. One warp per row; deterministic.
Status LayerNormForward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                        const void* bias, int N, int C, DType type, cudaStream_t stream);
// dinp (N,C, `type`) += input gradient; dweight, dbias (C, fp32) += parameter gradients (atomics
// across row blocks: low bits may vary). dweight and dbias may each be null (frozen: not
// computed; both null skips the parameter kernel).
Status LayerNormBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                         const void* inp, const void* weight, const float* mean, const float* rstd,
                         int N, int C, DType type, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
