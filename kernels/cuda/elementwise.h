// GELU (tanh approximation), scaling, logit soft-capping and the residual add on the GPU; CPU
// twins: cpu::GeluForward, GeluBackward, Scale, SoftcapForward, ResidualForward, ResidualBackward.
// All arrays are `type`; deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); out may alias inp.
Status GeluForward(void* out, const void* inp, int64_t n, DType type, cudaStream_t stream);
// dinp += GELU'(inp) * dout
Status GeluBackward(void* dinp, const void* inp, const void* dout, int64_t n, DType type,
                    cudaStream_t stream);
// out = inp * scale (out may alias inp); scale finite. n 0 does nothing.
Status Scale(void* out, const void* inp, int64_t n, float scale, DType type, cudaStream_t stream);
// x = cap * tanh(x / cap) in place; cap 0 (nothing done) or positive and finite. n 0 does nothing.
Status SoftcapForward(void* x, int64_t n, float cap, DType type, cudaStream_t stream);
// out = a + b (out may alias a or b)
Status ResidualForward(void* out, const void* a, const void* b, int64_t n, DType type,
                       cudaStream_t stream);
// da += dout; db += dout
Status ResidualBackward(void* da, void* db, const void* dout, int64_t n, DType type,
                        cudaStream_t stream);

}  // namespace hoist::kernels::cuda
