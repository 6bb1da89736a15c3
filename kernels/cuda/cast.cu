#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/device_math.cuh"

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;
// Elements per vector access: 16 bytes of a 16-bit array, 32 of an fp32 one.
constexpr int kVec = 8;

template <typename T>
struct alignas(16) Pack {
  T v[kVec];
};

int GridFor(int64_t work) {
  return static_cast<int>(
      std::min<int64_t>((std::max<int64_t>(work, 1) + kThreads - 1) / kThreads, kMaxBlocks));
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Widening is exact, so a 16-bit to 16-bit cast through fp32 rounds once, as a direct one would.
template <typename In, typename Out, bool kVectorized>
__global__ void CastKernel(Out* __restrict__ out, const In* __restrict__ in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_begin = 0;
  if constexpr (kVectorized) {
    const int64_t packs = n / kVec;
    for (int64_t p = tid; p < packs; p += stride) {
      const Pack<In> src = reinterpret_cast<const Pack<In>*>(in)[p];
      Pack<Out> dst;
#pragma unroll
      for (int k = 0; k < kVec; ++k) dst.v[k] = FromFloat<Out>(ToFloat(src.v[k]));
      reinterpret_cast<Pack<Out>*>(out)[p] = dst;
    }
    scalar_begin = packs * kVec;
  }
  for (int64_t i = scalar_begin + tid; i < n; i += stride) out[i] = FromFloat<Out>(ToFloat(in[i]));
}

// The finiteness test of an fp32 value by its exponent bits, as the CPU twin tests it (isfinite
// would also do, but this one cannot be relaxed by fast-math flags).
__device__ __forceinline__ bool IsFinite(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

__global__ void UnscaleAndCheckKernel(float* __restrict__ x, int64_t n, float factor,
                                      int* __restrict__ found_nonfinite) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float in = x[i];
    const float y = in * factor;
    x[i] = y;
    bad |= !IsFinite(in) || !IsFinite(y);
  }
  // Every writer stores the same 1, so the race between them is benign; one store per warp.
  if (__any_sync(0xffffffffu, bad) && threadIdx.x % 32 == 0) *found_nonfinite = 1;
}

template <typename In, typename Out>
Status LaunchCast(Out* out, const In* in, int64_t n, cudaStream_t stream) {
  if (Aligned16(out) && Aligned16(in)) {
    CastKernel<In, Out, true><<<GridFor(n / kVec), kThreads, 0, stream>>>(out, in, n);
  } else {
    CastKernel<In, Out, false><<<GridFor(n), kThreads, 0, stream>>>(out, in, n);
  }
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status LaunchUnscaleAndCheck(float* x, int64_t n, float factor, int* found_nonfinite,
                             cudaStream_t stream) {
  UnscaleAndCheckKernel<<<GridFor(n), kThreads, 0, stream>>>(x, n, factor, found_nonfinite);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace

Status Cast(void* out, DType out_type, const void* in, DType in_type, int64_t n,
            cudaStream_t stream) {
  constexpr const char* kOp = "Cast";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "in", in));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "n", n));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (out_type == in_type) {
    // cudaMemcpyDefault: either side may be page-locked host memory (unified addressing).
    HOIST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * DTypeSize(in_type),
                                               cudaMemcpyDefault, stream));
    return Status::Ok();
  }
  // Named lambdas: the macro would split the template argument list of LaunchCast<In, Out>.
  const auto cast_from = [&](auto in_tag) {
    using In = decltype(in_tag);
    const auto cast_to = [&](auto out_tag) {
      using Out = decltype(out_tag);
      return LaunchCast<In, Out>(static_cast<Out*>(out), static_cast<const In*>(in), n, stream);
    };
    return HOIST_CUDA_DISPATCH(out_type, cast_to);
  };
  return HOIST_CUDA_DISPATCH(in_type, cast_from);
}

Status UnscaleAndCheck(float* x, int64_t n, float scale, int* found_nonfinite,
                       cudaStream_t stream) {
  constexpr const char* kOp = "UnscaleAndCheck";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "x", x));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "found_nonfinite", found_nonfinite));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "n", n));
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    return InvalidArgumentError(std::string(kOp) + ": scale must be positive and finite, got " +
                                std::to_string(scale));
  }
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  // The factor the CPU twin multiplies by (cpu::UnscaleInPlace), so the products agree bit for
  // bit; multiplying is also exact for the power-of-two scales of the dynamic scaler.
  const float factor = 1.0f / scale;
  return LaunchUnscaleAndCheck(x, n, factor, found_nonfinite, stream);
}

}  // namespace hoist::kernels::cuda
