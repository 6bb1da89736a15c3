// The direct attention: batched cuBLAS GEMMs per (b, h) around a causal softmax kernel.
//
// q, k and v are first copied out of qkv into head-major arrays (B,NH,T,hs) of the same type
// (exact). Grouped-query heads (NKV < NH key/value heads) are copied once per query head of their
// group, so everything below is multi-head attention with C = NH*hs; the backward adds each
// shared head's gradient, summed over its group in head order, into dqkv. Every GEMM runs under
// CUBLAS_COMPUTE_32F in the default math mode and writes fp32:
//   - fp32: true fp32 throughout (never TF32); att, already fp32, is multiplied as it is stored.
//   - bf16/fp16: 16-bit inputs on the tensor cores with fp32 accumulation. The probabilities
//     enter P v and P^T dout as a 16-bit copy P of att (rounded once, as the CPU model rounds
//     the att it keeps in 16-bit modes), and dL/dscores enters dq and dk rounded once to 16 bits.
//     The backward re-derives P from att: the forward's copy lives in the workspace, which other
//     layers reuse between the two passes.
// Each output is rounded once to `type` when it is copied back (added, for the gradients).
//
// Workspace in bytes, with e = sizeof(type), BTC = B*T*C and BHTT = B*NH*T*T:
//   [0, 4e BTC)                    q, k, v, dout heads (B,NH,T,hs), `type`; the forward's out
//                                  heads (fp32) take the dout slot where `type` is fp32
//   [4e BTC, 4e BTC + 12 BTC)      dq, dk, dv heads, fp32 (backward); the forward's out heads
//                                  take the dq slot where `type` is 16-bit
//   [4e BTC + 12 BTC, + 4 BHTT)    scores region, one (T,T) fp32 block per head:
//                                  fp32 backward: dL/datt, then dL/dscores in place
//                                  16-bit forward: P, packed (the first 2 BHTT bytes)
//                                  16-bit backward: P, packed; then dL/datt (fp32), then
//                                  dL/dscores rounded to `type` in place, each row over the
//                                  first half of its own fp32 row (leading dimension 2T)
// The forward writes its scores straight into att and normalises them there.
//
// The attention options (attention_options.h) act in the two softmax kernels: the window masks
// each row to its keys (the products still cover all T x T), the softcap caps the scores before
// the softmax, and its slope in the backward needs the scores again, which no region holds: the
// backward kernel recomputes each visible score's q . k from the q and k heads (a dot product of
// hs per score on the CUDA cores, work the direct path pays only with a softcap).
#include <cublas_v2.h>

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

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

// src (B,T,parts*C) -> dst + part*B*T*C, each (B,NH,T,hs), both `T`.
template <typename T>
__global__ void PermuteToHeadsKernel(T* dst, const T* src, int B, int T_, int C, int NH,
                                     int parts) {
  const int64_t width = static_cast<int64_t>(parts) * C;
  const int64_t total = static_cast<int64_t>(B) * T_ * width;
  const int64_t part_size = static_cast<int64_t>(B) * T_ * C;
  const int hs = C / NH;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / width;
    const int rest = static_cast<int>(i - bt * width);
    const int part = rest / C, c = rest % C;
    const int b = static_cast<int>(bt / T_), t = static_cast<int>(bt % T_);
    const int h = c / hs, d = c % hs;
    dst[part * part_size + ((static_cast<int64_t>(b) * NH + h) * T_ + t) * hs + d] = src[i];
  }
}

// The inverse: heads (parts of (B,NH,T,hs) fp32) -> dst (B,T,parts*C) in `T`, stored or added.
template <typename T, bool kAccumulate>
__global__ void HeadsToRowsKernel(T* dst, const float* src, int B, int T_, int C, int NH,
                                  int parts) {
  const int64_t width = static_cast<int64_t>(parts) * C;
  const int64_t total = static_cast<int64_t>(B) * T_ * width;
  const int64_t part_size = static_cast<int64_t>(B) * T_ * C;
  const int hs = C / NH;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / width;
    const int rest = static_cast<int>(i - bt * width);
    const int part = rest / C, c = rest % C;
    const int b = static_cast<int>(bt / T_), t = static_cast<int>(bt % T_);
    const int h = c / hs, d = c % hs;
    const float value =
        src[part * part_size + ((static_cast<int64_t>(b) * NH + h) * T_ + t) * hs + d];
    dst[i] = FromFloat<T>(kAccumulate ? ToFloat(dst[i]) + value : value);
  }
}

