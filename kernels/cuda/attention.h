// Causal multi-head self-attention on the GPU; CPU twins: cpu::AttentionForward /
// AttentionBackward (direct) and cpu::AttentionForwardTiled / AttentionBackwardTiled (tiled).
// qkv (B,T,3C) holds q, k, v side by side; head h uses channels [h*hs, (h+1)*hs) of each,
// hs = C/NH, scores are scaled by 1/sqrt(hs). qkv, out and the gradients are `type`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/attention_options.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/workspace.h"

namespace hoist::kernels::cuda {

// Direct: batched GEMMs for the scores and the weighted values, a causal softmax between them.
// att (B,NH,T,T, fp32) receives the probabilities (0 above the diagonal), kept for backward.
// fp32 runs every product in true fp32. bf16/fp16 run them on the tensor cores (16-bit inputs,
// fp32 accumulation): the probabilities and dL/dscores enter their products rounded once to
// `type` (as the CPU model keeps att rounded in 16-bit modes); att itself stays fp32.
// `workspace` holds AttentionWorkspaceBytes(B,T,C,NH,type) bytes (kernels/cuda/workspace.h);
// nothing in it outlives a call.
Status AttentionForward(BlasHandle& blas, void* out, float* att, const void* qkv, void* workspace,
                        int B, int T, int C, int NH, DType type, cudaStream_t stream);
// dqkv (B,T,3C) += gradient of out w.r.t. qkv, given the att of the forward.
Status AttentionBackward(BlasHandle& blas, void* dqkv, const void* dout, const void* qkv,
                         const float* att, void* workspace, int B, int T, int C, int NH, DType type,
                         cudaStream_t stream);

// Tiled: an online softmax over key tiles in shared memory; never forms the T x T matrix. Keeps
// lse (B,NH,T, fp32), each query row's log-sum-exp of scaled scores. hs must be <= 128.
Status AttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                             DType type, cudaStream_t stream);
// dqkv += gradient, recomputing the probabilities tile by tile from qkv and lse; out is the
// forward's output. `workspace` holds TiledAttentionBackwardWorkspaceBytes(B,T,NH) bytes
// (kernels/cuda/workspace.h).
Status AttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, void* workspace, int B, int T, int C, int NH,
                              DType type, cudaStream_t stream);

// Grouped-query attention (CPU twins: cpu::AttentionForwardGqa and the other *Gqa ops): qkv
// (B,T,(NH+2*NKV)*hd) holds NH query heads, then NKV key heads, then NKV value heads; query head
// h uses key/value head h / (NH/NKV); out (B,T,NH*hd); `options` (kernels/attention_options.h:
// the scale, default 1/sqrt(hd), a sliding window and a softcap, tanh in fp32) as kernels/backend.h
// describes them, checked here. Otherwise the contracts above. The direct form copies each shared
// key/value head once per query head of its group into the workspace (GqaAttentionWorkspaceBytes,
// kernels/cuda/workspace.h) and runs the multi-head products over all T x T scores, masking the
// window in the softmax; with a softcap its backward recomputes each visible score's dot product
// in the softmax's backward kernel (the workspace has no room for the scores). Its backward adds
// a shared head's gradient summed over the group, in head order. With default options, NKV == NH
// and hd = C/NH every form is the multi-head op above, kernel for kernel.
Status GqaAttentionForward(BlasHandle& blas, void* out, float* att, const void* qkv,
                           void* workspace, int B, int T, int NH, int NKV, int hd,
                           const AttentionOptions& options, DType type, cudaStream_t stream);
Status GqaAttentionBackward(BlasHandle& blas, void* dqkv, const void* dout, const void* qkv,
                            const float* att, void* workspace, int B, int T, int NH, int NKV,
                            int hd, const AttentionOptions& options, DType type,
                            cudaStream_t stream);
// Tiled: hd <= 128; the backward's workspace holds TiledAttentionBackwardWorkspaceBytes(B,T,NH).
// With a window, key tiles outside every window of a query tile (and query tiles outside every
// window reaching a key tile) are skipped.
Status GqaAttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T, int NH,
                                int NKV, int hd, const AttentionOptions& options, DType type,
                                cudaStream_t stream);
Status GqaAttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv, const void* out,
                                 const float* lse, void* workspace, int B, int T, int NH, int NKV,
                                 int hd, const AttentionOptions& options, DType type,
                                 cudaStream_t stream);

}  // namespace hoist::kernels::cuda
