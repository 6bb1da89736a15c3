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

__device__ __forceinline__ void LoadSignedMap(float* code, const SignedMap& map) {
  code[threadIdx.x] = map.code[threadIdx.x];
  __syncthreads();
}

// Double quantization's absmax b, `code` the map in shared memory. No fused multiply-add: the
// CPU rounds the product, then the sum.
__device__ __forceinline__ float DoubleQuantizedAbsmax(const float* code, const uint8_t* codes,
                                                       const float* scales, float offset,
                                                       int64_t b) {
  return __fadd_rn(__fmul_rn(code[codes[b]], scales[b / cpu::kQuantBlockSize]), offset);
}

__global__ void DequantizeNf4AbsmaxKernel(float* out, const uint8_t* codes, const float* scales,
                                          float offset, int64_t n,
                                          const __grid_constant__ SignedMap map) {
  __shared__ float code[256];
  LoadSignedMap(code, map);
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < n;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[b] = DoubleQuantizedAbsmax(code, codes, scales, offset, b);
  }
}

// A panel (rows, cols) of an NF4 matrix: panel element (r, j) is element origin + r * stride + j
// of the quantized array (stride the matrix's C). One thread per element: neighbours in a warp
// share code bytes and absmaxes, and each writes its own output. kDoubleQuantized: the absmax is
// rebuilt from weight's 8-bit codes per element (as cheap as reading an fp32 one, with the map
// in shared memory), so nothing is staged between kernels.
template <typename T, bool kDoubleQuantized>
__global__ void DequantizeNf4PanelKernel(T* panel, nf4::Matrix weight, int64_t origin,
                                         int64_t stride, int64_t rows, int64_t cols, Codebook book,
                                         const __grid_constant__ SignedMap map) {
  __shared__ float code[kDoubleQuantized ? 256 : 1];
  if constexpr (kDoubleQuantized) LoadSignedMap(code, map);
  const int64_t total = rows * cols;
  // Whole rows are one contiguous run of the array: no division per element.
  const bool contiguous = stride == cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t flat = contiguous ? origin + i : origin + (i / cols) * stride + i % cols;
    const int64_t block = flat / nf4::kBlock;
    float scale;
    if constexpr (kDoubleQuantized) {
      scale = DoubleQuantizedAbsmax(code, weight.absmax_codes, weight.absmax_scales,
                                    weight.absmax_offset, block);
    } else {
      scale = weight.absmax[block];
    }
    // __fmul_rn: one rounded product, never contracted with a neighbouring operation.
    panel[i] = FromFloat<T>(__fmul_rn(book.value[nf4::CodeAt(weight.codes, flat)], scale));
  }
}

Codebook MakeCodebook() {
  Codebook book;
  for (int k = 0; k < 16; ++k) book.value[k] = nf4::kCodebook[k];
  return book;
}

SignedMap MakeSignedMap() {
  SignedMap map;
  const cpu::DynamicMap& signed_map = cpu::SignedDynamicMap();
  for (int k = 0; k < 256; ++k) map.code[k] = signed_map.code[k];
  return map;
}

int GridFor(int64_t threads) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((threads + kThreads - 1) / kThreads, kMaxBlocks)));
}

Status LaunchDequantizeNf4Panel(void* panel, DType type, const nf4::Matrix& weight, int64_t origin,
                                int64_t stride, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return Status::Ok();
  const bool double_quantized = weight.absmax == nullptr;
  // The map is only read with double quantization; zeroed otherwise, not left indeterminate.
  const SignedMap map = double_quantized ? MakeSignedMap() : SignedMap{};
  const Codebook book = MakeCodebook();
  const int blocks = GridFor(rows * cols);
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(panel);
    if (double_quantized) {
      DequantizeNf4PanelKernel<T, true>
          <<<blocks, kThreads, 0, stream>>>(out, weight, origin, stride, rows, cols, book, map);
    } else {
      DequantizeNf4PanelKernel<T, false>
          <<<blocks, kThreads, 0, stream>>>(out, weight, origin, stride, rows, cols, book, map);
    }
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace

Status DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax, int64_t n,
                     cudaStream_t stream) {
  constexpr const char* kOp = "DequantizeNf4";
  HOIST_RETURN_IF_ERROR(nf4_args::CheckDequantizeNf4(kOp, out, codes, absmax, n));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (n == 0) return Status::Ok();
  const Codebook book = MakeCodebook();
  const int blocks = GridFor(nf4::CodeBytes(n));
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
  const SignedMap map = MakeSignedMap();
  DequantizeNf4AbsmaxKernel<<<GridFor(n), kThreads, 0, stream>>>(out, codes, scales, offset, n,
                                                                 map);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

namespace detail {

Status DequantizeNf4Rows(void* panel, DType type, const nf4::Matrix& weight, int C, int64_t row0,
                         int64_t rows, cudaStream_t stream) {
  return LaunchDequantizeNf4Panel(panel, type, weight, weight.first + row0 * C, C, rows, C, stream);
}

Status DequantizeNf4Columns(void* panel, DType type, const nf4::Matrix& weight, int C, int OC,
                            int64_t col0, int64_t cols, cudaStream_t stream) {
  return LaunchDequantizeNf4Panel(panel, type, weight, weight.first + col0, C, OC, cols, stream);
}

}  // namespace detail

}  // namespace hoist::kernels::cuda
