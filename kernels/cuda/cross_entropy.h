// Fused softmax + cross-entropy over the vocabulary on the GPU; CPU twin:
// cpu::SoftmaxCrossEntropy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// logits (N,Vp) `type`, of which the first V columns are real. losses (N, fp32) =
// -log softmax(logits[i,:V])[targets[i]]. dlogits (`type`, may be null, may alias logits) is
// OVERWRITTEN with dloss * (softmax - onehot) in the first V columns and 0 in the padding.
// Targets are in [0, V). One block per row, fp32 softmax (row max, then the sum); deterministic.
Status SoftmaxCrossEntropy(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                           float dloss, int N, int V, int Vp, DType type, cudaStream_t stream);

}  // namespace hoist::kernels::cuda
