// Token and position embedding on the GPU; CPU twin: cpu::EncoderForward / EncoderBackward.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// out (B,T,C) = wte[tokens[b,t]] (Vp,C) + wpe[t] (maxT,C); out, wte and wpe are `type`.
// Tokens must be in [0, Vp) (the data loader checks them). Deterministic.
Status EncoderForward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                      int T, int C, DType type, cudaStream_t stream);
// dwte (Vp,C) += dout scattered by token; dwpe (maxT,C) += sum over b of dout[b,t]. dout is
// `type`, dwte and dwpe fp32. dwte adds with atomics (low bits may vary); dwpe is deterministic.
Status EncoderBackward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B,
                       int T, int C, DType type, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
