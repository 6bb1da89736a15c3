// The direct attention: batched cuBLAS GEMMs per (b, h) around a causal softmax kernel.
//
// q, k and v are first copied out of qkv into head-major fp32 arrays (B,NH,T,hs) in the
// workspace: widening bf16/fp16 to fp32 is exact, so every GEMM below runs in plain fp32
// (CUBLAS_COMPUTE_32F, default math mode, no TF32) for every dtype, and att, already fp32, is
// multiplied as it is stored. Each output is rounded once to `type` when it is copied back.
//
// Workspace, in fp32 elements, with BTC = B*T*C and BHTT = B*NH*T*T:
//   [0, 3 BTC)              q, k, v heads (B,NH,T,hs) each          forward and backward
//   [3 BTC, 4 BTC)          out heads (forward) / dout heads (backward)
//   [4 BTC, 7 BTC)          dq, dk, dv heads                         backward
//   [7 BTC, 7 BTC + BHTT)   dL/datt, then dL/dscores in place        backward
// The forward writes its scores straight into att and normalises them there.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

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

// src (B,T,parts*C) in `T` -> dst + part*B*T*C, each (B,NH,T,hs) fp32.
template <typename T>
__global__ void PermuteToHeadsKernel(float* dst, const T* src, int B, int T_, int C, int NH,
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
    dst[part * part_size + ((static_cast<int64_t>(b) * NH + h) * T_ + t) * hs + d] =
        ToFloat(src[i]);
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

// One warp per row (b, h, t) of att (B,NH,T,T), which holds the scaled scores: the causal
// softmax over columns [0, t], zeros after.
__global__ void CausalSoftmaxKernel(float* att, int rows, int T_) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int t = row % T_;
  float* a = att + static_cast<int64_t>(row) * T_;
  float row_max = -INFINITY;
  for (int s = lane; s <= t; s += 32) row_max = fmaxf(row_max, a[s]);
  row_max = WarpMax(row_max);
  float sum = 0.0f;
  for (int s = lane; s <= t; s += 32) {
    const float e = expf(a[s] - row_max);
    a[s] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / WarpSum(sum);
  for (int s = lane; s < T_; s += 32) a[s] = s <= t ? a[s] * inv_sum : 0.0f;
}

// One warp per row: datt (dL/dP) becomes dL/dscores = scale * P * (dP - sum_s P dP), 0 to the
// right of the diagonal.
__global__ void CausalSoftmaxBackwardKernel(float* datt, const float* att, int rows, int T_,
                                            float scale) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int t = row % T_;
  const float* p = att + static_cast<int64_t>(row) * T_;
  float* g = datt + static_cast<int64_t>(row) * T_;
  float dot = 0.0f;
  for (int s = lane; s <= t; s += 32) dot += p[s] * g[s];
  dot = WarpSum(dot);
  for (int s = lane; s < T_; s += 32) g[s] = s <= t ? scale * p[s] * (g[s] - dot) : 0.0f;
}