// Grouped-query layout (NKV < NH): qkv (B,T,(NH+2*NKV)*hs) -> q, k, v heads (B,NH,T,hs) each at
// dst + part*B*T*NH*hs, key/value head h/group copied for every query head h of its group (HF's
// repeat_kv), so the products below run as multi-head attention. One thread per destination
// element.
template <typename T>
__global__ void GatherGqaHeadsKernel(T* dst, const T* src, int B, int T_, int NH, int NKV, int hs) {
  const int64_t part_size = static_cast<int64_t>(B) * NH * T_ * hs;
  const int64_t total = 3 * part_size;
  const int64_t width = static_cast<int64_t>(NH + 2 * NKV) * hs;
  const int group = NH / NKV;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int part = static_cast<int>(i / part_size);
    int64_t rest = i - part * part_size;
    const int d = static_cast<int>(rest % hs);
    rest /= hs;
    const int t = static_cast<int>(rest % T_);
    rest /= T_;
    const int h = static_cast<int>(rest % NH);
    const int b = static_cast<int>(rest / NH);
    const int64_t column = part == 0   ? static_cast<int64_t>(h) * hs
                           : part == 1 ? static_cast<int64_t>(NH + h / group) * hs
                                       : static_cast<int64_t>(NH + NKV + h / group) * hs;
    dst[i] = src[(static_cast<int64_t>(b) * T_ + t) * width + column + d];
  }
}

// The inverse for the gradients: dq, dk, dv heads (parts of (B,NH,T,hs) fp32) added into dqkv
// (B,T,(NH+2*NKV)*hs) of `T`; a shared key/value head receives the sum over its group's query
// heads, in head order, rounded once. One thread per dqkv element.
template <typename T>
__global__ void ScatterGqaHeadsKernel(T* dst, const float* src, int B, int T_, int NH, int NKV,
                                      int hs) {
  const int64_t width = static_cast<int64_t>(NH + 2 * NKV) * hs;
  const int64_t total = static_cast<int64_t>(B) * T_ * width;
  const int64_t part_size = static_cast<int64_t>(B) * NH * T_ * hs;
  const int group = NH / NKV;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / width;
    const int c = static_cast<int>(i - bt * width);
    const int b = static_cast<int>(bt / T_), t = static_cast<int>(bt % T_);
    const int head = c / hs, d = c % hs;
    float value = 0.0f;
    if (head < NH) {
      value = src[((static_cast<int64_t>(b) * NH + head) * T_ + t) * hs + d];
    } else {
      const bool is_k = head < NH + NKV;
      const int kvh = is_k ? head - NH : head - NH - NKV;
      const float* part = src + (is_k ? 1 : 2) * part_size;
      for (int g = 0; g < group; ++g) {
        value += part[((static_cast<int64_t>(b) * NH + kvh * group + g) * T_ + t) * hs + d];
      }
    }
    dst[i] = FromFloat<T>(ToFloat(dst[i]) + value);
  }
}

// One warp per row (b, h, t) of att (B,NH,T,T), which holds the scaled scores: the softmax over
// the row's keys [lo, t] (lo = AttentionWindowStart(t, window)), each score first capped to
// softcap * tanh(s / softcap) where softcap > 0; zeros in the other columns. For a 16-bit P,
// probs (B,NH,T,T) also receives each probability rounded to P; for P = float, probs is unused
// (att is the P of the products).
template <typename P>
__global__ void CausalSoftmaxKernel(float* att, P* probs, int rows, int T_, int window,
                                    float softcap) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int t = row % T_;
  const int lo = AttentionWindowStart(t, window);
  float* a = att + static_cast<int64_t>(row) * T_;
  if (softcap > 0.0f) {  // each lane caps the columns it reads next
    for (int s = lo + lane; s <= t; s += 32) a[s] = softcap * tanhf(a[s] / softcap);
  }
  float row_max = -INFINITY;
  for (int s = lo + lane; s <= t; s += 32) row_max = fmaxf(row_max, a[s]);
  row_max = WarpMax(row_max);
  float sum = 0.0f;
  for (int s = lo + lane; s <= t; s += 32) {
    const float e = expf(a[s] - row_max);
    a[s] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / WarpSum(sum);
  __syncwarp();  // where lo is not a multiple of 32, a lane below reads what another one wrote
  if constexpr (std::is_same_v<P, float>) {
    for (int s = lane; s < T_; s += 32) a[s] = s >= lo && s <= t ? a[s] * inv_sum : 0.0f;
  } else {
    P* p = probs + static_cast<int64_t>(row) * T_;
    for (int s = lane; s < T_; s += 32) {
      const float value = s >= lo && s <= t ? a[s] * inv_sum : 0.0f;
      a[s] = value;
      p[s] = FromFloat<P>(value);
    }
  }
}

