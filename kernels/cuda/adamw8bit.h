// bitsandbytes' block-wise 8-bit AdamW step on the GPU, many tensors per launch: one thread
// block per quantization block of 256 elements dequantizes m and v, applies AdamW's update with
// the operations of the 32-bit kernel (explicitly rounded, no FMA), writes the fp32 master and
// the compute-type copy, reduces the block's new absmaxes and requantizes. CPU twin and oracle:
// cpu::AdamW8bitStep (kernels/cpu/adamw8bit_step.h), whose bits it reproduces.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

struct AdamW8bitTensor {
  float* param = nullptr;
  uint8_t* m = nullptr;        // n codes of the signed dynamic map
  uint8_t* v = nullptr;        // n codes of the unsigned dynamic map
  float* absmax_m = nullptr;   // ceil(n / 256)
  float* absmax_v = nullptr;   // ceil(n / 256)
  const void* grad = nullptr;  // grad_type
  void* copy = nullptr;        // copy_type, may be null
  int64_t n = 0;
  float weight_decay = 0.0f;
};

// One step over every tensor (params.device_grad_scale is not supported: null). Deterministic;
// no array may overlap another.
Status AdamW8bitMultiTensor(const std::vector<AdamW8bitTensor>& tensors, DType grad_type,
                            DType copy_type, const AdamWStepParams& params, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
