// NormalFloat4 (QLoRA, Dettmers et al. 2023), the 4-bit format of a frozen base: one definition for
// the host and the CUDA kernels so that the two cannot drift. A tensor of n fp32 values is stored
// as n 4-bit codes, two to a byte, and one fp32 absmax per block of kBlock consecutive elements;
// element i stands for kCodebook[code i] * absmax[i / kBlock].
//
// The layout is bitsandbytes': element 2i in the high nibble of byte i, element 2i + 1 in the low
// one (an odd n leaves the last low nibble 0); the codebook is its NF4 table, the fp32 values of
// create_normal_map(0.9677083): the normal quantiles of 8 positive and 7 negative evenly spaced
// probabilities in [0.5, 0.9677083], 0, normalised by the largest to [-1, 1]. cpu/nf4.h rebuilds it
// from that definition in float64 for the tests.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HOIST_NF4_HD __host__ __device__
#else
#define HOIST_NF4_HD
#endif

namespace hoist::kernels::nf4 {

inline constexpr int64_t kBlock = 64;  // elements per absmax

// Ascending; kCodebook[0] == -1, kCodebook[7] == 0, kCodebook[15] == 1. Not symmetric: 8 levels
// above 0, 7 below.
inline constexpr float kCodebook[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// Bytes of the codes of n elements: two to a byte.
inline constexpr int64_t CodeBytes(int64_t n) { return (n + 1) / 2; }
// absmax values of n elements: one per block of kBlock, the last possibly shorter.
inline constexpr int64_t Blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// The code of the codebook value nearest to x (x in [-1, 1], the element over its block's absmax):
// the number of fp32 midpoints (kCodebook[k] + kCodebook[k + 1]) / 2 that x is strictly above, so
// a tie (x exactly on a midpoint) goes to the lower code, as bitsandbytes' decision tree sends it.
// Below -1 gives 0, above 1 gives 15; NaN gives 0 (the quantizer refuses non-finite input first).
HOIST_NF4_HD inline uint8_t Nearest(float x) {
  // Evaluated at compile time, so device code reads no host array.
  constexpr float kMid[15] = {
      (kCodebook[0] + kCodebook[1]) * 0.5f,   (kCodebook[1] + kCodebook[2]) * 0.5f,
      (kCodebook[2] + kCodebook[3]) * 0.5f,   (kCodebook[3] + kCodebook[4]) * 0.5f,
      (kCodebook[4] + kCodebook[5]) * 0.5f,   (kCodebook[5] + kCodebook[6]) * 0.5f,
      (kCodebook[6] + kCodebook[7]) * 0.5f,   (kCodebook[7] + kCodebook[8]) * 0.5f,
      (kCodebook[8] + kCodebook[9]) * 0.5f,   (kCodebook[9] + kCodebook[10]) * 0.5f,
      (kCodebook[10] + kCodebook[11]) * 0.5f, (kCodebook[11] + kCodebook[12]) * 0.5f,
      (kCodebook[12] + kCodebook[13]) * 0.5f, (kCodebook[13] + kCodebook[14]) * 0.5f,
      (kCodebook[14] + kCodebook[15]) * 0.5f,
  };
  uint8_t code = 0;
  for (int k = 0; k < 15; ++k) code += x > kMid[k] ? 1 : 0;
  return code;
}

// A frozen matmul weight of OC rows by C columns held in NF4, as the matmuls read it
// (Backend::MatmulForwardNf4): element (o, c) is element first + o * C + c of a quantized array
// whose codes and absmaxes these are (the array's element 0 is the first of its first block, so
// a matrix may start mid-block or mid-byte). The absmaxes are fp32 (absmax), or with double
// quantization (absmax null) absmax b = signed_map[absmax_codes[b]] * absmax_scales[b / 256] +
// absmax_offset, the product and the sum each rounded to fp32 (Backend::DequantizeNf4Absmax's
// bits; the map is kernels/cpu/blockwise_quant.h's). Pointers are the backend's device memory.
struct Matrix {
  const uint8_t* codes = nullptr;
  const float* absmax = nullptr;
  const uint8_t* absmax_codes = nullptr;
  const float* absmax_scales = nullptr;
  float absmax_offset = 0.0f;
  int64_t first = 0;
};

// The scratch an NF4 matmul dequantizes its panels into: kPanelBytes, or less for a matrix of
// fewer elements (they are dequantized at up to 4 bytes each). Either way it holds a whole row
// and a whole column of any matrix up to kPanelBytes / 4 wide.
inline constexpr int64_t kPanelBytes = int64_t{16} << 20;
inline constexpr int64_t WorkspaceBytes(int64_t largest_matrix_elements) {
  return largest_matrix_elements * 4 < kPanelBytes ? largest_matrix_elements * 4 : kPanelBytes;
}
// How many of a matrix's `lines` rows (or columns), each `width` elements of `element_bytes`
// bytes, one panel of `workspace_bytes` takes: as many as fit, at most `lines`, at least 1 (the
// caller checked that one fits).
inline constexpr int64_t PanelLines(int64_t workspace_bytes, int64_t width, int64_t element_bytes,
                                    int64_t lines) {
  const int64_t fit = workspace_bytes / (width * element_bytes);
  return fit < 1 ? 1 : (fit < lines ? fit : lines);
}

// The code of element i in `codes` (the nibble layout above).
HOIST_NF4_HD inline uint8_t CodeAt(const uint8_t* codes, int64_t i) {
  const uint8_t byte = codes[i / 2];
  return (i % 2 == 0) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0x0F);
}

}  // namespace hoist::kernels::nf4

#undef HOIST_NF4_HD
