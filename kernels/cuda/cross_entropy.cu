#include <cmath>
#include <cstdint>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/device_math.cuh"

namespace hoist::kernels::cuda {
namespace {

using detail::BlockMax;
using detail::BlockSum;
using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 512;

// A logit as the softmax sees it: capped to softcap * tanh(x / softcap) (kCapped), or as it is.
template <bool kCapped>
__device__ __forceinline__ float Logit(float x, float softcap) {
  if constexpr (kCapped) {
    return tanhf(x / softcap) * softcap;
  } else {
    return x;
  }
}

// The gradient g with respect to the logit the softmax saw, carried to the raw logit x: times the
// cap's derivative 1 - tanh^2(x / softcap) (kCapped), or as it is.
template <bool kCapped>
__device__ __forceinline__ float RawGradient(float g, float x, float softcap) {
  if constexpr (kCapped) {
    const float t = tanhf(x / softcap);
    return g * (1.0f - t * t);
  } else {
    return g;
  }
}

// An ignored position (a negative target): no loss, and a zero gradient where one is written.
template <typename T>
__device__ __forceinline__ void IgnoreRow(float* losses, T* dlogits, int64_t row, int Vp) {
  if (threadIdx.x == 0) losses[row] = 0.0f;
  if (dlogits == nullptr) return;
  T* dx = dlogits + row * Vp;
  for (int c = threadIdx.x; c < Vp; c += blockDim.x) dx[c] = FromFloat<T>(0.0f);
}

// One block per row, three passes over it: the max, the sum of e^(x - max), then the gradient.
// dlogits may alias logits: every thread reads and writes only the columns c = threadIdx.x +
// k * blockDim.x in every pass, and the one value read across threads (the target's logit) is
// read before the barriers inside BlockSum, which precede the first write.
template <typename T, bool kCapped>
__global__ void SoftmaxCrossEntropyKernel(float* losses, T* dlogits, const T* logits,
                                          const int32_t* targets, float dloss, int V, int Vp,
                                          float softcap) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  const int target = targets[row];
  if (target < 0) {  // every thread of the row leaves
    IgnoreRow(losses, dlogits, row, Vp);
    return;
  }
  const float target_logit = Logit<kCapped>(ToFloat(x[target]), softcap);

  float row_max = -INFINITY;
  for (int c = threadIdx.x; c < V; c += blockDim.x) {
    row_max = fmaxf(row_max, Logit<kCapped>(ToFloat(x[c]), softcap));
  }
  row_max = BlockMax(row_max, scratch);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < V; c += blockDim.x) {
    sum += expf(Logit<kCapped>(ToFloat(x[c]), softcap) - row_max);
  }
  sum = BlockSum(sum, scratch);

  if (threadIdx.x == 0) losses[row] = logf(sum) - (target_logit - row_max);
  if (dlogits == nullptr) return;
  T* dx = dlogits + row * Vp;
  // The CPU twin's arrangement: e^(x - max) * (dloss / sum), then dloss off the target.
  const float scale = dloss / sum;
  for (int c = threadIdx.x; c < Vp; c += blockDim.x) {
    float g = 0.0f;
    if (c < V) {
      const float raw = ToFloat(x[c]);
      g = expf(Logit<kCapped>(raw, softcap) - row_max) * scale;
      if (c == target) g -= dloss;
      g = RawGradient<kCapped>(g, raw, softcap);
    }
    dx[c] = FromFloat<T>(g);
  }
}

