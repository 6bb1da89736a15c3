// RMSNorm, rotary embeddings and SwiGLU (kernels/cuda/llama.h): a warp per row for the norm (as
// layernorm.cu), a thread per element or rotated pair for the others.
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/llama.h"

namespace hoist::kernels::cuda {
namespace {

using detail::CeilDiv;
using detail::FromFloat;
using detail::ToFloat;
using detail::WarpSum;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 256;

// RMSNorm's parameter gradient: a block is 32 columns by kParamRows threads over a row chunk.
constexpr int kParamRows = 8;
constexpr int kMinRowsPerChunk = 128;
constexpr int kMaxGridY = 65535;

int ElementwiseBlocks(int64_t n) {
  constexpr int64_t kMaxBlocks = 65536;
  return static_cast<int>(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

template <typename T>
__global__ void RmsNormForwardKernel(T* __restrict__ out, float* __restrict__ rstd_out,
                                     const T* __restrict__ inp, const T* __restrict__ weight, int N,
                                     int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // whole warps leave together
  const T* x = inp + static_cast<int64_t>(row) * C;
  T* y = out + static_cast<int64_t>(row) * C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = ToFloat(x[c]);
    sq += v * v;
  }
  const float rstd = 1.0f / sqrtf(WarpSum(sq) / static_cast<float>(C) + eps);
  for (int c = lane; c < C; c += 32) {
    // The normalised value in `type` (exact for fp32), then the weight: HF's order.
    const float norm = ToFloat(FromFloat<T>(__fmul_rn(ToFloat(x[c]), rstd)));
    y[c] = FromFloat<T>(__fmul_rn(ToFloat(weight[c]), norm));
  }
  if (lane == 0) rstd_out[row] = rstd;
}

template <typename T>
__global__ void RmsNormBackwardInputKernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                           const T* __restrict__ inp, const T* __restrict__ weight,
                                           const float* __restrict__ rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const int64_t offset = static_cast<int64_t>(row) * C;
  const T* x = inp + offset;
  const T* dy = dout + offset;
  T* dx = dinp + offset;
  const float r = rstd[row];
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) {
    dot += ToFloat(weight[c]) * ToFloat(dy[c]) * (ToFloat(x[c]) * r);
  }
  const float mean_dot = WarpSum(dot) / static_cast<float>(C);
  for (int c = lane; c < C; c += 32) {
    const float norm = ToFloat(x[c]) * r;
    const float grad = r * (ToFloat(weight[c]) * ToFloat(dy[c]) - norm * mean_dot);
    dx[c] = FromFloat<T>(ToFloat(dx[c]) + grad);
  }
}

// Block (32, kParamRows): column threadIdx.x, row phase threadIdx.y; partials added in shared
// memory, one atomic per column and block.
template <typename T>
__global__ void RmsNormBackwardParamKernel(float* __restrict__ dweight, const T* __restrict__ dout,
                                           const T* __restrict__ inp,
                                           const float* __restrict__ rstd, int N, int C,
                                           int rows_per_chunk) {
  __shared__ float part[kParamRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int row_begin = blockIdx.y * rows_per_chunk;
  const int row_end = min(N, row_begin + rows_per_chunk);
  float dw = 0.0f;
  if (c < C) {
    for (int row = row_begin + threadIdx.y; row < row_end; row += kParamRows) {
      const int64_t at = static_cast<int64_t>(row) * C + c;
      dw += ToFloat(dout[at]) * (ToFloat(inp[at]) * rstd[row]);
    }
  }
  part[threadIdx.y][threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kParamRows; ++k) dw += part[k][threadIdx.x];
    atomicAdd(dweight + c, dw);
  }
}

// One thread per rotated pair (row, head, i): heads [0, NH+NKV) of each row, i < hd/2.
template <typename T>
__global__ void RopeKernel(T* qkv, const float* __restrict__ cos, const float* __restrict__ sin,
                           int64_t rows, int T_, int rotated_heads, int width, int hd, float sign) {
  const int half = hd / 2;
  const int64_t pairs_per_row = static_cast<int64_t>(rotated_heads) * half;
  const int64_t total = rows * pairs_per_row;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = p / pairs_per_row;
    const int rest = static_cast<int>(p - row * pairs_per_row);
    const int h = rest / half, i = rest % half;
    const int t = static_cast<int>(row % T_);
    const float c = cos[static_cast<int64_t>(t) * half + i];
    const float s = sign * sin[static_cast<int64_t>(t) * half + i];
    T* x = qkv + row * width + static_cast<int64_t>(h) * hd;
    const float lo = ToFloat(x[i]), hi = ToFloat(x[i + half]);
    // Separate roundings (no FMA), as the CPU twin computes.
    x[i] = FromFloat<T>(__fsub_rn(__fmul_rn(lo, c), __fmul_rn(hi, s)));
    x[i + half] = FromFloat<T>(__fadd_rn(__fmul_rn(hi, c), __fmul_rn(lo, s)));
  }
}

