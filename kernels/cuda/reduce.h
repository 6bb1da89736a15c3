// The global gradient norm on the GPU: the sum of squares over several fp32 tensors in one
// launch; CPU twin: cpu::SumOfSquares. Two passes with a fixed order (per-block partials, then
// one block adds them), so the result is deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace hoist::kernels::cuda {

struct DeviceSpan {
  const float* data = nullptr;
  int64_t n = 0;
};

// Floats of device scratch SumOfSquares needs.
int64_t SumOfSquaresWorkspaceFloats();

// *out (one double, device memory) = the sum over every span of x^2: each block sums a fixed
// slice in fp32, and one block adds the partials in fp64. `workspace` (device) holds
// SumOfSquaresWorkspaceFloats() floats. Empty spans are allowed; no spans gives 0.
Status SumOfSquares(const std::vector<DeviceSpan>& spans, double* out, float* workspace,
                    cudaStream_t stream);

}  // namespace hoist::kernels::cuda