// The softcap's slope at a score, 1 - tanh^2(s / softcap), with s = scale (q . k) recomputed in
// fp32 from a query row and a key row of the heads (hs elements each).
template <typename E>
__device__ float SoftCapSlope(const E* q, const E* k, int hs, float scale, float softcap) {
  float dot = 0.0f;
  for (int d = 0; d < hs; ++d) dot = fmaf(ToFloat(q[d]), ToFloat(k[d]), dot);
  const float u = tanhf(scale * dot / softcap);
  return 1.0f - u * u;
}

// One warp per row: datt (dL/dP) becomes dL/d(q.k) = scale * P * (dP - sum_s P dP) over the
// row's keys [lo, t], times the softcap's slope where softcap > 0 (q and k: the (B,NH,T,hs) heads
// of `G`, read only then), 0 in the other columns. G = float: in place. A 16-bit G: rounded to G
// and stored over the first half of the row's own bytes (element s inside fp32 element s/2), so
// the 16-bit matrix has leading dimension 2T. A chunk of 32 columns overwrites only fp32 elements
// at or before its own, and the warp has read those already, except within the first chunk,
// where __syncwarp orders its reads before its writes.
template <typename G>
__global__ void CausalSoftmaxBackwardKernel(float* datt, const float* att, int rows, int T_,
                                            float scale, int window, float softcap, const G* q,
                                            const G* k, int hs) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int t = row % T_;
  const int lo = AttentionWindowStart(t, window);
  const float* p = att + static_cast<int64_t>(row) * T_;
  float* g = datt + static_cast<int64_t>(row) * T_;
  float dot = 0.0f;
  for (int s = lo + lane; s <= t; s += 32) dot += p[s] * g[s];
  dot = WarpSum(dot);
  // Row `row` of the heads is query t; key s is row row - t + s.
  const G* q_row = q + static_cast<int64_t>(row) * hs;
  const G* k_first = k + static_cast<int64_t>(row - t) * hs;
  const auto grad = [&](int s) -> float {
    if (s < lo || s > t) return 0.0f;
    const float value = scale * p[s] * (g[s] - dot);
    if (softcap <= 0.0f) return value;
    return value * SoftCapSlope(q_row, k_first + int64_t{s} * hs, hs, scale, softcap);
  };
  if constexpr (std::is_same_v<G, float>) {
    for (int s = lane; s < T_; s += 32) g[s] = grad(s);
  } else {
    G* out = reinterpret_cast<G*>(g);
    // Every lane runs every chunk (the bound is the warp's, not the lane's): __syncwarp needs
    // the whole warp.
    for (int s0 = 0; s0 < T_; s0 += 32) {
      const int s = s0 + lane;
      const float value = grad(s);
      __syncwarp();
      if (s < T_) out[s] = FromFloat<G>(value);
    }
  }
}

// dst[i] = src[i] rounded to `T`, i < n.
template <typename T>
__global__ void RoundKernel(T* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = FromFloat<T>(src[i]);
  }
}

