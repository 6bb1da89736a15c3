// The tiled (memory-efficient) causal attention of ops.h with its tile sizes and SIMD level made
// explicit, for tests and benchmarks, and the sizes of what it keeps. ops.h's
// AttentionForwardTiled / AttentionBackwardTiled call these with DefaultTiledAttentionOptions(T)
// and ActiveSimdLevel(). Same contracts, threading and determinism as ops.h.
//
// What it keeps for backward: the log-sum-exp of each query row's scores, lse (B,NH,T), instead
// of the direct kernel's probabilities att (B,NH,T,T); backward recomputes the probabilities a
// tile at a time from q, k and lse. Workspace: per OpenMP thread, a few tiles of
// q_rows x k_cols and q_rows x hs floats plus T floats in backward, never T x T.
#pragma once

#include <cstddef>

#include "core/cpu_features.h"
#include "kernels/attention_options.h"

namespace hoist::kernels::cpu {

struct TiledAttentionOptions {
  int q_rows = 64;  // query rows per tile (>= 1)
  int k_cols = 64;  // keys per tile (>= 1)
  SimdLevel level = SimdLevel::kScalar;
};

// The tile sizes ops.h uses for sequence length T, at ActiveSimdLevel().
TiledAttentionOptions DefaultTiledAttentionOptions(int T);

// Floats each kernel keeps from forward for backward, besides out (which both read or reuse):
// tiled B*NH*T (lse), direct B*NH*T*T (att).
size_t TiledAttentionSavedFloats(int B, int T, int NH);
size_t DirectAttentionSavedFloats(int B, int T, int NH);

// Floats of scratch one thread holds while running the tiled forward / backward.
size_t TiledAttentionWorkspaceFloats(const TiledAttentionOptions& options, int T, int hs);

// HOIST_CHECKs the tiles (sizes >= 1, level available on this CPU).
void AttentionForwardTiledWith(const TiledAttentionOptions& tiles, float* out, float* lse,
                               const float* qkv, int B, int T, int C, int NH);
void AttentionBackwardTiledWith(const TiledAttentionOptions& tiles, float* dqkv, const float* dout,
                                const float* qkv, const float* out, const float* lse, int B, int T,
                                int C, int NH);
// The same with grouped-query heads and attention options (ops.h's AttentionForwardGqa): NH query
// heads, NKV key/value heads, head size hs. With a window, a query tile walks only the key tiles
// its rows' windows reach, and a key tile only the query tiles whose windows reach it.
void AttentionForwardTiledGqaWith(const TiledAttentionOptions& tiles, float* out, float* lse,
                                  const float* qkv, int B, int T, int NH, int NKV, int hs,
                                  const AttentionOptions& options = {});
void AttentionBackwardTiledGqaWith(const TiledAttentionOptions& tiles, float* dqkv,
                                   const float* dout, const float* qkv, const float* out,
                                   const float* lse, int B, int T, int NH, int NKV, int hs,
                                   const AttentionOptions& options = {});

}  // namespace hoist::kernels::cpu
