// The 8-bit AdamW step at SIMD level avx2 (flags in kernels/CMakeLists.txt).
#define HOIST_ADAMW8_NAMESPACE avx2
#include "kernels/cpu/adamw8bit_kernels.inc"