int ElementwiseBlocks(int64_t n) {
  constexpr int64_t kMaxBlocks = 65536;
  return static_cast<int>(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

Status LaunchPermute(void* dst, const void* src, int B, int T, int C, int NH, int parts, DType type,
                     cudaStream_t stream) {
  const int blocks = ElementwiseBlocks(static_cast<int64_t>(B) * T * parts * C);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    PermuteToHeadsKernel<E><<<blocks, kThreads, 0, stream>>>(
        static_cast<E*>(dst), static_cast<const E*>(src), B, T, C, NH, parts);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

template <bool kAccumulate>
Status LaunchHeadsToRows(void* dst, const float* src, int B, int T, int C, int NH, int parts,
                         DType type, cudaStream_t stream) {
  const int blocks = ElementwiseBlocks(static_cast<int64_t>(B) * T * parts * C);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    HeadsToRowsKernel<E, kAccumulate>
        <<<blocks, kThreads, 0, stream>>>(static_cast<E*>(dst), src, B, T, C, NH, parts);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status LaunchGatherGqaHeads(void* dst, const void* src, int B, int T, int NH, int NKV, int hs,
                            DType type, cudaStream_t stream) {
  const int blocks = ElementwiseBlocks(3 * static_cast<int64_t>(B) * NH * T * hs);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    GatherGqaHeadsKernel<E><<<blocks, kThreads, 0, stream>>>(
        static_cast<E*>(dst), static_cast<const E*>(src), B, T, NH, NKV, hs);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status LaunchScatterGqaHeads(void* dst, const float* src, int B, int T, int NH, int NKV, int hs,
                             DType type, cudaStream_t stream) {
  const int blocks = ElementwiseBlocks(static_cast<int64_t>(B) * T * (NH + 2 * NKV) * hs);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    ScatterGqaHeadsKernel<E>
        <<<blocks, kThreads, 0, stream>>>(static_cast<E*>(dst), src, B, T, NH, NKV, hs);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

// probs: P in `type` (unused for fp32).
Status LaunchCausalSoftmax(float* att, void* probs, int rows, int T, int window, float softcap,
                           DType type, cudaStream_t stream) {
  const int blocks = CeilDiv(rows, kWarpsPerBlock);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    CausalSoftmaxKernel<E>
        <<<blocks, kThreads, 0, stream>>>(att, static_cast<E*>(probs), rows, T, window, softcap);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

// q and k: the heads (B,NH,T,hs) in `type`, read only with a softcap.
Status LaunchCausalSoftmaxBackward(float* datt, const float* att, int rows, int T, float scale,
                                   int window, float softcap, const void* q, const void* k, int hs,
                                   DType type, cudaStream_t stream) {
  const int blocks = CeilDiv(rows, kWarpsPerBlock);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    CausalSoftmaxBackwardKernel<E>
        <<<blocks, kThreads, 0, stream>>>(datt, att, rows, T, scale, window, softcap,
                                          static_cast<const E*>(q), static_cast<const E*>(k), hs);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

// For a 16-bit type only (fp32 multiplies att itself).
Status LaunchRound(void* dst, const float* src, int64_t n, DType type, cudaStream_t stream) {
  const int blocks = ElementwiseBlocks(n);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    RoundKernel<E><<<blocks, kThreads, 0, stream>>>(static_cast<E*>(dst), src, n);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

// Column-major C (m,n) = alpha op(A) op(B) + beta C for each of `batch` matrices: A and B of
// ab_type (strides and leading dimensions in its elements), C fp32, fp32 accumulation. 16-bit
// inputs run on the tensor cores; fp32 stays true fp32 (the handle's default math mode).
Status BatchedGemm(BlasHandle& blas, cublasOperation_t trans_a, cublasOperation_t trans_b, int m,
                   int n, int k, float alpha, cudaDataType_t ab_type, const void* a, int lda,
                   int64_t stride_a, const void* b, int ldb, int64_t stride_b, float beta, float* c,
                   int ldc, int64_t stride_c, int batch) {
  HOIST_CUBLAS_RETURN_IF_ERROR(
      cublasGemmStridedBatchedEx(blas.blas(), trans_a, trans_b, m, n, k, &alpha, a, ab_type, lda,
                                 stride_a, b, ab_type, ldb, stride_b, &beta, c, CUDA_R_32F, ldc,
                                 stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

Status CheckShape(const char* op, int B, int T, int C, int NH) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "B", B));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "T", T));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "C", C));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NH", NH));
  if (C % NH != 0) {
    return InvalidArgumentError(std::string(op) + ": C (" + std::to_string(C) +
                                ") is not a multiple of NH (" + std::to_string(NH) + ")");
  }
  return Status::Ok();
}

Status CheckGqaShape(const char* op, int B, int T, int NH, int NKV, int hs) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "B", B));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "T", T));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NH", NH));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NKV", NKV));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "hd", hs));
  if (NH % NKV != 0) {
    return InvalidArgumentError(std::string(op) + ": NH (" + std::to_string(NH) +
                                ") is not a multiple of NKV (" + std::to_string(NKV) + ")");
  }
  return Status::Ok();
}

