#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.h"

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 256;
// Enough blocks to fill an H100 several times over; larger arrays are covered by grid striding.
constexpr int64_t kMaxBlocks = 8192;

// W elements moved as one load or store: 16 bytes when the launcher found every pointer aligned.
template <typename T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

template <int W, typename T>
__device__ __forceinline__ void Load(float (&out)[W], const T* p) {
  const Pack<T, W> pack = *reinterpret_cast<const Pack<T, W>*>(p);
#pragma unroll
  for (int k = 0; k < W; ++k) out[k] = ToFloat(pack.v[k]);
}

template <int W, typename T>
__device__ __forceinline__ void Store(T* p, const float (&in)[W]) {
  Pack<T, W> pack;
#pragma unroll
  for (int k = 0; k < W; ++k) pack.v[k] = FromFloat<T>(in[k]);
  *reinterpret_cast<Pack<T, W>*>(p) = pack;
}

template <int W>
struct Width {
  static constexpr int kValue = W;
};

// Calls body(Width<W>, i) for every whole pack starting at element i, then body(Width<1>, i) for
// the n % W tail elements, grid-striding over both.
template <int W, typename Body>
__device__ __forceinline__ void ForEachPack(int64_t n, Body body) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / W;
  for (int64_t p = tid; p < packs; p += stride) body(Width<W>{}, p * W);
  for (int64_t i = packs * W + tid; i < n; i += stride) body(Width<1>{}, i);
}

__device__ __forceinline__ float Gelu(float x) {
  constexpr float kScale = 0.7978845608028654f;  // sqrt(2/pi)
  constexpr float kCubic = 0.044715f;
  const float u = kScale * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float GeluGrad(float x) {
  constexpr float kScale = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  const float x2 = x * x;
  const float th = tanhf(kScale * (x + kCubic * x2 * x));
  const float du_dx = kScale * (1.0f + 3.0f * kCubic * x2);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
}

// No __restrict__ on the forward kernels: out may alias an input, element for element.
template <typename T, int W>
__global__ void GeluForwardKernel(T* out, const T* inp, int64_t n) {
  ForEachPack<W>(n, [&](auto width, int64_t i) {
    constexpr int w = decltype(width)::kValue;
    float x[w];
    Load<w>(x, inp + i);
#pragma unroll
    for (int k = 0; k < w; ++k) x[k] = Gelu(x[k]);
    Store<w>(out + i, x);
  });
}

template <typename T, int W>
__global__ void GeluBackwardKernel(T* __restrict__ dinp, const T* __restrict__ inp,
                                   const T* __restrict__ dout, int64_t n) {
  ForEachPack<W>(n, [&](auto width, int64_t i) {
    constexpr int w = decltype(width)::kValue;
    float x[w], d[w], acc[w];
    Load<w>(x, inp + i);
    Load<w>(d, dout + i);
    Load<w>(acc, dinp + i);
#pragma unroll
    for (int k = 0; k < w; ++k) acc[k] += GeluGrad(x[k]) * d[k];
    Store<w>(dinp + i, acc);
  });
}

template <typename T, int W>
__global__ void ScaleKernel(T* out, const T* inp, int64_t n, float scale) {
  ForEachPack<W>(n, [&](auto width, int64_t i) {
    constexpr int w = decltype(width)::kValue;
    float x[w];
    Load<w>(x, inp + i);
#pragma unroll
    for (int k = 0; k < w; ++k) x[k] *= scale;
    Store<w>(out + i, x);
  });
}

// tanh(x / cap) rounded to fp32, then the product, as the CPU twin (and the capped loss) computes.
template <typename T, int W>
__global__ void SoftcapKernel(T* x, int64_t n, float cap) {
  ForEachPack<W>(n, [&](auto width, int64_t i) {
    constexpr int w = decltype(width)::kValue;
    float v[w];
    Load<w>(v, x + i);
#pragma unroll
    for (int k = 0; k < w; ++k) v[k] = tanhf(v[k] / cap) * cap;
    Store<w>(x + i, v);
  });
}

template <typename T, int W>
__global__ void ResidualForwardKernel(T* out, const T* a, const T* b, int64_t n) {
  ForEachPack<W>(n, [&](auto width, int64_t i) {
    constexpr int w = decltype(width)::kValue;
    float x[w], y[w];
    Load<w>(x, a + i);
    Load<w>(y, b + i);
#pragma unroll
    for (int k = 0; k < w; ++k) x[k] += y[k];
    Store<w>(out + i, x);
  });
}

template <typename T, int W>
__global__ void ResidualBackwardKernel(T* __restrict__ da, T* __restrict__ db,
                                       const T* __restrict__ dout, int64_t n) {
  ForEachPack<W>(n, [&](auto width, int64_t i) {
    constexpr int w = decltype(width)::kValue;
    float d[w], x[w], y[w];
    Load<w>(d, dout + i);
    Load<w>(x, da + i);
    Load<w>(y, db + i);
#pragma unroll
    for (int k = 0; k < w; ++k) {
      x[k] += d[k];
      y[k] += d[k];
    }
    Store<w>(da + i, x);
    Store<w>(db + i, y);
  });
}

bool AllAligned(std::initializer_list<const void*> pointers, size_t bytes) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
  }
  return true;
}

