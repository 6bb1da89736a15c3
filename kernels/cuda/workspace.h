// The device workspace the CUDA backend's attention asks for, as plain arithmetic: the kernels
// size their buffers with these, and the memory estimate (runtime/memory/memory_estimate.h) counts
// them for --device cuda without a GPU or the CUDA toolkit.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hoist::kernels::cuda {

// The direct attention's: 4*e*BTC + 12*BTC + 4*BHTT bytes with e = sizeof(type), BTC = B*T*C,
// BHTT = B*NH*T*T (head-major q, k, v, dout in `type`, fp32 gradient heads and one fp32 T x T
// block per head).
inline int64_t AttentionWorkspaceBytes(int B, int T, int C, int NH, DType type) {
  const int64_t btc = static_cast<int64_t>(B) * T * C;
  const int64_t bhtt = static_cast<int64_t>(B) * NH * T * T;
  const auto f = static_cast<int64_t>(sizeof(float));
  return 4 * btc * static_cast<int64_t>(DTypeSize(type)) + 3 * btc * f + bhtt * f;
}

// The grouped-query direct attention's (NH query heads, NKV key/value heads of hd): the key and
// value heads are repeated to NH heads in the workspace, so it is the multi-head size for
// C = NH*hd, whatever NKV.
inline int64_t GqaAttentionWorkspaceBytes(int B, int T, int NH, int /*NKV*/, int hd, DType type) {
  return AttentionWorkspaceBytes(B, T, NH * hd, NH, type);
}

// The tiled attention's backward: one fp32 row term D per (batch, head, query).
inline int64_t TiledAttentionBackwardWorkspaceBytes(int B, int T, int NH) {
  return static_cast<int64_t>(B) * NH * T * static_cast<int64_t>(sizeof(float));
}

// Doubles of device scratch ScaledSumOfSquares needs: one partial sum per block.
inline constexpr int64_t kSumOfSquaresBlocks = 512;
inline int64_t ScaledSumOfSquaresWorkspaceDoubles() { return kSumOfSquaresBlocks; }

// What the CUDA backend allocates from its device when it is created (its sum-of-squares
// scratch, Category::kWorkspace), as the tracker counts it.
inline int64_t BackendWorkspaceBytes() {
  return ScaledSumOfSquaresWorkspaceDoubles() * static_cast<int64_t>(sizeof(double));
}

}  // namespace hoist::kernels::cuda
