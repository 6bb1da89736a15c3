// Causal attention of bf16 runs with its products on bf16 operands and fp32 accumulation, through
// oneDNN (gemm_bf16.h), as PyTorch's autocast computes it: the scores from the bf16 q and k, the
// softmax and its backward in fp32, the probabilities and their gradient rounded to bf16 for the
// products that take them. Callable only where Bf16GemmAvailable(); which path a run takes is
// ActiveAttentionPath()'s choice.
//
// Layouts are those of AttentionForwardGqa (ops.h), with the 16-bit arrays as bf16 bits: qkv
// (B,T,(NH+2*NKV)*hd) and out (B,T,NH*hd) bf16, att (B,NH,T,T) fp32 (the probabilities as the
// fp32 kernel keeps them, 0 above the diagonal). No fp32 copy of qkv is made: each task copies its
// heads' bf16 rows into small dense blocks. Blocking, with the OpenMP team; thread-safe for
// distinct outputs.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/attention_options.h"

namespace hoist::kernels::cpu {

// Whether bf16 runs take these kernels, decided once per process: only where ActiveGemmPath()
// took oneDNN, and then (HOIST_GEMM=bf16 aside, which takes them untimed) only if they measured
// faster than the fp32 path (widened copies, the fp32 kernel, results rounded) on one forward and
// backward of B=2, T=256, 4 heads of 64. With AMX they measured 1.8-2.5x faster at T = 64 to
// 1024; with AVX512_BF16 alone, 1.3x at T = 64 but 0.8x at T = 1024 (bench/CPU_BF16_NOTES.md).
// The tiled attention's bf16 kernels (flash_attention_bf16.h) follow the same choice.
struct AttentionChoice {
  bool bf16 = false;
  double bf16_ms = 0;  // the probe's times; 0 when not measured
  double fp32_ms = 0;
  std::string reason;  // one sentence: why this path
};
// Reads ActiveGemmPath() and HOIST_GEMM now and may time both paths (some tens of milliseconds).
AttentionChoice DecideAttentionPath();
// DecideAttentionPath() once per process; logs the choice once. Thread-safe.
const AttentionChoice& ActiveAttentionPath();

// out = softmax(scale Q K^T, causal) V per head, the fp32 result rounded once into out; `options`
// as ops.h's AttentionForwardGqa takes them (the softcap, as the softmax, in fp32).
void AttentionForwardGqaBf16(uint16_t* out, float* att, const uint16_t* qkv, int B, int T, int NH,
                             int NKV, int hd, const AttentionOptions& options = {});
// dqkv (bf16) += the gradient of out w.r.t. qkv: each head's slices of dqkv are widened, the
// products added to them in fp32, and rounded once. With a softcap the scores are recomputed
// from the bf16 q and k, as the forward computed them.
void AttentionBackwardGqaBf16(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                              const float* att, int B, int T, int NH, int NKV, int hd,
                              const AttentionOptions& options = {});

}  // namespace hoist::kernels::cpu
