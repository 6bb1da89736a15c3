// The tiled (flash-style) attention of attention.h: online softmax over key tiles held in shared
// memory, never a T x T matrix; fp32 math on CUDA cores.
//
// Layout, the same in the three kernels: a block of kWarps warps owns one tile of kTile rows (query
// rows in the forward and dQ kernels, keys in the dK/dV kernel) of one (b, h), each warp
// kRowsPerWarp of them; the other side streams through shared memory kTile at a time. Inside a warp
// lane j takes column j of the 32-wide tile (its score is a dot product over hs read from shared
// memory), and the row's hs-long accumulators are split across the lanes (lane holds dimensions
// lane, lane+32, ...; kChunks = ceil(hs/32) <= 4 registers per row). Shared rows are padded to
// hs+1 floats so the lanes' column reads hit distinct banks.
//
// Grouped-query heads (NKV key/value heads shared by groups of NH/NKV query heads): the forward
// and dQ kernels read their query head's key/value head; the dK/dV kernel's block owns a key tile
// of one key/value head and walks its group's query heads one after the other, so the sum over
// the group stays in registers in a fixed order. With NKV == NH every loop and index is that of
// multi-head attention.
//
// The attention options (attention_options.h): the scale is a kernel argument; a window masks the
// scores like the causal mask and narrows the walks (the forward and dQ kernels start at the key
// tile holding their first row's first key, the dK/dV kernel stops after the last query tile
// whose windows reach its keys, and a row skips a tile outside its window); a softcap caps each
// score with tanhf where it is computed, and the backward multiplies dL/dscore by its slope
// 1 - tanh^2. Without options each kernel runs the plain causal arithmetic, operation for
// operation.
//
// Backward: D_i = rowsum(dout_i * out_i) first (workspace (B,NH,T) fp32), then dK/dV per key tile
// looping over the query tiles at and below the diagonal, then dQ per query tile looping over the
// key tiles up to the diagonal. Every gradient element is summed by one thread in a fixed order and
// added once into dqkv: deterministic, no atomics.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_math.cuh"

