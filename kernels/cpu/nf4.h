// NF4 on the host (kernels/nf4.h gives the format): the blockwise quantizer that turns a frozen
// base's fp32 weights into codes and absmaxes on import, its inverse (the oracle of
// Backend::DequantizeNf4), and the codebook rebuilt from its definition for the tests.
// Every function is blocking and works on the caller's host arrays; the OpenMP team works inside.
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/nf4.h"

namespace hoist::kernels::cpu {

// Blockwise NF4 of src[0, n): absmax[b] = max |src| over block b (nf4::kBlock elements, the last
// possibly shorter), code i = nf4::Nearest(src[i] / absmax[i / kBlock]) with the division in fp32
// (a block whose absmax is 0 gets the code of 0). codes: nf4::CodeBytes(n) bytes, absmax:
// nf4::Blocks(n) floats; nothing past them is written. A NaN or infinite src element is
// kInvalidArgument naming its index, and then nothing is written at all. n negative, or a null
// array with n > 0: kInvalidArgument.
Status QuantizeNf4(const float* src, int64_t n, uint8_t* codes, float* absmax);

// out[i] = nf4::kCodebook[code i] * absmax[i / kBlock], one fp32 product, for i in [0, n).
void DequantizeNf4(const uint8_t* codes, const float* absmax, int64_t n, float* out);

// The rectangle rows [row0, row0 + rows) x columns [col0, col0 + cols) of `matrix` (an
// nf4::Matrix of C columns), written row by row (row stride `cols`) to `out`: element (o, c) is
// the fp32 product kCodebook[code] * absmax rounded once to `type` (DequantizeNf4's value, then
// the backends' rounding), stored as bf16 bits where `out_bf16` (then `type` must be bf16), else
// as fp32. A double-quantized matrix's absmaxes are computed on the way (the product and the sum
// each rounded, as Backend::DequantizeNf4Absmax computes them). The arrays are the caller's and
// nothing is checked; the rows are split across the OpenMP team.
void DequantizeNf4Rect(const nf4::Matrix& matrix, int64_t C, int64_t row0, int64_t rows,
                       int64_t col0, int64_t cols, DType type, bool out_bf16, void* out);
// The same at an explicit SIMD level (DequantizeNf4Rect takes ActiveSimdLevel()): avx512 looks
// the codes up 32 or 16 at a time, the other levels one at a time; the same values.
void DequantizeNf4RectAt(SimdLevel level, const nf4::Matrix& matrix, int64_t C, int64_t row0,
                         int64_t rows, int64_t col0, int64_t cols, DType type, bool out_bf16,
                         void* out);

// The 16 codebook values from their definition, in float64: bitsandbytes' create_normal_map with
// offset 0.9677083: the standard normal quantiles of the probabilities linspace(offset, 0.5, 9)
// without its last (8 positive levels) and the negated quantiles of linspace(offset, 0.5, 8)
// without its last (7 negative levels), and 0, sorted and divided by the largest. The
// probabilities are the fp32 values torch.linspace produces there (the table was made from them;
// exact probabilities move the levels by up to 1.1e-7); the quantiles (bisection on std::erfc to
// the last bit) and the normalisation are in double.
std::vector<double> Nf4CodebookFromDefinition();

}  // namespace hoist::kernels::cpu
