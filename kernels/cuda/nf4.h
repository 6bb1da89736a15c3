// NF4 on the GPU (kernels/nf4.h gives the format, kernels/backend.h the contract); CPU twin:
// cpu::DequantizeNf4 (kernels/cpu/nf4.h) with the CPU backend's rounding, the same bits.
// Arguments are checked as the CPU backend checks them (kernels/nf4_args.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace hoist::kernels::cuda {

// out[i] = round_type(kCodebook[code i] * absmax[i / 64]) for i in [0, n); device arrays; enqueued
// on `stream`.
Status DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax, int64_t n,
                     cudaStream_t stream);
// out[b] = signed_map[codes[b]] * scales[b / 256] + offset (Backend::DequantizeNf4Absmax), the
// product and the sum each rounded as the CPU rounds them.
Status DequantizeNf4Absmax(float* out, const uint8_t* codes, const float* scales, float offset,
                           int64_t n, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
