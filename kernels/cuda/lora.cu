#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/lora.h"
#include "kernels/dropout_mask.h"
#include "kernels/lora_args.h"

// Row-major through column-major cuBLAS: a row-major (R, C) array at ld is the column-major
// (C, R) matrix at ld, so C (M,N) = op(A) @ op(B) is computed as the column-major
// C^T (N,M) = op(B)^T @ op(A)^T: cuBLAS's first operand is B (transposed where trans_b asks),
// its second A.

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

int BlocksFor(int64_t n) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks)));
}

// C's (M,N) window at ldc = beta * C, or 0 where beta is 0 (C not read): Gemm with K 0.
template <typename T>
__global__ void ScaleWindowKernel(T* c, int M, int N, int64_t ldc, float beta) {
  const int64_t total = static_cast<int64_t>(M) * N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T* at = c + (i / N) * ldc + i % N;
    *at = beta == 0.0f ? FromFloat<T>(0.0f) : FromFloat<T>(beta * ToFloat(*at));
  }
}

template <typename T>
__global__ void DropoutKernel(T* out, const T* inp, int64_t n, float p, float scale,
                              uint64_t base) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool keep = dropout::Keep(base, static_cast<uint64_t>(i), p);
    out[i] = FromFloat<T>(keep ? ToFloat(inp[i]) * scale : 0.0f);
  }
}

}  // namespace

Status Gemm(BlasHandle& blas, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
            int64_t ldc, DType type, DType c_type, cudaStream_t stream) {
  constexpr const char* kOp = "Gemm";
  HOIST_RETURN_IF_ERROR(
      lora_args::CheckGemm(kOp, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, type, c_type));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (M == 0 || N == 0) return Status::Ok();
  if (K == 0) {
    const auto launch = [&](auto tag) {
      using T = decltype(tag);
      ScaleWindowKernel<T>
          <<<BlocksFor(int64_t{M} * N), kThreads, 0, stream>>>(static_cast<T*>(C), M, N, ldc, beta);
    };
    HOIST_CUDA_DISPATCH(c_type, launch);
    HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
    return Status::Ok();
  }
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas.blas(), stream));
  // cuBLAS does not read C where beta is 0 (its documented contract), so NaN there stays out.
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
      blas.blas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M,
      K, &alpha, B, CudaDataType(type), static_cast<int>(ldb), A, CudaDataType(type),
      static_cast<int>(lda), &beta, C, CudaDataType(c_type), static_cast<int>(ldc),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

Status Dropout(void* out, const void* inp, int64_t n, float p, uint64_t seed, DType type,
               cudaStream_t stream) {
  constexpr const char* kOp = "Dropout";
  HOIST_RETURN_IF_ERROR(lora_args::CheckDropout(kOp, out, inp, n, p));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (n == 0) return Status::Ok();
  const uint64_t base = dropout::StreamBase(seed);
  const float scale = dropout::KeepScale(p);  // on the host, as the CPU computes it
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    DropoutKernel<T><<<BlocksFor(n), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), n, p, scale, base);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda
