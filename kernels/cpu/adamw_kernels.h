// Private to kernels/cpu: the single-threaded inner loop of the fused optimizer step of
// adamw_step.h, compiled once per SIMD level (adamw_kernels_{scalar,avx2,avx512}.cc) and reached
// through a table, as cast_kernels.h does for the casts. adamw_step.cc owns the threading.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/adamw_step.h"
#include "kernels/cpu/vector_kernels.h"

namespace hoist::kernels::cpu {

struct AdamWKernels {
  // shard's arrays are already offset to this piece; n = shard.n elements.
  void (*fused_step)(const AdamWShard& shard, const AdamWCoeffs& c);
};

namespace scalar {
extern const AdamWKernels kAdamWKernels;
}
namespace avx2 {
extern const AdamWKernels kAdamWKernels;
}
namespace avx512 {
extern const AdamWKernels kAdamWKernels;
}

}  // namespace hoist::kernels::cpu
