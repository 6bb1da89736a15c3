#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/nf4.h"
#include "kernels/nf4.h"
#include "kernels/nf4_args.h"

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

// The codebook as a kernel argument: it lands in the constant bank, and no device copy of the
// host table has to be kept.
struct Codebook {
  float value[16];
};

// One thread per byte of codes: its two elements, high nibble first.
template <typename T>
__global__ void DequantizeNf4Kernel(T* out, const uint8_t* codes, const float* absmax, int64_t n,
                                    Codebook book) {
  const int64_t bytes = nf4::CodeBytes(n);
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < bytes;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t byte = codes[j];
    const int64_t i = 2 * j;
    // A block has an even length, so both elements share its absmax.
    const float scale = absmax[i / nf4::kBlock];
    out[i] = FromFloat<T>(book.value[byte >> 4] * scale);
    if (i + 1 < n) out[i + 1] = FromFloat<T>(book.value[byte & 0x0F] * scale);
  }
}

// The signed dynamic map, as a kernel argument (constant bank).
struct SignedMap {
  float code[256];
};

// kThreads == 256: each thread copies one entry of the map (a __grid_constant__ argument, read
// in place) into shared memory, where the per-absmax lookups by code are cheap.
static_assert(kThreads == 256, "one thread per map entry");

__global__ void DequantizeNf4AbsmaxKernel(float* out, const uint8_t* codes, const float* scales,
                                          float offset, int64_t n,
                                          const __grid_constant__ SignedMap map) {
  __shared__ float code[256];
  code[threadIdx.x] = map.code[threadIdx.x];
  __syncthreads();
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < n;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // No fused multiply-add: the CPU rounds the product, then the sum.
    out[b] = __fadd_rn(__fmul_rn(code[codes[b]], scales[b / cpu::kQuantBlockSize]), offset);
  }
}

}  // namespace

Status DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax, int64_t n,
                     cudaStream_t stream) {
  constexpr const char* kOp = "DequantizeNf4";
  HOIST_RETURN_IF_ERROR(nf4_args::CheckDequantizeNf4(kOp, out, codes, absmax, n));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (n == 0) return Status::Ok();
  Codebook book;
  for (int k = 0; k < 16; ++k) book.value[k] = nf4::kCodebook[k];
  const int blocks = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>((nf4::CodeBytes(n) + kThreads - 1) / kThreads, kMaxBlocks)));
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    DequantizeNf4Kernel<T>
        <<<blocks, kThreads, 0, stream>>>(static_cast<T*>(out), codes, absmax, n, book);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status DequantizeNf4Absmax(float* out, const uint8_t* codes, const float* scales, float offset,
                           int64_t n, cudaStream_t stream) {
  constexpr const char* kOp = "DequantizeNf4Absmax";
  HOIST_RETURN_IF_ERROR(nf4_args::CheckDequantizeNf4Absmax(kOp, out, codes, scales, offset, n));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (n == 0) return Status::Ok();
  SignedMap map;
  const cpu::DynamicMap& signed_map = cpu::SignedDynamicMap();
  for (int k = 0; k < 256; ++k) map.code[k] = signed_map.code[k];
  const int blocks = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks)));
  DequantizeNf4AbsmaxKernel<<<blocks, kThreads, 0, stream>>>(out, codes, scales, offset, n, map);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda
