// Row-at-a-time moves between strided blocks, for the bf16 attention kernels that gather a head's
// rows of qkv into dense blocks and scatter results back (attention_bf16.cc,
// flash_attention_bf16.cc). Each call runs on its caller's thread alone, with the cast loops of
// the active SIMD level (cast.h's functions cost a dispatch per call, and these are called per
// block). Thread-safe for distinct outputs.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/cpu_features.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/cast_kernels.h"

namespace hoist::kernels::cpu {

inline const CastKernels& RowCastKernels() {
  static const CastKernels& kernels = []() -> const CastKernels& {
    const SimdLevel level =
        CastLevelAvailable(ActiveSimdLevel()) ? ActiveSimdLevel() : SimdLevel::kScalar;
    switch (level) {
      case SimdLevel::kAvx512: return avx512::kCastKernels;
      case SimdLevel::kAvx2: return avx2::kCastKernels;
      case SimdLevel::kScalar: break;
    }
    return scalar::kCastKernels;
  }();
  return kernels;
}

// rows x cols of src (row stride lds) rounded to bf16 into dst (row stride ldd).
inline void RoundRows(uint16_t* dst, int64_t ldd, const float* src, int64_t lds, int rows,
                      int cols) {
  const auto round = RowCastKernels().fp32_to_bf16;
  for (int r = 0; r < rows; ++r) round(dst + r * ldd, src + r * lds, cols);
}

// The same, widening.
inline void WidenRows(float* dst, int64_t ldd, const uint16_t* src, int64_t lds, int rows,
                      int cols) {
  const auto widen = RowCastKernels().bf16_to_fp32;
  for (int r = 0; r < rows; ++r) widen(dst + r * ldd, src + r * lds, cols);
}

// rows x cols of src (row stride lds) into dst (row stride ldd).
template <typename E>
void CopyRows(E* dst, int64_t ldd, const E* src, int64_t lds, int rows, int cols) {
  for (int r = 0; r < rows; ++r) std::memcpy(dst + r * ldd, src + r * lds, sizeof(E) * cols);
}

}  // namespace hoist::kernels::cpu
