// Block-wise 8-bit quantization of optimizer states, as bitsandbytes' 8-bit optimizers define it:
// a dynamic quantization map of 256 codes in [-1, 1] (signed, for Adam's first moment) or [0, 1]
// (unsigned, for the second), and one fp32 absmax per block of kQuantBlockSize elements. A value
// x of a block with absmax A is stored as the index of the code nearest to x / A, and read back
// as code[index] * A.
//
// The maps (bitsandbytes functional.create_dynamic_map, 7 exponent bits): for each decade
// i = 0..6, the midpoints of linspace(0.1, 1, k + 1) scaled by 10^(i-6), with k = 2^i per sign
// (signed) or k = 2^(i+1) (unsigned); then 0 and 1; sorted. The signed map's 256 codes are 127
// negative ones down to -0.99296875, 0, and 127 positive ones up to 1 (there is no -1: a block
// whose largest magnitude is negative stores it as -0.99296875 A). Codes are computed in double
// and rounded once to float (bitsandbytes computes them in float32: at most one ulp apart).
//
// "Nearest" is decided against the 255 midpoints between adjacent codes, each rounded to float:
// the index is the number of midpoints strictly below x, so a value on a midpoint takes the lower
// code. Every SIMD level and the CUDA kernel use these tables, so they give the same codes.
//
// Thread-safe (the maps are built once, on first use); blocking; the caller owns every buffer.
#pragma once

#include <cstdint>

namespace hoist::kernels::cpu {

// Elements per absmax: bitsandbytes' block-wise 8-bit optimizers use 256.
constexpr int64_t kQuantBlockSize = 256;

// The quantizers' fast path (QuantizeByBucket) splits the floats by their bits into buckets of
// width 2^-8 relative (sign, exponent 2^-25 .. 2^0, top 8 mantissa bits; smaller magnitudes one
// bucket, larger ones the top bucket), narrow enough that no bucket holds two midpoints (the
// maps' midpoints are >= 0.7% apart; checked when the table is built). A bucket stores the
// number of midpoints below it, and one comparison with the next midpoint finishes the count.
constexpr int kQuantExponents = 27;  // [0, 2^-25) and 2^-25 .. 2^0
constexpr int kQuantBuckets = 2 * kQuantExponents * 256;

struct DynamicMap {
  float code[256];       // ascending
  float threshold[256];  // threshold[k] = (code[k] + code[k+1]) / 2, rounded to float; [255] inf
  uint8_t bucket_base[kQuantBuckets + 3];  // + 3: vector code reads 4 bytes at each index
};

// The bucket of x (see DynamicMap): integer operations on its bits.
inline uint32_t QuantBucket(float x) {
  uint32_t bits;
  __builtin_memcpy(&bits, &x, sizeof(bits));
  const uint32_t sign = bits >> 31;
  int32_t e = static_cast<int32_t>((bits >> 23) & 0xffu) - 101;  // 2^-25 -> 1
  uint32_t mantissa = (bits >> 15) & 0xffu;
  if (e < 1) {
    e = 0;
    mantissa = 0;
  } else if (e > kQuantExponents - 1) {
    e = kQuantExponents - 1;
    mantissa = 255;
  }
  return ((sign * kQuantExponents + static_cast<uint32_t>(e)) << 8) + mantissa;
}

// The same index as QuantizeNearest, from the bucket table and one comparison.
inline uint8_t QuantizeByBucket(const DynamicMap& map, float x) {
  const unsigned base = map.bucket_base[QuantBucket(x)];
  return static_cast<uint8_t>(base + (x > map.threshold[base] ? 1u : 0u));
}

const DynamicMap& SignedDynamicMap();    // Adam's first moment
const DynamicMap& UnsignedDynamicMap();  // Adam's second moment

// The number of absmaxes of n elements.
constexpr int64_t QuantBlocks(int64_t n) { return (n + kQuantBlockSize - 1) / kQuantBlockSize; }

// The index of the code nearest to x (x is already divided by the block's absmax): the number of
// midpoints below x, by binary search (the definition; QuantizeByBucket is the fast path).
inline uint8_t QuantizeNearest(const DynamicMap& map, float x) {
  unsigned q = 0;
  for (unsigned step = 128; step > 0; step >>= 1) {
    if (x > map.threshold[q + step - 1]) q += step;
  }
  return static_cast<uint8_t>(q);
}

// The reciprocal every quantizer multiplies by: 1 / absmax, and 0 for an all-zero block.
inline float InverseAbsmax(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

// codes[i] = nearest code of x[i] / absmax of its block; absmax[b] = max |x| over block b
// (QuantBlocks(n) of them; the last block may be short).
void QuantizeBlockwise(const DynamicMap& map, const float* x, int64_t n, uint8_t* codes,
                       float* absmax);
// out[i] = code[codes[i]] * absmax of its block.
void DequantizeBlockwise(const DynamicMap& map, const uint8_t* codes, const float* absmax,
                         int64_t n, float* out);
// QuantizeBlockwise for values that may have come out of DequantizeBlockwise (a checkpoint's
// moments): for each block it picks an absmax under which the codes dequantize to x's bits
// exactly, when one exists, so that dequantize -> requantize -> dequantize is the identity. Such
// a block's absmax is max |x| when the largest magnitude sits on code +-1, and otherwise (the
// signed map's -0.99296875) max |x| / 0.99296875 or a float next to it; the candidates are tried
// in that order. Values that no absmax reproduces (moments of a 32-bit run) are quantized as
// QuantizeBlockwise does.
void RequantizeBlockwise(const DynamicMap& map, const float* x, int64_t n, uint8_t* codes,
                         float* absmax);

}  // namespace hoist::kernels::cpu
