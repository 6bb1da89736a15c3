// Device-side helpers shared by the kernels/cuda/ .cu files (not part of any entry's contract):
// loads and stores that widen to and round from fp32, warp and block reductions, and the
// dispatch from a DType to the element type a kernel template is instantiated for.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda::detail {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float WarpMax(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 floats. Fixed order: the same inputs give the same bits.
__device__ __forceinline__ float BlockSum(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = WarpSum(x);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : 0.0f;
  return WarpSum(x);
}
__device__ __forceinline__ float BlockMax(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = WarpMax(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : -INFINITY;
  return WarpMax(x);
}

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace hoist::kernels::cuda::detail

// Calls `body` (a generic lambda taking a value of the element type) with the type for `dtype`:
// HOIST_CUDA_DISPATCH(dtype, [&](auto tag) { using T = decltype(tag); ... }).
#define HOIST_CUDA_DISPATCH(dtype, body)                            \
  [&]() {                                                           \
    switch (dtype) {                                                \
      case ::hoist::DType::kFloat32: return body(float{});          \
      case ::hoist::DType::kBFloat16: return body(__nv_bfloat16{}); \
      case ::hoist::DType::kFloat16: break;                         \
    }                                                               \
    return body(__half{});                                          \
  }()