namespace hoist::kernels::cuda {
namespace {

using detail::CeilDiv;
using detail::FromFloat;
using detail::ToFloat;
using detail::WarpMax;
using detail::WarpSum;

constexpr int kTile = 32;  // rows per block and columns per streamed tile (= warp width)
constexpr int kWarps = 4;
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kMaxHeadSize = 128;
constexpr unsigned kFullMask = 0xffffffffu;

// rows [t0, t0 + kTile) of one part of qkv-like (B,T,width) data -> tile (kTile, ld) fp32, zeros
// past T. `src` points at the head's first channel of row 0 of batch b.
template <typename E>
__device__ void LoadTile(float* tile, const E* src, int64_t width, int t0, int T_, int hs, int ld) {
  for (int i = threadIdx.x; i < kTile * hs; i += blockDim.x) {
    const int r = i / hs, d = i % hs, t = t0 + r;
    tile[r * ld + d] = t < T_ ? ToFloat(src[static_cast<int64_t>(t) * width + d]) : 0.0f;
  }
}

__device__ __forceinline__ float Dot(const float* a, const float* b, int hs) {
  float acc = 0.0f;
  for (int d = 0; d < hs; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

// The first key tile a query tile starting at q0 walks: the one holding row q0's first key.
__device__ __forceinline__ int FirstKeyTile(int q0, int window) {
  return AttentionWindowStart(q0, window) / kTile * kTile;
}

// Whether key tile [k0, k0 + kTile) lies wholly before query tq's window.
__device__ __forceinline__ bool BeforeWindow(int k0, int tq, int window) {
  return k0 + kTile <= AttentionWindowStart(tq, window);
}

// grid (ceil(T/kTile), B*NH). out (B,T,C), lse (B,NH,T). qkv rows hold NH query heads, then NKV
// key heads, then NKV value heads (C = NH*hs); query head h reads key/value head h / (NH/NKV).
template <typename E, int kChunks>
__global__ void __launch_bounds__(kWarps * 32)
    TiledForwardKernel(E* out, float* lse, const E* qkv, int T_, int NH, int NKV, int hs,
                       float scale, int window, float softcap) {
  extern __shared__ float smem[];
  const int C = NH * hs, ld = hs + 1;
  float* q_s = smem;
  float* k_s = q_s + kTile * ld;
  float* v_s = k_s + kTile * ld;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t width = static_cast<int64_t>(NH + 2 * NKV) * hs;
  const E* head = qkv + static_cast<int64_t>(b) * T_ * width + h * hs;
  const E* k_head = qkv + static_cast<int64_t>(b) * T_ * width + C + h / (NH / NKV) * hs;
  const E* v_head = k_head + NKV * hs;
  LoadTile(q_s, head, width, q0, T_, hs, ld);

  float o[kRowsPerWarp][kChunks] = {};
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) row_max[i] = -INFINITY, row_sum[i] = 0.0f;

  const int q_last = min(T_, q0 + kTile) - 1;
  for (int k0 = FirstKeyTile(q0, window); k0 <= q_last; k0 += kTile) {
    __syncthreads();  // the previous tile's readers are done
    LoadTile(k_s, k_head, width, k0, T_, hs, ld);
    LoadTile(v_s, v_head, width, k0, T_, hs, ld);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i, tq = q0 + r;
      // Uniform across the warp: a tile wholly after the row or before its window.
      if (tq >= T_ || k0 > tq || BeforeWindow(k0, tq, window)) continue;
      const int first = max(0, AttentionWindowStart(tq, window) - k0);  // the row's first lane
      const bool visible = k0 + lane <= tq && lane >= first;
      const float s = visible ? scale * Dot(q_s + r * ld, k_s + lane * ld, hs) : -INFINITY;
      const float capped = softcap > 0.0f && visible ? softcap * tanhf(s / softcap) : s;
      // The tile holds a key the row sees, so the new maximum is finite.
      const float new_max = fmaxf(row_max[i], WarpMax(capped));
      const float p = visible ? expf(capped - new_max) : 0.0f;
      const float correction = expf(row_max[i] - new_max);
      row_sum[i] = row_sum[i] * correction + WarpSum(p);
      row_max[i] = new_max;
      const int keys = min(kTile, tq - k0 + 1);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) o[i][c] *= correction;
      for (int j = first; j < keys; ++j) {
        const float pj = __shfl_sync(kFullMask, p, j);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = lane + 32 * c;
          if (d < hs) o[i][c] = fmaf(pj, v_s[j * ld + d], o[i][c]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int tq = q0 + warp * kRowsPerWarp + i;
    if (tq >= T_) continue;
    const float inv_sum = 1.0f / row_sum[i];
    E* o_row = out + (static_cast<int64_t>(b) * T_ + tq) * C + h * hs;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < hs) o_row[d] = FromFloat<E>(o[i][c] * inv_sum);
    }
    if (lane == 0) lse[static_cast<int64_t>(bh) * T_ + tq] = row_max[i] + logf(row_sum[i]);
  }
}

// One warp per (b, h, t): D (B,NH,T) = rowsum(dout * out) over the head's hs channels.
template <typename E>
__global__ void RowDotKernel(float* D, const E* dout, const E* out, int B, int T_, int NH, int hs) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(B) * NH * T_) return;
  const int lane = threadIdx.x % 32, C = NH * hs;
  const int64_t bh = row / T_;
  const int t = static_cast<int>(row % T_);
  const int b = static_cast<int>(bh / NH), h = static_cast<int>(bh % NH);
  const int64_t offset = (static_cast<int64_t>(b) * T_ + t) * C + h * hs;
  float acc = 0.0f;
  for (int d = lane; d < hs; d += 32) acc += ToFloat(dout[offset + d]) * ToFloat(out[offset + d]);
  acc = WarpSum(acc);
  if (lane == 0) D[row] = acc;
}

