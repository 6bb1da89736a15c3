// The element types of the CUDA kernels and the conventions every kernels/cuda/ op follows.
//
//   - Activations and their gradients are arrays of one DType (core/dtype.h): fp32, bf16 or fp16
//     (16-bit values are the hardware formats __nv_bfloat16 / __half, the same bits as the CPU's
//     uint16_t patterns). Arithmetic is fp32 inside every kernel; each output element is rounded
//     once to its array's type (round to nearest even), as the CPU model rounds its activations.
//   - Parameter gradients (dweight, dbias, dwte, ...) and layernorm statistics are fp32.
//   - Shapes and names follow kernels/cpu/ops.h: N = B*T rows, C channels, OC output channels,
//     NH heads, V real vocabulary, Vp padded. Backward ops ACCUMULATE (+=) into every gradient
//     they write, exactly as the CPU twins do, so the CPU op is each CUDA op's oracle.
//   - Every op has three layers: the __global__ kernel (private to its .cu file), a launcher that
//     picks the grid for a stream, and the entry declared in the op's header, which validates its
//     arguments (null pointers, non-positive sizes, unsupported types: kInvalidArgument naming the
//     op and the argument) and returns the launch's Status. Entries only enqueue work on `stream`
//     and never synchronise; pointers are device memory that outlives the work. Never the legacy
//     default stream: a null stream is refused.
//   - Determinism: elementwise and row ops give the same bits run to run; ops that scatter into
//     shared parameter gradients (embedding backward, layernorm and bias reductions) add with
//     fp32 atomics, so their low bits may vary between runs. Headers say which.
#pragma once

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace hoist::kernels::cuda {

// The CUDA library type of `type`, for cuBLAS and cuBLASLt: CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F.
cudaDataType_t CudaDataType(DType type);

// Validation helpers the entries share: each returns kInvalidArgument "<op>: <what>" or Ok.
Status CheckPointer(const char* op, const char* name, const void* p);
Status CheckPositive(const char* op, const char* name, int64_t value);
Status CheckStream(const char* op, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
