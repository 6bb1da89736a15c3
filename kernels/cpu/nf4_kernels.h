// The NF4 look-up's vector variants (kernels/cpu/nf4.cc picks them at run time): out[j] =
// table[code j] for the `count` elements whose codes start at the high nibble of codes[0], count a
// multiple of 32 (bf16) or 16 (fp32). Internal to the kernels library.
#pragma once

#include <cstdint>

namespace hoist::kernels::cpu::avx512 {

void Nf4LookUpBf16(const uint8_t* codes, int64_t count, const uint16_t* table, uint16_t* out);
void Nf4LookUpFp32(const uint8_t* codes, int64_t count, const float* table, float* out);

}  // namespace hoist::kernels::cpu::avx512
