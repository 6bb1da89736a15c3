// Matmul with bias on the GPU through cuBLASLt, using its epilogues where they fit; CPU twin:
// cpu::MatmulForward / MatmulBackward. fp32 runs in true fp32 (CUBLAS_COMPUTE_32F, no TF32), so
// fp32 training matches the CPU; bf16 and fp16 inputs accumulate in fp32.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be null. With `gelu_out` not
// null, the GELU epilogue also writes gelu_out (N,OC) = GELU(out) (out keeps the pre-activation
// the backward needs). inp, weight, bias, out and gelu_out are all `type`.
Status MatmulForward(BlasHandle& blas, void* out, const void* inp, const void* weight,
                     const void* bias, int N, int C, int OC, DType type, cudaStream_t stream,
                     void* gelu_out = nullptr);
// dinp (N,C, `type`) += dout @ weight (null: not wanted); dweight (OC,C, fp32) += dout^T @ inp
// (null: a frozen weight, skipped); dbias (OC, fp32) += column sums of dout (null: no bias; atomics
// across row blocks).
Status MatmulBackward(BlasHandle& blas, void* dinp, float* dweight, float* dbias, const void* dout,
                      const void* inp, const void* weight, int N, int C, int OC, DType type,
                      cudaStream_t stream);

}  // namespace hoist::kernels::cuda
