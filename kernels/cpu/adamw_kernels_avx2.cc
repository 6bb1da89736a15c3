// The fused optimizer step's inner loop at SIMD level avx2 (flags in kernels/CMakeLists.txt).
#define HOIST_ADAMW_NAMESPACE avx2
#include "kernels/cpu/adamw_kernels.inc"