// grid (ceil(T/kTile), B*NKV): the block's kTile keys of key/value head kvh; for each query head
// of its group in turn, query tiles from the diagonal to T (one head: multi-head attention's
// order).
template <typename E, int kChunks>
__global__ void __launch_bounds__(kWarps * 32)
    TiledKeyGradKernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* D,
                       int T_, int NH, int NKV, int hs, float scale, int window, float softcap) {
  extern __shared__ float smem[];
  const int C = NH * hs, ld = hs + 1, group = NH / NKV;
  float* k_s = smem;
  float* v_s = k_s + kTile * ld;
  float* q_s = v_s + kTile * ld;
  float* do_s = q_s + kTile * ld;
  float* lse_s = do_s + kTile * ld;
  float* d_s = lse_s + kTile;
  const int b = blockIdx.y / NKV, kvh = blockIdx.y % NKV;
  const int k0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t width = static_cast<int64_t>(NH + 2 * NKV) * hs;
  const int64_t kv_offset = static_cast<int64_t>(b) * T_ * width + C + kvh * hs;
  LoadTile(k_s, qkv + kv_offset, width, k0, T_, hs, ld);
  LoadTile(v_s, qkv + kv_offset + NKV * hs, width, k0, T_, hs, ld);

  float dk[kRowsPerWarp][kChunks] = {};
  float dv[kRowsPerWarp][kChunks] = {};
  // One past the last query whose window reaches the tile's last key (T without a window).
  const int q_end = window > 0
                        ? static_cast<int>(min(static_cast<int64_t>(T_),
                                               static_cast<int64_t>(k0) + kTile - 1 + window))
                        : T_;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t bh = static_cast<int64_t>(b) * NH + h;
    const E* head = qkv + static_cast<int64_t>(b) * T_ * width + h * hs;
    const E* dout_head = dout + static_cast<int64_t>(b) * T_ * C + h * hs;
    for (int q0 = k0; q0 < q_end; q0 += kTile) {
      __syncthreads();
      LoadTile(q_s, head, width, q0, T_, hs, ld);
      LoadTile(do_s, dout_head, C, q0, T_, hs, ld);
      if (threadIdx.x < kTile) {
        const int t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < T_ ? lse[static_cast<int64_t>(bh) * T_ + t] : 0.0f;
        d_s[threadIdx.x] = t < T_ ? D[static_cast<int64_t>(bh) * T_ + t] : 0.0f;
      }
      __syncthreads();
      const int queries = min(kTile, T_ - q0);
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i, tk = k0 + r;
        if (tk >= T_) continue;  // uniform across the warp
        const int tq = q0 + lane;
        const bool visible = tq < T_ && tq >= tk && (window <= 0 || tq - tk < window);
        float p = 0.0f, ds = 0.0f;
        if (visible && softcap > 0.0f) {
          const float u = tanhf(scale * Dot(q_s + lane * ld, k_s + r * ld, hs) / softcap);
          p = expf(softcap * u - lse_s[lane]);
          ds = p * (Dot(do_s + lane * ld, v_s + r * ld, hs) - d_s[lane]) * (1.0f - u * u);
        } else if (visible) {
          const float s = scale * Dot(q_s + lane * ld, k_s + r * ld, hs);
          p = expf(s - lse_s[lane]);
          ds = p * (Dot(do_s + lane * ld, v_s + r * ld, hs) - d_s[lane]);
        }
        for (int j = 0; j < queries; ++j) {
          const float pj = __shfl_sync(kFullMask, p, j);
          const float dsj = __shfl_sync(kFullMask, ds, j);
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
            const int d = lane + 32 * c;
            if (d < hs) {
              dv[i][c] = fmaf(pj, do_s[j * ld + d], dv[i][c]);
              dk[i][c] = fmaf(dsj, q_s[j * ld + d], dk[i][c]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int tk = k0 + warp * kRowsPerWarp + i;
    if (tk >= T_) continue;
    E* dk_row = dqkv + (static_cast<int64_t>(b) * T_ + tk) * width + C + kvh * hs;
    E* dv_row = dk_row + NKV * hs;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < hs) {
        dk_row[d] = FromFloat<E>(ToFloat(dk_row[d]) + scale * dk[i][c]);
        dv_row[d] = FromFloat<E>(ToFloat(dv_row[d]) + dv[i][c]);
      }
    }
  }
}

// grid (ceil(T/kTile), B*NH): the block's kTile queries; key tiles up to the diagonal.
template <typename E, int kChunks>
__global__ void __launch_bounds__(kWarps * 32)
    TiledQueryGradKernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* D,
                         int T_, int NH, int NKV, int hs, float scale, int window, float softcap) {
  extern __shared__ float smem[];
  const int C = NH * hs, ld = hs + 1;
  float* q_s = smem;
  float* do_s = q_s + kTile * ld;
  float* k_s = do_s + kTile * ld;
  float* v_s = k_s + kTile * ld;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t width = static_cast<int64_t>(NH + 2 * NKV) * hs;
  const E* head = qkv + static_cast<int64_t>(b) * T_ * width + h * hs;
  const E* k_head = qkv + static_cast<int64_t>(b) * T_ * width + C + h / (NH / NKV) * hs;
  const E* v_head = k_head + NKV * hs;
  LoadTile(q_s, head, width, q0, T_, hs, ld);
  LoadTile(do_s, dout + static_cast<int64_t>(b) * T_ * C + h * hs, C, q0, T_, hs, ld);
  float row_lse[kRowsPerWarp], row_d[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int tq = q0 + warp * kRowsPerWarp + i;
    row_lse[i] = tq < T_ ? lse[static_cast<int64_t>(bh) * T_ + tq] : 0.0f;
    row_d[i] = tq < T_ ? D[static_cast<int64_t>(bh) * T_ + tq] : 0.0f;
  }

  float dq[kRowsPerWarp][kChunks] = {};
  const int q_last = min(T_, q0 + kTile) - 1;
  for (int k0 = FirstKeyTile(q0, window); k0 <= q_last; k0 += kTile) {
    __syncthreads();
    LoadTile(k_s, k_head, width, k0, T_, hs, ld);
    LoadTile(v_s, v_head, width, k0, T_, hs, ld);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i, tq = q0 + r;
      // Uniform across the warp: a tile wholly after the row or before its window.
      if (tq >= T_ || k0 > tq || BeforeWindow(k0, tq, window)) continue;
      const int first = max(0, AttentionWindowStart(tq, window) - k0);  // the row's first lane
      const bool visible = k0 + lane <= tq && lane >= first;
      float ds = 0.0f;
      if (visible && softcap > 0.0f) {
        const float u = tanhf(scale * Dot(q_s + r * ld, k_s + lane * ld, hs) / softcap);
        const float p = expf(softcap * u - row_lse[i]);
        ds = p * (Dot(do_s + r * ld, v_s + lane * ld, hs) - row_d[i]) * (1.0f - u * u);
      } else if (visible) {
        const float s = scale * Dot(q_s + r * ld, k_s + lane * ld, hs);
        const float p = expf(s - row_lse[i]);
        ds = p * (Dot(do_s + r * ld, v_s + lane * ld, hs) - row_d[i]);
      }
      const int keys = min(kTile, tq - k0 + 1);
      for (int j = first; j < keys; ++j) {
        const float dsj = __shfl_sync(kFullMask, ds, j);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = lane + 32 * c;
          if (d < hs) dq[i][c] = fmaf(dsj, k_s[j * ld + d], dq[i][c]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int tq = q0 + warp * kRowsPerWarp + i;
    if (tq >= T_) continue;
    E* dq_row = dqkv + (static_cast<int64_t>(b) * T_ + tq) * width + h * hs;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < hs) dq_row[d] = FromFloat<E>(ToFloat(dq_row[d]) + scale * dq[i][c]);
    }
  }
}