// The regions of the workspace (see the top of the file).
struct Workspace {
  char* heads;  // q, k, v, dout heads in `type`, each B*T*C: q = heads, then k, v, fourth
  const char* k;
  const char* v;
  char* fourth;  // the dout heads (backward); the forward's fp32 out heads where `type` is fp32
  float* grads;  // dq, dk, dv heads (fp32); the forward's out heads for a 16-bit `type`
  float* scores;
};

Workspace CarveWorkspace(void* workspace, int B, int T, int C, DType type) {
  const int64_t btc = static_cast<int64_t>(B) * T * C;
  const int64_t part = btc * static_cast<int64_t>(DTypeSize(type));
  char* base = static_cast<char*>(workspace);
  Workspace w;
  w.heads = base;
  w.k = base + part;
  w.v = base + 2 * part;
  w.fourth = base + 3 * part;
  w.grads = reinterpret_cast<float*>(base + 4 * part);
  w.scores = w.grads + 3 * btc;
  return w;
}

// The forward and backward of both entries, shapes checked: NH query heads, NKV key/value heads,
// head size hs, C = NH*hs. NKV == NH moves q, k, v with the multi-head permutes; NKV < NH gathers
// the shared heads repeated, then runs the same products.
Status ForwardImpl(BlasHandle& blas, void* out, float* att, const void* qkv, void* workspace, int B,
                   int T, int NH, int NKV, int hs, const AttentionOptions& options, DType type,
                   cudaStream_t stream) {
  const int C = NH * hs, batch = B * NH;
  const int64_t head = static_cast<int64_t>(T) * hs, tt = static_cast<int64_t>(T) * T;
  const float scale = AttentionScale(options, hs);
  const cudaDataType_t ab_type = CudaDataType(type);
  const Workspace w = CarveWorkspace(workspace, B, T, C, type);
  const char *q = w.heads, *k = w.k, *v = w.v;
  // fp32 out heads: in the dout slot where that is fp32 too, else over dq.
  float* out_heads = type == DType::kFloat32 ? reinterpret_cast<float*>(w.fourth) : w.grads;
  // The P of out = P v: att itself for fp32, its 16-bit copy otherwise.
  void* probs = type == DType::kFloat32 ? static_cast<void*>(att) : static_cast<void*>(w.scores);

  HOIST_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas.blas(), stream));
  if (NKV == NH) {
    HOIST_RETURN_IF_ERROR(LaunchPermute(w.heads, qkv, B, T, C, NH, 3, type, stream));
  } else {
    HOIST_RETURN_IF_ERROR(LaunchGatherGqaHeads(w.heads, qkv, B, T, NH, NKV, hs, type, stream));
  }
  // Row-major att (T,T) = scale q k^T is the column-major att^T = scale k q^T.
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, ab_type, k, hs,
                                    head, q, hs, head, 0.0f, att, T, tt, batch));
  HOIST_RETURN_IF_ERROR(
      LaunchCausalSoftmax(att, probs, batch * T, T, options.window, options.softcap, type, stream));
  // out (T,hs) = P v: column-major out^T = v^T P^T.
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, ab_type, v, hs,
                                    head, probs, T, tt, 0.0f, out_heads, hs, head, batch));
  return LaunchHeadsToRows<false>(out, out_heads, B, T, C, NH, 1, type, stream);
}

