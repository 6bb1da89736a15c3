// Matmul with bias on the GPU through cuBLASLt, using its epilogues where they fit; CPU twin:
// cpu::MatmulForward / MatmulBackward. fp32 runs in true fp32 (CUBLAS_COMPUTE_32F, no TF32), so
// fp32 training matches the CPU; bf16 and fp16 inputs accumulate in fp32.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/dtype.h"
#include "kernels/nf4.h"

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

// Backend::MatmulForwardNf4 / MatmulBackwardNf4 (kernels/backend.h): the products of a frozen
// NF4 weight (OC,C), dequantized to `type` a panel at a time into `workspace` (workspace_bytes of
// device memory) and multiplied as it is made. Forward: panels of whole rows, out[:, rows] =
// inp @ panel^T (+ bias), each output one product over C. Backward: panels of whole columns,
// dinp[:, cols] += dout @ panel, each element one product over OC added to it. Arguments are
// checked as the CPU backend checks them (nf4_args::CheckMatmulNf4). The panels and products are
// enqueued in order on `stream`; the workspace may be reused once they are done.
Status MatmulForwardNf4(BlasHandle& blas, void* out, const void* inp, const nf4::Matrix& weight,
                        const void* bias, int N, int C, int OC, DType type, void* workspace,
                        int64_t workspace_bytes, cudaStream_t stream);
Status MatmulBackwardNf4(BlasHandle& blas, void* dinp, const void* dout, const nf4::Matrix& weight,
                         int N, int C, int OC, DType type, void* workspace, int64_t workspace_bytes,
                         cudaStream_t stream);

}  // namespace hoist::kernels::cuda
