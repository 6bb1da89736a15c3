// The tiled attention (flash_attention.h) of bf16 runs with its products on bf16 operands and fp32
// accumulation, through oneDNN (gemm_bf16.h), as attention_bf16.h does for the direct kernel and
// as flash attention computes it on GPUs: per tile the scores in fp32 from the bf16 q and k, the
// online softmax's running max and sum and the output's accumulator in fp32, the tile's
// e^{s - max} rounded to bf16 for P V, lse = max + log(sum) in fp32. Backward recomputes P in fp32
// from q, k and lse, rounds P and dL/dscores to bf16 for the products that take them, and sums
// dq, dk and dv in fp32, rounded once. Callable only where Bf16GemmAvailable(); bf16 runs take it
// where ActiveAttentionPath() chose the bf16 attention.
//
// Layouts are those of AttentionForwardTiledGqa (ops.h), the 16-bit arrays as bf16 bits: qkv
// (B,T,(NH+2*NKV)*hd), out and dout (B,T,NH*hd) bf16, lse (B,NH,T) fp32. No fp32 copy of an array
// is made. Scratch per OpenMP thread, kept for the next call: forward, a few tiles; backward, one
// (b, key/value head)'s q, k, v and dout in bf16 and its dq, dk and dv sums in fp32, (T, hd) each:
// O(T hd), never T x T. Blocking, with the OpenMP team; thread-safe for distinct outputs; the
// results do not depend on the number of threads.
#pragma once

#include <cstdint>

#include "kernels/cpu/flash_attention.h"

namespace hoist::kernels::cpu {

// The tile sizes the bf16 kernels use at sequence length T (the SIMD level: ActiveSimdLevel()).
TiledAttentionOptions DefaultTiledAttentionBf16Options(int T);

// out = softmax(scale Q K^T, causal) V per head, the fp32 result rounded once into out; lse is
// each query row's log-sum-exp of its scaled (and capped) scores. `options` as ops.h's
// AttentionForwardTiledGqa takes them, key tiles outside every window skipped as there.
void AttentionForwardTiledGqaBf16(uint16_t* out, float* lse, const uint16_t* qkv, int B, int T,
                                  int NH, int NKV, int hd, const AttentionOptions& options = {});
// dqkv (bf16) += the gradient of out w.r.t. qkv, from the forward's out and lse: each head's slices
// of dqkv are widened, the products added to them in fp32, and rounded once.
void AttentionBackwardTiledGqaBf16(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                                   const uint16_t* out, const float* lse, int B, int T, int NH,
                                   int NKV, int hd, const AttentionOptions& options = {});

// The same with the tile sizes and SIMD level explicit, for tests and benchmarks; HOIST_CHECKs the
// tiles as flash_attention.h's kernels do.
void AttentionForwardTiledGqaBf16With(const TiledAttentionOptions& tiles, uint16_t* out, float* lse,
                                      const uint16_t* qkv, int B, int T, int NH, int NKV, int hd,
                                      const AttentionOptions& options = {});
void AttentionBackwardTiledGqaBf16With(const TiledAttentionOptions& tiles, uint16_t* dqkv,
                                       const uint16_t* dout, const uint16_t* qkv,
                                       const uint16_t* out, const float* lse, int B, int T, int NH,
                                       int NKV, int hd, const AttentionOptions& options = {});

}  // namespace hoist::kernels::cpu