// The same in two passes of 16-byte loads: a running max and sum of e^(x - max) per thread (an
// online softmax), combined across the block, then the gradient. Rows of Vp elements must start
// on 16-byte boundaries (Vp a multiple of the vector's width, an aligned base). The row is read
// twice and written once instead of read three times; the sum's terms are added in another order
// than the three-pass kernel's, so the two agree to fp32 rounding. Aliasing as above: each thread
// reads and writes only its own vectors.
template <typename T, bool kCapped>
__global__ void SoftmaxCrossEntropyVectorKernel(float* losses, T* dlogits, const T* logits,
                                                const int32_t* targets, float dloss, int V, int Vp,
                                                float softcap) {
  constexpr int kWidth = 16 / static_cast<int>(sizeof(T));
  union Vector {
    uint4 bits;
    T values[kWidth];
  };
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  const int target = targets[row];
  if (target < 0) {  // every thread of the row leaves
    IgnoreRow(losses, dlogits, row, Vp);
    return;
  }
  const float target_logit = Logit<kCapped>(ToFloat(x[target]), softcap);
  const uint4* in = reinterpret_cast<const uint4*>(x);
  const int vectors = Vp / kWidth;

  float m = -INFINITY, sum = 0.0f;
  for (int v = threadIdx.x; v < vectors && v * kWidth < V; v += blockDim.x) {
    Vector chunk;
    chunk.bits = in[v];
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      if (v * kWidth + k >= V) break;
      const float value = Logit<kCapped>(ToFloat(chunk.values[k]), softcap);
      if (value > m) {
        sum = sum * expf(m - value) + 1.0f;
        m = value;
      } else {
        sum += expf(value - m);
      }
    }
  }
  const float row_max = BlockMax(m, scratch);
  sum = BlockSum(m == -INFINITY ? 0.0f : sum * expf(m - row_max), scratch);

  if (threadIdx.x == 0) losses[row] = logf(sum) - (target_logit - row_max);
  if (dlogits == nullptr) return;
  uint4* out = reinterpret_cast<uint4*>(dlogits + row * Vp);
  const float scale = dloss / sum;
  for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
    Vector chunk;
    if (v * kWidth < V) chunk.bits = in[v];
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const int c = v * kWidth + k;
      float g = 0.0f;
      if (c < V) {
        const float raw = ToFloat(chunk.values[k]);
        g = expf(Logit<kCapped>(raw, softcap) - row_max) * scale;
        if (c == target) g -= dloss;
        g = RawGradient<kCapped>(g, raw, softcap);
      }
      chunk.values[k] = FromFloat<T>(g);
    }
    out[v] = chunk.bits;
  }
}

template <typename T, bool kCapped>
void LaunchRows(float* losses, T* dlogits, const T* logits, const int32_t* targets, float dloss,
                int N, int V, int Vp, float softcap, bool vector, cudaStream_t stream) {
  if (vector) {
    SoftmaxCrossEntropyVectorKernel<T, kCapped>
        <<<N, kThreads, 0, stream>>>(losses, dlogits, logits, targets, dloss, V, Vp, softcap);
  } else {
    SoftmaxCrossEntropyKernel<T, kCapped>
        <<<N, kThreads, 0, stream>>>(losses, dlogits, logits, targets, dloss, V, Vp, softcap);
  }
}

template <typename T>
Status LaunchSoftmaxCrossEntropy(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                 float dloss, int N, int V, int Vp, float softcap,
                                 cudaStream_t stream) {
  constexpr int kWidth = 16 / static_cast<int>(sizeof(T));
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vector =
      Vp % kWidth == 0 && aligned(logits) && (dlogits == nullptr || aligned(dlogits));
  // Uncapped rows take kernels without the cap's code at all: their arithmetic is unchanged by it.
  if (softcap == 0.0f) {
    LaunchRows<T, false>(losses, dlogits, logits, targets, dloss, N, V, Vp, softcap, vector,
                         stream);
  } else {
    LaunchRows<T, true>(losses, dlogits, logits, targets, dloss, N, V, Vp, softcap, vector, stream);
  }
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace

Status SoftmaxCrossEntropy(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                           float dloss, int N, int V, int Vp, float softcap, DType type,
                           cudaStream_t stream) {
  constexpr const char* kOp = "SoftmaxCrossEntropy";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "losses", losses));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "logits", logits));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "targets", targets));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "V", V));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "Vp", Vp));
  if (Vp < V) {
    return InvalidArgumentError(std::string(kOp) + ": Vp (" + std::to_string(Vp) +
                                ") is smaller than V (" + std::to_string(V) + ")");
  }
  if (!(softcap == 0.0f || (softcap > 0.0f && std::isfinite(softcap)))) {
    return InvalidArgumentError(std::string(kOp) +
                                ": softcap must be 0 (no cap) or positive and finite, got " +
                                std::to_string(softcap));
  }
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) {
    using T = decltype(tag);
    return LaunchSoftmaxCrossEntropy<T>(losses, static_cast<T*>(dlogits),
                                        static_cast<const T*>(logits), targets, dloss, N, V, Vp,
                                        softcap, stream);
  });
}

}  // namespace hoist::kernels::cuda