template <typename T>
__global__ void SwiGluForwardKernel(T* out, const T* inp, int64_t N, int I) {
  const int64_t total = N * I;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / I;
    const int j = static_cast<int>(e - row * I);
    const T* gate = inp + row * 2 * I;
    const float g = ToFloat(gate[j]), u = ToFloat(gate[I + j]);
    out[e] = FromFloat<T>(g / (1.0f + expf(-g)) * u);
  }
}

template <typename T>
__global__ void SwiGluBackwardKernel(T* dinp, const T* inp, const T* dout, int64_t N, int I) {
  const int64_t total = N * I;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / I;
    const int j = static_cast<int>(e - row * I);
    const int64_t at = row * 2 * I + j;
    const float g = ToFloat(inp[at]), u = ToFloat(inp[at + I]), dy = ToFloat(dout[e]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dinp[at] = FromFloat<T>(ToFloat(dinp[at]) + dy * u * sig * (1.0f + g * (1.0f - sig)));
    dinp[at + I] = FromFloat<T>(ToFloat(dinp[at + I]) + dy * g * sig);
  }
}

template <typename T>
Status LaunchRmsNormBackward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                             const float* rstd, int N, int C, cudaStream_t stream) {
  RmsNormBackwardInputKernel<T><<<CeilDiv(N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
      dinp, dout, inp, weight, rstd, N, C);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  if (dweight == nullptr) return Status::Ok();  // a frozen weight
  const int rows_per_chunk = std::max(kMinRowsPerChunk, CeilDiv(N, kMaxGridY));
  const dim3 grid(CeilDiv(C, 32), CeilDiv(N, rows_per_chunk));
  RmsNormBackwardParamKernel<T>
      <<<grid, dim3(32, kParamRows), 0, stream>>>(dweight, dout, inp, rstd, N, C, rows_per_chunk);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status CheckRopeShape(const char* op, int B, int T, int NH, int NKV, int hd) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "B", B));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "T", T));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NH", NH));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NKV", NKV));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "hd", hd));
  if (hd % 2 != 0) {
    return InvalidArgumentError(std::string(op) + ": hd (" + std::to_string(hd) +
                                ") must be even (rotary pairs (i, i + hd/2))");
  }
  return Status::Ok();
}

Status LaunchRope(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int hd, DType type, float sign, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(B) * T;
  const int width = (NH + 2 * NKV) * hd;
  const int blocks = ElementwiseBlocks(rows * (NH + NKV) * (hd / 2));
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    RopeKernel<E><<<blocks, kThreads, 0, stream>>>(static_cast<E*>(qkv), cos, sin, rows, T,
                                                   NH + NKV, width, hd, sign);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace

Status RmsNormForward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                      float eps, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "RmsNormForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "rstd", rstd));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "weight", weight));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "C", C));
  if (!(eps >= 0.0f)) {
    return InvalidArgumentError(std::string(kOp) + ": eps must be >= 0, got " +
                                std::to_string(eps));
  }
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    RmsNormForwardKernel<E><<<CeilDiv(N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<E*>(out), rstd, static_cast<const E*>(inp), static_cast<const E*>(weight), N, C,
        eps);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status RmsNormBackward(void* dinp, float* dweight, const void* dout, const void* inp,
                       const void* weight, const float* rstd, int N, int C, DType type,
                       cudaStream_t stream) {
  constexpr const char* kOp = "RmsNormBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dinp", dinp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "weight", weight));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "rstd", rstd));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "C", C));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) {
    using E = decltype(tag);
    return LaunchRmsNormBackward<E>(static_cast<E*>(dinp), dweight, static_cast<const E*>(dout),
                                    static_cast<const E*>(inp), static_cast<const E*>(weight), rstd,
                                    N, C, stream);
  });
}

Status RopeForward(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int hd, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "RopeForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "cos", cos));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "sin", sin));
  HOIST_RETURN_IF_ERROR(CheckRopeShape(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return LaunchRope(qkv, cos, sin, B, T, NH, NKV, hd, type, 1.0f, stream);
}

Status RopeBackward(void* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                    int hd, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "RopeBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dqkv", dqkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "cos", cos));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "sin", sin));
  HOIST_RETURN_IF_ERROR(CheckRopeShape(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return LaunchRope(dqkv, cos, sin, B, T, NH, NKV, hd, type, -1.0f, stream);
}

Status SwiGluForward(void* out, const void* inp, int N, int I, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "SwiGluForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "I", I));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const int blocks = ElementwiseBlocks(static_cast<int64_t>(N) * I);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    SwiGluForwardKernel<E>
        <<<blocks, kThreads, 0, stream>>>(static_cast<E*>(out), static_cast<const E*>(inp), N, I);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status SwiGluBackward(void* dinp, const void* inp, const void* dout, int N, int I, DType type,
                      cudaStream_t stream) {
  constexpr const char* kOp = "SwiGluBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dinp", dinp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "I", I));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const int blocks = ElementwiseBlocks(static_cast<int64_t>(N) * I);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    SwiGluBackwardKernel<E><<<blocks, kThreads, 0, stream>>>(
        static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout), N, I);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda
