// The 8-bit AdamW step at SIMD level avx512 (flags in kernels/CMakeLists.txt).
#define HOIST_ADAMW8_NAMESPACE avx512
#include "kernels/cpu/adamw8bit_kernels.inc"
