// The LoRA ops on the GPU (kernels/backend.h gives their contracts); CPU twins: cpu::Gemm and
// cpu::Dropout (kernels/cpu/ops.h), with the CPU backend's 16-bit handling.
//   - Gemm: cublasGemmEx under CUBLAS_COMPUTE_32F (true fp32 for fp32 operands, fp32
//     accumulation for bf16 and fp16; C rounded once), row-major through the usual swap of the
//     operands; K 0 scales C's window by beta in a kernel of its own. Deterministic for a shape.
//   - Dropout: kernels/dropout_mask.h's mask, the same bits as the CPU's.
// Arguments are checked as the CPU backend checks them (kernels/lora_args.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// C (M,N) = alpha op(A) @ op(B) + beta C, row-major with leading dimensions; A and B `type`, C
// `c_type` (fp32 or `type`); beta 0 does not read C; only C's M x N window is written.
Status Gemm(BlasHandle& blas, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
            int64_t ldc, DType type, DType c_type, cudaStream_t stream);
// out[i] = inp[i] * keep(seed, i) / (1 - p); out may be inp.
Status Dropout(void* out, const void* inp, int64_t n, float p, uint64_t seed, DType type,
               cudaStream_t stream);

}  // namespace hoist::kernels::cuda