// Calls body(std::integral_constant<int, kChunks>) for kChunks = ceil(hs/32) in 1..4.
template <typename Body>
Status DispatchChunks(int hs, Body body) {
  switch ((hs + 31) / 32) {
    case 1: return body(std::integral_constant<int, 1>{});
    case 2: return body(std::integral_constant<int, 2>{});
    case 3: return body(std::integral_constant<int, 3>{});
    default: return body(std::integral_constant<int, 4>{});
  }
}

// Dynamic shared memory above the 48 KiB default needs the kernel's opt-in (hs = 128 backward
// takes about 65 KiB; sm_80 and sm_90 allow far more).
template <typename Kernel>
Status AllowSharedBytes(Kernel kernel, size_t bytes) {
  HOIST_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return Status::Ok();
}

Status CheckGrid(const char* op, int B, int NH) {
  // One grid row per (b, h): grid.y is limited to 65535.
  if (static_cast<int64_t>(B) * NH > 65535) {
    return InvalidArgumentError(std::string(op) +
                                ": B*NH = " + std::to_string(static_cast<int64_t>(B) * NH) +
                                " exceeds 65535 (one grid row per batch row and head); use a "
                                "smaller micro-batch");
  }
  return Status::Ok();
}

Status CheckTiledShape(const char* op, int B, int T, int C, int NH) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "B", B));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "T", T));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "C", C));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NH", NH));
  if (C % NH != 0) {
    return InvalidArgumentError(std::string(op) + ": C (" + std::to_string(C) +
                                ") is not a multiple of NH (" + std::to_string(NH) + ")");
  }
  if (C / NH > kMaxHeadSize) {
    return InvalidArgumentError(std::string(op) + ": head size C/NH = " + std::to_string(C / NH) +
                                " exceeds " + std::to_string(kMaxHeadSize));
  }
  return CheckGrid(op, B, NH);
}