Status BackwardImpl(BlasHandle& blas, void* dqkv, const void* dout, const void* qkv,
                    const float* att, void* workspace, int B, int T, int NH, int NKV, int hs,
                    const AttentionOptions& options, DType type, cudaStream_t stream) {
  const int C = NH * hs, batch = B * NH;
  const int64_t btc = static_cast<int64_t>(B) * T * C, head = static_cast<int64_t>(T) * hs,
                tt = static_cast<int64_t>(T) * T;
  const float scale = AttentionScale(options, hs);
  const bool fp32 = type == DType::kFloat32;
  const cudaDataType_t ab_type = CudaDataType(type);
  const Workspace w = CarveWorkspace(workspace, B, T, C, type);
  const char *q = w.heads, *k = w.k, *v = w.v;
  char* dout_heads = w.fourth;
  float* dq = w.grads;
  float* dk = dq + btc;
  float* dv = dk + btc;
  float* datt = w.scores;
  // P for dv: att itself for fp32; for 16 bits, att rounded into the (not yet written) scores.
  const void* probs = fp32 ? static_cast<const void*>(att) : static_cast<const void*>(datt);
  // dL/dscores for dq and dk: fp32 in place (leading dimension T), or 16-bit over the first half
  // of each fp32 row (leading dimension 2T, 2 T^2 elements per head).
  const int ds_ld = fp32 ? T : 2 * T;
  const int64_t ds_stride = fp32 ? tt : 2 * tt;

  HOIST_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas.blas(), stream));
  if (NKV == NH) {
    HOIST_RETURN_IF_ERROR(LaunchPermute(w.heads, qkv, B, T, C, NH, 3, type, stream));
  } else {
    HOIST_RETURN_IF_ERROR(LaunchGatherGqaHeads(w.heads, qkv, B, T, NH, NKV, hs, type, stream));
  }
  HOIST_RETURN_IF_ERROR(LaunchPermute(dout_heads, dout, B, T, C, NH, 1, type, stream));
  if (!fp32) HOIST_RETURN_IF_ERROR(LaunchRound(datt, att, batch * tt, type, stream));
  // dv (T,hs) = P^T dout: column-major dv^T = dout^T P. Before datt, which overwrites the
  // 16-bit P.
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, ab_type,
                                    dout_heads, hs, head, probs, T, tt, 0.0f, dv, hs, head, batch));
  // datt (T,T) = dout v^T: column-major datt^T = v dout^T.
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, ab_type, v, hs,
                                    head, dout_heads, hs, head, 0.0f, datt, T, tt, batch));
  HOIST_RETURN_IF_ERROR(LaunchCausalSoftmaxBackward(datt, att, batch * T, T, scale, options.window,
                                                    options.softcap, q, k, hs, type, stream));
  // With dS = dL/dscores (scale included): dq = dS k (column-major dq^T = k^T dS^T) and
  // dk = dS^T q (column-major dk^T = q^T dS).
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, ab_type, k, hs,
                                    head, datt, ds_ld, ds_stride, 0.0f, dq, hs, head, batch));
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, ab_type, q, hs,
                                    head, datt, ds_ld, ds_stride, 0.0f, dk, hs, head, batch));
  if (NKV == NH) return LaunchHeadsToRows<true>(dqkv, dq, B, T, C, NH, 3, type, stream);
  return LaunchScatterGqaHeads(dqkv, dq, B, T, NH, NKV, hs, type, stream);
}

}  // namespace

Status AttentionForward(BlasHandle& blas, void* out, float* att, const void* qkv, void* workspace,
                        int B, int T, int C, int NH, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "AttentionForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "att", att));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckShape(kOp, B, T, C, NH));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return ForwardImpl(blas, out, att, qkv, workspace, B, T, NH, NH, C / NH, AttentionOptions{}, type,
                     stream);
}

Status AttentionBackward(BlasHandle& blas, void* dqkv, const void* dout, const void* qkv,
                         const float* att, void* workspace, int B, int T, int C, int NH, DType type,
                         cudaStream_t stream) {
  constexpr const char* kOp = "AttentionBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dqkv", dqkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "att", att));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckShape(kOp, B, T, C, NH));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return BackwardImpl(blas, dqkv, dout, qkv, att, workspace, B, T, NH, NH, C / NH,
                      AttentionOptions{}, type, stream);
}

Status GqaAttentionForward(BlasHandle& blas, void* out, float* att, const void* qkv,
                           void* workspace, int B, int T, int NH, int NKV, int hd,
                           const AttentionOptions& options, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "GqaAttentionForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "att", att));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckGqaShape(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckAttentionOptions(kOp, options));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return ForwardImpl(blas, out, att, qkv, workspace, B, T, NH, NKV, hd, options, type, stream);
}

Status GqaAttentionBackward(BlasHandle& blas, void* dqkv, const void* dout, const void* qkv,
                            const float* att, void* workspace, int B, int T, int NH, int NKV,
                            int hd, const AttentionOptions& options, DType type,
                            cudaStream_t stream) {
  constexpr const char* kOp = "GqaAttentionBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dqkv", dqkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "att", att));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckGqaShape(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckAttentionOptions(kOp, options));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return BackwardImpl(blas, dqkv, dout, qkv, att, workspace, B, T, NH, NKV, hd, options, type,
                      stream);
}

}  // namespace hoist::kernels::cuda
