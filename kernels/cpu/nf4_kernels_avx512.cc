// NF4 codes looked up in a block's table of 16 values, 32 bf16 or 16 fp32 values per instruction
// (a permute with the codes as indices); kernels/cpu/nf4.cc calls these where ActiveSimdLevel()
// is avx512 (ISA flags set in kernels/CMakeLists.txt). No arithmetic, so the same values as the
// scalar look-up.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/nf4_kernels.h"

namespace hoist::kernels::cpu::avx512 {
namespace {

// Byte i of the 16 (or 8) loaded becomes the 16-bit indices of elements 2i (its high nibble,
// the lower word) and 2i + 1 (its low nibble) in one 32-bit lane.
inline __m512i NibblePairs(__m128i bytes) {
  const __m512i b = _mm512_cvtepu8_epi32(bytes);
  return _mm512_or_si512(_mm512_srli_epi32(b, 4),
                         _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(15)), 16));
}

}  // namespace

void Nf4LookUpBf16(const uint8_t* codes, int64_t count, const uint16_t* table, uint16_t* out) {
  const __m512i values =
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(table)));
  for (int64_t k = 0; k < count; k += 32) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + k / 2));
    _mm512_storeu_si512(out + k, _mm512_permutexvar_epi16(NibblePairs(bytes), values));
  }
}

void Nf4LookUpFp32(const uint8_t* codes, int64_t count, const float* table, float* out) {
  const __m512 values = _mm512_loadu_ps(table);
  for (int64_t k = 0; k < count; k += 16) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + k / 2));
    // The eight pairs' sixteen 16-bit indices, widened to one 32-bit index per element.
    const __m256i pairs = _mm512_castsi512_si256(NibblePairs(bytes));
    _mm512_storeu_ps(out + k, _mm512_permutexvar_ps(_mm512_cvtepu16_epi32(pairs), values));
  }
}

}  // namespace hoist::kernels::cpu::avx512
