#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/encoder.h"

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

int GridFor(int64_t work) {
  return static_cast<int>(
      std::min<int64_t>((std::max<int64_t>(work, 1) + kThreads - 1) / kThreads, kMaxBlocks));
}

template <typename T>
__global__ void EncoderForwardKernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                                     const T* __restrict__ wte, const T* __restrict__ wpe, int T_,
                                     int C, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t row = idx / C;
    const int c = static_cast<int>(idx - row * C);
    const int t = static_cast<int>(row % T_);
    const float te = ToFloat(wte[static_cast<int64_t>(tokens[row]) * C + c]);
    const float pe = ToFloat(wpe[static_cast<int64_t>(t) * C + c]);
    out[idx] = FromFloat<T>(te + pe);
  }
}

// Repeated tokens collide on rows of dwte, hence the atomics.
template <typename T>
__global__ void EncoderBackwardWteKernel(float* __restrict__ dwte, const T* __restrict__ dout,
                                         const int32_t* __restrict__ tokens, int C, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t row = idx / C;
    const int c = static_cast<int>(idx - row * C);
    atomicAdd(dwte + static_cast<int64_t>(tokens[row]) * C + c, ToFloat(dout[idx]));
  }
}

// One thread owns dwpe[t, c] and adds dout[b, t, c] for b in order, the CPU twin's order: the
// result is deterministic (and, for fp32 dout, the CPU's bits).
template <typename T>
__global__ void EncoderBackwardWpeKernel(float* __restrict__ dwpe, const T* __restrict__ dout,
                                         int B, int T_, int C) {
  const int64_t total = static_cast<int64_t>(T_) * C;
  const int64_t batch_stride = total;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    float acc = dwpe[idx];
    for (int b = 0; b < B; ++b) acc += ToFloat(dout[b * batch_stride + idx]);
    dwpe[idx] = acc;
  }
}

template <typename T>
Status LaunchEncoderForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B,
                            int T_, int C, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(B) * T_ * C;
  EncoderForwardKernel<T>
      <<<GridFor(total), kThreads, 0, stream>>>(out, tokens, wte, wpe, T_, C, total);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

template <typename T>
Status LaunchEncoderBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int B,
                             int T_, int C, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(B) * T_ * C;
  EncoderBackwardWteKernel<T>
      <<<GridFor(total), kThreads, 0, stream>>>(dwte, dout, tokens, C, total);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  EncoderBackwardWpeKernel<T>
      <<<GridFor(static_cast<int64_t>(T_) * C), kThreads, 0, stream>>>(dwpe, dout, B, T_, C);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status CheckShape(const char* op, int B, int T, int C, cudaStream_t stream) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "B", B));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "T", T));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "C", C));
  return CheckStream(op, stream);
}

}  // namespace

Status EncoderForward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                      int T, int C, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "EncoderForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "tokens", tokens));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "wte", wte));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "wpe", wpe));
  HOIST_RETURN_IF_ERROR(CheckShape(kOp, B, T, C, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) {
    using E = decltype(tag);
    return LaunchEncoderForward<E>(static_cast<E*>(out), tokens, static_cast<const E*>(wte),
                                   static_cast<const E*>(wpe), B, T, C, stream);
  });
}

Status EncoderBackward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B,
                       int T, int C, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "EncoderBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dwte", dwte));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dwpe", dwpe));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "tokens", tokens));
  HOIST_RETURN_IF_ERROR(CheckShape(kOp, B, T, C, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) {
    using E = decltype(tag);
    return LaunchEncoderBackward<E>(dwte, dwpe, static_cast<const E*>(dout), tokens, B, T, C,
                                    stream);
  });
}

}  // namespace hoist::kernels::cuda
