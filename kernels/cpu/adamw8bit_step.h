// bitsandbytes' block-wise 8-bit AdamW step on the CPU: the moments are kept as codes of the
// dynamic maps (blockwise_quant.h; m signed, v unsigned) with one fp32 absmax per block of
// kQuantBlockSize elements. Per block: dequantize m and v, the 32-bit AdamW update of
// adamw_step.h from them (the same fixed sequence of fp32 operations, no FMA), the fp32 master
// and the 16-bit copy written, then the new absmax of m and of v (max |.| of the updated block)
// and the block requantized against it. Per element it reads param, grad and two code bytes and
// writes param, the copy and two code bytes: 2 bytes of moments where AdamW moves 8.
//
// Every SIMD level gives the same bits (table look-ups, comparisons, max and correctly rounded
// arithmetic only, contraction off), and so does every thread count (blocks are independent).
// Blocking; thread-safe for distinct buffers; the caller owns every buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/adamw_step.h"

namespace hoist::kernels::cpu {

// One tensor: n elements; blocks start at element 0 (the last may be short).
struct AdamW8bitShard {
  float* param = nullptr;
  uint8_t* m = nullptr;        // n codes of SignedDynamicMap
  uint8_t* v = nullptr;        // n codes of UnsignedDynamicMap
  float* absmax_m = nullptr;   // QuantBlocks(n)
  float* absmax_v = nullptr;   // QuantBlocks(n)
  const void* grad = nullptr;  // n of grad_format
  DType grad_format = DType::kFloat32;
  uint16_t* param_copy = nullptr;  // may be null; n of copy_format (16-bit)
  DType copy_format = DType::kBFloat16;
  size_t n = 0;
};

void AdamW8bitStep(const AdamW8bitShard& shard, const AdamWHyperparams& h);
// At an explicit level (AdamWFusedLevelAvailable tells which exist), for tests and benchmarks.
void AdamW8bitStepAt(SimdLevel level, const AdamW8bitShard& shard, const AdamWHyperparams& h);

}  // namespace hoist::kernels::cpu