int GridFor(int64_t n, int w) {
  const int64_t work = std::max<int64_t>(n / w, 1);
  return static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, kMaxBlocks));
}

// Calls launch(Width<16 / sizeof(T)>, grid) when every pointer is 16-byte aligned, else
// launch(Width<1>, grid); then checks the launch.
template <typename T, typename Launch>
Status LaunchPacked(std::initializer_list<const void*> pointers, int64_t n, Launch launch) {
  constexpr int kWide = 16 / sizeof(T);
  if (AllAligned(pointers, 16)) {
    launch(Width<kWide>{}, GridFor(n, kWide));
  } else {
    launch(Width<1>{}, GridFor(n, 1));
  }
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status CheckCommon(const char* op, int64_t n, cudaStream_t stream) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "n", n));
  return CheckStream(op, stream);
}

}  // namespace

Status GeluForward(void* out, const void* inp, int64_t n, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "GeluForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckCommon(kOp, n, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) -> Status {
    using T = decltype(tag);
    return LaunchPacked<T>({out, inp}, n, [&](auto w, int grid) {
      GeluForwardKernel<T, decltype(w)::kValue>
          <<<grid, kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(inp), n);
    });
  });
}

Status GeluBackward(void* dinp, const void* inp, const void* dout, int64_t n, DType type,
                    cudaStream_t stream) {
  constexpr const char* kOp = "GeluBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dinp", dinp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckCommon(kOp, n, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) -> Status {
    using T = decltype(tag);
    return LaunchPacked<T>({dinp, inp, dout}, n, [&](auto w, int grid) {
      GeluBackwardKernel<T, decltype(w)::kValue><<<grid, kThreads, 0, stream>>>(
          static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n);
    });
  });
}

Status Scale(void* out, const void* inp, int64_t n, float scale, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "Scale";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  if (n < 0)
    return InvalidArgumentError(std::string(kOp) + ": n is negative (" + std::to_string(n) + ")");
  if (!std::isfinite(scale)) {
    return InvalidArgumentError(std::string(kOp) + ": scale must be finite, got " +
                                std::to_string(scale));
  }
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (n == 0) return Status::Ok();
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) -> Status {
    using T = decltype(tag);
    return LaunchPacked<T>({out, inp}, n, [&](auto w, int grid) {
      ScaleKernel<T, decltype(w)::kValue><<<grid, kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(inp), n, scale);
    });
  });
}

Status SoftcapForward(void* x, int64_t n, float cap, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "SoftcapForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "x", x));
  if (n < 0)
    return InvalidArgumentError(std::string(kOp) + ": n is negative (" + std::to_string(n) + ")");
  if (!(cap == 0.0f || (cap > 0.0f && std::isfinite(cap)))) {
    return InvalidArgumentError(std::string(kOp) +
                                ": cap must be 0 (no cap) or positive and finite, got " +
                                std::to_string(cap));
  }
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (n == 0 || cap == 0.0f) return Status::Ok();
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) -> Status {
    using T = decltype(tag);
    return LaunchPacked<T>({x}, n, [&](auto w, int grid) {
      SoftcapKernel<T, decltype(w)::kValue>
          <<<grid, kThreads, 0, stream>>>(static_cast<T*>(x), n, cap);
    });
  });
}

Status ResidualForward(void* out, const void* a, const void* b, int64_t n, DType type,
                       cudaStream_t stream) {
  constexpr const char* kOp = "ResidualForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "a", a));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "b", b));
  HOIST_RETURN_IF_ERROR(CheckCommon(kOp, n, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) -> Status {
    using T = decltype(tag);
    return LaunchPacked<T>({out, a, b}, n, [&](auto w, int grid) {
      ResidualForwardKernel<T, decltype(w)::kValue><<<grid, kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
    });
  });
}

Status ResidualBackward(void* da, void* db, const void* dout, int64_t n, DType type,
                        cudaStream_t stream) {
  constexpr const char* kOp = "ResidualBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "da", da));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "db", db));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckCommon(kOp, n, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) -> Status {
    using T = decltype(tag);
    return LaunchPacked<T>({da, db, dout}, n, [&](auto w, int grid) {
      ResidualBackwardKernel<T, decltype(w)::kValue><<<grid, kThreads, 0, stream>>>(
          static_cast<T*>(da), static_cast<T*>(db), static_cast<const T*>(dout), n);
    });
  });
}

}  // namespace hoist::kernels::cuda
