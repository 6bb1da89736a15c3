// The 8-bit AdamW step at SIMD level scalar (flags in kernels/CMakeLists.txt).
#define HOIST_ADAMW8_NAMESPACE scalar
#include "kernels/cpu/adamw8bit_kernels.inc"
