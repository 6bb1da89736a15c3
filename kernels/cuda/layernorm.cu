#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/layernorm.h"

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;
using detail::WarpSum;

constexpr int kWarpsPerBlock = 8;
constexpr float kEps = 1e-5f;

// Parameter gradients: a block is 32 columns by kParamRows threads and walks a chunk of rows.
constexpr int kParamRows = 8;
constexpr int kMinRowsPerChunk = 128;
constexpr int kMaxGridY = 65535;

// The CPU twin's two-pass statistics (mean, then the mean of squared deviations), so a large mean
// does not cancel the variance.
template <typename T>
__global__ void LayerNormForwardKernel(T* __restrict__ out, float* __restrict__ mean_out,
                                       float* __restrict__ rstd_out, const T* __restrict__ inp,
                                       const T* __restrict__ weight, const T* __restrict__ bias,
                                       int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // whole warps leave together: the shuffles below stay full-warp
  const T* x = inp + static_cast<int64_t>(row) * C;
  T* y = out + static_cast<int64_t>(row) * C;

  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += ToFloat(x[c]);
  const float mean = WarpSum(sum) / static_cast<float>(C);
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = ToFloat(x[c]) - mean;
    sq += d * d;
  }
  const float rstd = 1.0f / sqrtf(WarpSum(sq) / static_cast<float>(C) + kEps);
  for (int c = lane; c < C; c += 32) {
    const float norm = (ToFloat(x[c]) - mean) * rstd;
    y[c] = FromFloat<T>(norm * ToFloat(weight[c]) + ToFloat(bias[c]));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename T>
__global__ void LayerNormBackwardInputKernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                             const T* __restrict__ inp,
                                             const T* __restrict__ weight,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const int64_t offset = static_cast<int64_t>(row) * C;
  const T* x = inp + offset;
  const T* dy = dout + offset;
  T* dx = dinp + offset;
  const float m = mean[row], r = rstd[row];

  float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float norm = (ToFloat(x[c]) - m) * r;
    const float dnorm = ToFloat(weight[c]) * ToFloat(dy[c]);
    sum_dnorm += dnorm;
    sum_dnorm_norm += dnorm * norm;
  }
  const float mean_dnorm = WarpSum(sum_dnorm) / static_cast<float>(C);
  const float mean_dnorm_norm = WarpSum(sum_dnorm_norm) / static_cast<float>(C);
  for (int c = lane; c < C; c += 32) {
    const float norm = (ToFloat(x[c]) - m) * r;
    const float dnorm = ToFloat(weight[c]) * ToFloat(dy[c]);
    const float grad = r * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
    dx[c] = FromFloat<T>(ToFloat(dx[c]) + grad);
  }
}

// Block (32, kParamRows): threadIdx.x picks the column (coalesced across the warp), threadIdx.y
// a row phase. Each thread sums its rows of the chunk in registers, the block adds the
// kParamRows partials in shared memory, and one atomic per column and block reaches global memory.
template <typename T>
__global__ void LayerNormBackwardParamKernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                             const T* __restrict__ dout, const T* __restrict__ inp,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd, int N, int C,
                                             int rows_per_chunk) {
  __shared__ float dw_part[kParamRows][32];
  __shared__ float db_part[kParamRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int row_begin = blockIdx.y * rows_per_chunk;
  const int row_end = min(N, row_begin + rows_per_chunk);
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (int row = row_begin + threadIdx.y; row < row_end; row += kParamRows) {
      const int64_t at = static_cast<int64_t>(row) * C + c;
      const float dy = ToFloat(dout[at]);
      dw += (ToFloat(inp[at]) - mean[row]) * rstd[row] * dy;
      db += dy;
    }
  }
  dw_part[threadIdx.y][threadIdx.x] = dw;
  db_part[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kParamRows; ++k) {
      dw += dw_part[k][threadIdx.x];
      db += db_part[k][threadIdx.x];
    }
    if (dweight != nullptr) atomicAdd(dweight + c, dw);
    if (dbias != nullptr) atomicAdd(dbias + c, db);
  }
}

template <typename T>
Status LaunchLayerNormForward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                              const T* bias, int N, int C, cudaStream_t stream) {
  const int blocks = detail::CeilDiv(N, kWarpsPerBlock);
  LayerNormForwardKernel<T>
      <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

template <typename T>
Status LaunchLayerNormBackward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                               const T* weight, const float* mean, const float* rstd, int N, int C,
                               cudaStream_t stream) {
  const int blocks = detail::CeilDiv(N, kWarpsPerBlock);
  LayerNormBackwardInputKernel<T>
      <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  if (dweight == nullptr && dbias == nullptr) return Status::Ok();  // frozen parameters
  // Chunks long enough that the grid's y dimension stays within CUDA's limit for any N.
  const int rows_per_chunk = std::max(kMinRowsPerChunk, detail::CeilDiv(N, kMaxGridY));
  const dim3 grid(detail::CeilDiv(C, 32), detail::CeilDiv(N, rows_per_chunk));
  LayerNormBackwardParamKernel<T><<<grid, dim3(32, kParamRows), 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C, rows_per_chunk);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace

Status LayerNormForward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                        const void* bias, int N, int C, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "LayerNormForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "mean", mean));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "rstd", rstd));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "weight", weight));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "bias", bias));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "C", C));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) {
    using T = decltype(tag);
    return LaunchLayerNormForward<T>(static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp),
                                     static_cast<const T*>(weight), static_cast<const T*>(bias), N,
                                     C, stream);
  });
}

Status LayerNormBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                         const void* inp, const void* weight, const float* mean, const float* rstd,
                         int N, int C, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "LayerNormBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dinp", dinp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "weight", weight));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "mean", mean));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "rstd", rstd));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "C", C));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) {
    using T = decltype(tag);
    return LaunchLayerNormBackward<T>(static_cast<T*>(dinp), dweight, dbias,
                                      static_cast<const T*>(dout), static_cast<const T*>(inp),
                                      static_cast<const T*>(weight), mean, rstd, N, C, stream);
  });
}

}  // namespace hoist::kernels::cuda
