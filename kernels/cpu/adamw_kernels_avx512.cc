// The fused optimizer step's inner loop at SIMD level avx512 (flags in kernels/CMakeLists.txt).
#define HOIST_ADAMW_NAMESPACE avx512
#include "kernels/cpu/adamw_kernels.inc"
