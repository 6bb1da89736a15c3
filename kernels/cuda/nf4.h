// NF4 on the GPU (kernels/nf4.h gives the format, kernels/backend.h the contract); CPU twin:
// cpu::DequantizeNf4 (kernels/cpu/nf4.h) with the CPU backend's rounding, the same bits.
// Arguments are checked as the CPU backend checks them (kernels/nf4_args.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/nf4.h"

namespace hoist::kernels::cuda {

// out[i] = round_type(kCodebook[code i] * absmax[i / 64]) for i in [0, n); device arrays; enqueued
// on `stream`.
Status DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax, int64_t n,
                     cudaStream_t stream);
// out[b] = signed_map[codes[b]] * scales[b / 256] + offset (Backend::DequantizeNf4Absmax), the
// product and the sum each rounded as the CPU rounds them.
Status DequantizeNf4Absmax(float* out, const uint8_t* codes, const float* scales, float offset,
                           int64_t n, cudaStream_t stream);

// Internal to the 4-bit matmuls (kernels/cuda/matmul.cu).
namespace detail {

// Panels of an NF4 matrix (nf4::Matrix, OC x C) for the matmuls that multiply it a panel at a
// time (MatmulForwardNf4 / MatmulBackwardNf4, kernels/cuda/matmul.h): each element is
// round_type(kCodebook[code] * absmax[flat / 64]) with flat = weight.first + o * C + c, the absmax
// fp32 or double-quantized as nf4::Matrix says; the bits DequantizeNf4 (after DequantizeNf4Absmax)
// writes for the whole matrix. No argument checks: the matmuls' checks cover these (panel holds
// the panel's elements of `type`). Enqueued on `stream`.
//
// Rows [row0, row0 + rows), whole: panel (rows, C) row-major.
Status DequantizeNf4Rows(void* panel, DType type, const nf4::Matrix& weight, int C, int64_t row0,
                         int64_t rows, cudaStream_t stream);
// Columns [col0, col0 + cols) of all OC rows: panel (OC, cols) row-major.
Status DequantizeNf4Columns(void* panel, DType type, const nf4::Matrix& weight, int C, int OC,
                            int64_t col0, int64_t cols, cudaStream_t stream);

}  // namespace detail

}  // namespace hoist::kernels::cuda
