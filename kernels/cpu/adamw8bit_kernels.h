// Private to kernels/cpu: the single-threaded body of the 8-bit AdamW step of adamw8bit_step.h,
// compiled once per SIMD level (adamw8bit_kernels_{scalar,avx2,avx512}.cc) and reached through a
// table, as adamw_kernels.h does for the 32-bit step. adamw8bit_step.cc owns the threading.
#pragma once

#include "kernels/cpu/adamw8bit_step.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/vector_kernels.h"

namespace hoist::kernels::cpu {

struct AdamW8bitKernels {
  // shard's arrays are offset to a block boundary; shard.n elements, QuantBlocks(n) absmaxes.
  void (*step)(const AdamW8bitShard& shard, const AdamWCoeffs& c, const DynamicMap& m_map,
               const DynamicMap& v_map);
};

namespace scalar {
extern const AdamW8bitKernels kAdamW8bitKernels;
}
namespace avx2 {
extern const AdamW8bitKernels kAdamW8bitKernels;
}
namespace avx512 {
extern const AdamW8bitKernels kAdamW8bitKernels;
}

}  // namespace hoist::kernels::cpu
