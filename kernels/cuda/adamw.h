// The fused multi-tensor AdamW step on the GPU: many tensors in few launches, reading the fp32
// parameter, gradient and moments once and writing the parameter, the moments and the
// compute-type copy of the parameter that the next forward reads. CPU twin: cpu::AdamWFusedStep,
// whose arithmetic it repeats operation for operation (no fused multiply-add), so fp32 results
// agree to the bit with the CPU step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

struct AdamWTensor {
  float* param = nullptr;      // fp32 master weights, updated in place
  float* m = nullptr;          // fp32 first moment
  float* v = nullptr;          // fp32 second moment
  const void* grad = nullptr;  // grad_type
  void* copy = nullptr;        // copy_type, may be null (no copy)
  int64_t n = 0;
  float weight_decay = 0.0f;  // per tensor: decayed weights and the rest differ
};

struct AdamWStepParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float grad_scale = 1.0f;  // clipping and unscaling, folded into one factor
  int64_t step = 1;         // 1-based
  // When not null, a device float that multiplies grad_scale (a scale computed on the GPU, so
  // the host need not wait for it).
  const float* device_grad_scale = nullptr;
};

// One step over every tensor. grad_type and copy_type are fp32, bf16 or fp16 (copy_type is used
// only where a tensor has a copy). Deterministic; no array may overlap another.
Status AdamWMultiTensor(const std::vector<AdamWTensor>& tensors, DType grad_type, DType copy_type,
                        const AdamWStepParams& params, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