int ElementwiseBlocks(int64_t n) {
  constexpr int64_t kMaxBlocks = 65536;
  return static_cast<int>(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

Status LaunchPermute(float* dst, const void* src, int B, int T, int C, int NH, int parts,
                     DType type, cudaStream_t stream) {
  const int blocks = ElementwiseBlocks(static_cast<int64_t>(B) * T * parts * C);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    PermuteToHeadsKernel<E>
        <<<blocks, kThreads, 0, stream>>>(dst, static_cast<const E*>(src), B, T, C, NH, parts);
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

// Column-major C (m,n) = alpha op(A) op(B) + beta C for each of `batch` matrices, all fp32.
Status BatchedGemm(BlasHandle& blas, cublasOperation_t trans_a, cublasOperation_t trans_b, int m,
                   int n, int k, float alpha, const float* a, int lda, int64_t stride_a,
                   const float* b, int ldb, int64_t stride_b, float beta, float* c, int ldc,
                   int64_t stride_c, int batch) {
  HOIST_CUBLAS_RETURN_IF_ERROR(
      cublasGemmStridedBatchedEx(blas.blas(), trans_a, trans_b, m, n, k, &alpha, a, CUDA_R_32F, lda,
                                 stride_a, b, CUDA_R_32F, ldb, stride_b, &beta, c, CUDA_R_32F, ldc,
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

}  // namespace

int64_t AttentionWorkspaceBytes(int B, int T, int C, int NH, DType /*type: all fp32*/) {
  const int64_t btc = static_cast<int64_t>(B) * T * C;
  const int64_t bhtt = static_cast<int64_t>(B) * NH * T * T;
  return (7 * btc + bhtt) * static_cast<int64_t>(sizeof(float));
}

Status AttentionForward(BlasHandle& blas, void* out, float* att, const void* qkv, void* workspace,
                        int B, int T, int C, int NH, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "AttentionForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "att", att));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckShape(kOp, B, T, C, NH));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const int hs = C / NH, batch = B * NH;
  const int64_t btc = static_cast<int64_t>(B) * T * C, head = static_cast<int64_t>(T) * hs,
                tt = static_cast<int64_t>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* q = static_cast<float*>(workspace);
  float* k = q + btc;
  float* v = k + btc;
  float* out_heads = v + btc;

  HOIST_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas.blas(), stream));
  HOIST_RETURN_IF_ERROR(LaunchPermute(q, qkv, B, T, C, NH, 3, type, stream));
  // Row-major att (T,T) = scale q k^T is the column-major att^T = scale k q^T.
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, hs, head, q,
                                    hs, head, 0.0f, att, T, tt, batch));
  const int rows = batch * T;
  CausalSoftmaxKernel<<<CeilDiv(rows, kWarpsPerBlock), kThreads, 0, stream>>>(att, rows, T);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  // out (T,hs) = att v: column-major out^T = v^T att^T.
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, head,
                                    att, T, tt, 0.0f, out_heads, hs, head, batch));
  return LaunchHeadsToRows<false>(out, out_heads, B, T, C, NH, 1, type, stream);
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
  const int hs = C / NH, batch = B * NH;
  const int64_t btc = static_cast<int64_t>(B) * T * C, head = static_cast<int64_t>(T) * hs,
                tt = static_cast<int64_t>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* q = static_cast<float*>(workspace);
  float* k = q + btc;
  float* v = k + btc;
  float* dout_heads = v + btc;
  float* dq = dout_heads + btc;
  float* dk = dq + btc;
  float* dv = dk + btc;
  float* datt = dv + btc;

  HOIST_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas.blas(), stream));
  HOIST_RETURN_IF_ERROR(LaunchPermute(q, qkv, B, T, C, NH, 3, type, stream));
  HOIST_RETURN_IF_ERROR(LaunchPermute(dout_heads, dout, B, T, C, NH, 1, type, stream));
  // datt (T,T) = dout v^T: column-major datt^T = v dout^T.
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs, head,
                                    dout_heads, hs, head, 0.0f, datt, T, tt, batch));
  // dv (T,hs) = att^T dout: column-major dv^T = dout^T att.
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dout_heads, hs,
                                    head, att, T, tt, 0.0f, dv, hs, head, batch));
  const int rows = batch * T;
  CausalSoftmaxBackwardKernel<<<CeilDiv(rows, kWarpsPerBlock), kThreads, 0, stream>>>(
      datt, att, rows, T, scale);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  // With dS = dL/dscores (scale included): dq = dS k (column-major dq^T = k^T dS^T) and
  // dk = dS^T q (column-major dk^T = q^T dS).
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, hs, head,
                                    datt, T, tt, 0.0f, dq, hs, head, batch));
  HOIST_RETURN_IF_ERROR(BatchedGemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, hs, head,
                                    datt, T, tt, 0.0f, dk, hs, head, batch));
  return LaunchHeadsToRows<true>(dqkv, dq, B, T, C, NH, 3, type, stream);
}

}  // namespace hoist::kernels::cuda