Status CheckTiledGqaShape(const char* op, int B, int T, int NH, int NKV, int hd) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "B", B));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "T", T));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NH", NH));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NKV", NKV));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "hd", hd));
  if (NH % NKV != 0) {
    return InvalidArgumentError(std::string(op) + ": NH (" + std::to_string(NH) +
                                ") is not a multiple of NKV (" + std::to_string(NKV) + ")");
  }
  if (hd > kMaxHeadSize) {
    return InvalidArgumentError(std::string(op) + ": head size hd = " + std::to_string(hd) +
                                " exceeds " + std::to_string(kMaxHeadSize));
  }
  return CheckGrid(op, B, NH);
}

Status ForwardTiledImpl(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                        int hs, const AttentionOptions& options, DType type, cudaStream_t stream) {
  const float scale = AttentionScale(options, hs);
  const dim3 grid(CeilDiv(T, kTile), B * NH);
  const size_t shared_bytes = 3 * kTile * (hs + 1) * sizeof(float);
  const auto launch = [&](auto tag) -> Status {
    using E = decltype(tag);
    return DispatchChunks(hs, [&](auto chunks) -> Status {
      const auto kernel = TiledForwardKernel<E, decltype(chunks)::value>;
      HOIST_RETURN_IF_ERROR(AllowSharedBytes(kernel, shared_bytes));
      kernel<<<grid, kWarps * 32, shared_bytes, stream>>>(
          static_cast<E*>(out), lse, static_cast<const E*>(qkv), T, NH, NKV, hs, scale,
          options.window, options.softcap);
      HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
      return Status::Ok();
    });
  };
  return HOIST_CUDA_DISPATCH(type, launch);
}

