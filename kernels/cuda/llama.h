// The Llama family's elementwise and row ops on the GPU; CPU twins: cpu::RmsNormForward /
// RmsNormBackward, cpu::RopeForward / RopeBackward, cpu::SwiGluForward / SwiGluBackward (shapes,
// layouts and formulas in kernels/cpu/ops.h). Arrays of `type` are fp32, bf16 or fp16; the math
// is fp32 and each output is rounded once to `type` (kernels/cuda/dtype.h).
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// rstd (N, fp32) = 1/sqrt(mean(inp^2) + eps); out (N,C) = round(inp * rstd) * weight, the
// normalised value rounded to `type` before the weight multiplies it (HF's order). One warp per
// row; deterministic.
Status RmsNormForward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                      float eps, DType type, cudaStream_t stream);
// dinp (N,C, `type`) += input gradient; dweight (C, fp32) += sum over rows of dout * inp * rstd
// (atomics across row chunks: low bits may vary; null: a frozen weight, not computed).
Status RmsNormBackward(void* dinp, float* dweight, const void* dout, const void* inp,
                       const void* weight, const float* rstd, int N, int C, DType type,
                       cudaStream_t stream);

// In place on the NH query and NKV key heads of qkv (B,T,(NH+2*NKV)*hd): rotation by the angles
// whose cos and sin (T, hd/2, fp32) are given; backward rotates dqkv by the negative angles. The
// products and the sum are rounded separately (no fused multiply-add), as on the CPU, so fp32
// results are the CPU's bits. hd even. Deterministic.
Status RopeForward(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int hd, DType type, cudaStream_t stream);
Status RopeBackward(void* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                    int hd, DType type, cudaStream_t stream);

// out (N,I) = silu(gate) * up over inp (N,2I) = [gate | up] rows; dinp (N,2I) += [dgate | dup].
// Deterministic.
Status SwiGluForward(void* out, const void* inp, int N, int I, DType type, cudaStream_t stream);
Status SwiGluBackward(void* dinp, const void* inp, const void* dout, int N, int I, DType type,
                      cudaStream_t stream);

}  // namespace hoist::kernels::cuda
