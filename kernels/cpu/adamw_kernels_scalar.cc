// The fused optimizer step's inner loop at SIMD level scalar (flags in kernels/CMakeLists.txt).
#define HOIST_ADAMW_NAMESPACE scalar
#include "kernels/cpu/adamw_kernels.inc"