Status BackwardTiledImpl(void* dqkv, const void* dout, const void* qkv, const void* out,
                         const float* lse, void* workspace, int B, int T, int NH, int NKV, int hs,
                         const AttentionOptions& options, DType type, cudaStream_t stream) {
  const float scale = AttentionScale(options, hs);
  float* D = static_cast<float*>(workspace);
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
  constexpr int kRowThreads = 256;
  const int row_blocks = CeilDiv(rows, kRowThreads / 32);
  const dim3 key_grid(CeilDiv(T, kTile), B * NKV), query_grid(CeilDiv(T, kTile), B * NH);
  const size_t shared_bytes = (4 * kTile * (hs + 1) + 2 * kTile) * sizeof(float);
  const auto launch = [&](auto tag) -> Status {
    using E = decltype(tag);
    RowDotKernel<E><<<row_blocks, kRowThreads, 0, stream>>>(
        D, static_cast<const E*>(dout), static_cast<const E*>(out), B, T, NH, hs);
    HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
    return DispatchChunks(hs, [&](auto chunks) -> Status {
      constexpr int kChunks = decltype(chunks)::value;
      const auto key_kernel = TiledKeyGradKernel<E, kChunks>;
      const auto query_kernel = TiledQueryGradKernel<E, kChunks>;
      HOIST_RETURN_IF_ERROR(AllowSharedBytes(key_kernel, shared_bytes));
      HOIST_RETURN_IF_ERROR(AllowSharedBytes(query_kernel, shared_bytes));
      key_kernel<<<key_grid, kWarps * 32, shared_bytes, stream>>>(
          static_cast<E*>(dqkv), static_cast<const E*>(dout), static_cast<const E*>(qkv), lse, D, T,
          NH, NKV, hs, scale, options.window, options.softcap);
      HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
      query_kernel<<<query_grid, kWarps * 32, shared_bytes, stream>>>(
          static_cast<E*>(dqkv), static_cast<const E*>(dout), static_cast<const E*>(qkv), lse, D, T,
          NH, NKV, hs, scale, options.window, options.softcap);
      HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
      return Status::Ok();
    });
  };
  return HOIST_CUDA_DISPATCH(type, launch);
}

}  // namespace

Status AttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                             DType type, cudaStream_t stream) {
  constexpr const char* kOp = "AttentionForwardTiled";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "lse", lse));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckTiledShape(kOp, B, T, C, NH));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return ForwardTiledImpl(out, lse, qkv, B, T, NH, NH, C / NH, AttentionOptions{}, type, stream);
}

Status AttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, void* workspace, int B, int T, int C, int NH,
                              DType type, cudaStream_t stream) {
  constexpr const char* kOp = "AttentionBackwardTiled";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dqkv", dqkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "lse", lse));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckTiledShape(kOp, B, T, C, NH));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return BackwardTiledImpl(dqkv, dout, qkv, out, lse, workspace, B, T, NH, NH, C / NH,
                           AttentionOptions{}, type, stream);
}

Status GqaAttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T, int NH,
                                int NKV, int hd, const AttentionOptions& options, DType type,
                                cudaStream_t stream) {
  constexpr const char* kOp = "GqaAttentionForwardTiled";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "lse", lse));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckTiledGqaShape(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckAttentionOptions(kOp, options));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return ForwardTiledImpl(out, lse, qkv, B, T, NH, NKV, hd, options, type, stream);
}

Status GqaAttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv, const void* out,
                                 const float* lse, void* workspace, int B, int T, int NH, int NKV,
                                 int hd, const AttentionOptions& options, DType type,
                                 cudaStream_t stream) {
  constexpr const char* kOp = "GqaAttentionBackwardTiled";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dqkv", dqkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "lse", lse));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckTiledGqaShape(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckAttentionOptions(kOp, options));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return BackwardTiledImpl(dqkv, dout, qkv, out, lse, workspace, B, T, NH, NKV, hd, options, type,
                           stream);
}

}  // namespace hoist::kernels::cuda
