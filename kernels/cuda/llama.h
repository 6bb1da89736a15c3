// The Llama family's elementwise and row ops on the GPU, with the variants of Qwen3 and Gemma 2;
// CPU twins: cpu::RmsNormForward / RmsNormBackward, cpu::HeadRmsNormForward / HeadRmsNormBackward,
// cpu::RopeForward / RopeBackward, cpu::GluForward / GluBackward (shapes, layouts and formulas in
// kernels/cpu/ops.h). Arrays of `type` are fp32, bf16 or fp16; the math is fp32 and each output is
// rounded once to `type` (kernels/cuda/dtype.h).
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/op_variants.h"

namespace hoist::kernels::cuda {

// rstd (N, fp32) = 1/sqrt(mean(inp^2) + eps); out (N,C) in `style`: kLlama round(inp * rstd) *
// weight, the normalised value rounded to `type` before the weight multiplies it (HF's order);
// kGemma inp * rstd * (1 + weight) in fp32, rounded once. One warp per row; deterministic.
Status RmsNormForward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                      float eps, RmsNormStyle style, DType type, cudaStream_t stream);
// dinp (N,C, `type`) += input gradient (with the weight, or 1 + weight for kGemma); dweight (C,
// fp32) += sum over rows of dout * inp * rstd (atomics across row chunks: low bits may vary;
// null: a frozen weight, not computed).
Status RmsNormBackward(void* dinp, float* dweight, const void* dout, const void* inp,
                       const void* weight, const float* rstd, int N, int C, RmsNormStyle style,
                       DType type, cudaStream_t stream);
// RmsNormForward's arithmetic on each query head (q_weight) and key head (k_weight) of the rows
// of inp (N, (NH+2*NKV)*hd), the value heads copied; rstd (N, NH+NKV). out must not overlap inp.
// Deterministic.
Status HeadRmsNormForward(void* out, float* rstd, const void* inp, const void* q_weight,
                          const void* k_weight, int N, int NH, int NKV, int hd, float eps,
                          RmsNormStyle style, DType type, cudaStream_t stream);
// dinp (N, (NH+2*NKV)*hd) += RmsNormBackward's gradient of each query and key head, and dout for
// the value heads; dq_weight, dk_weight (hd, fp32) += as RmsNormBackward's dweight over the
// query or key heads (each may be null; atomics: low bits may vary).
Status HeadRmsNormBackward(void* dinp, float* dq_weight, float* dk_weight, const void* dout,
                           const void* inp, const void* q_weight, const void* k_weight,
                           const float* rstd, int N, int NH, int NKV, int hd, RmsNormStyle style,
                           DType type, cudaStream_t stream);

// In place on the NH query and NKV key heads of qkv (B,T,(NH+2*NKV)*hd): rotation by the angles
// whose cos and sin (T, hd/2, fp32) are given; backward rotates dqkv by the negative angles. The
// products and the sum are rounded separately (no fused multiply-add), as on the CPU, so fp32
// results are the CPU's bits. hd even. Deterministic.
Status RopeForward(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int hd, DType type, cudaStream_t stream);
Status RopeBackward(void* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                    int hd, DType type, cudaStream_t stream);

// out (N,I) = act(gate) * up over inp (N,2I) = [gate | up] rows (SwiGLU with kSilu, GeGLU with
// kGeluTanh); dinp (N,2I) += [dgate | dup]. Deterministic.
Status GluForward(void* out, const void* inp, int N, int I, GluActivation activation, DType type,
                  cudaStream_t stream);
Status GluBackward(void* dinp, const void* inp, const void* dout, int N, int I,
                   GluActivation activation, DType type, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
