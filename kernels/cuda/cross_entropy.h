// Fused softmax + cross-entropy over the vocabulary on the GPU; CPU twin:
// cpu::SoftmaxCrossEntropy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/dtype.h"

namespace hoist::kernels::cuda {

// logits (N,Vp) `type`, of which the first V columns are real. losses (N, fp32) =
// -log softmax(z[i,:V])[targets[i]] with z the logits, or with softcap > 0 softcap *
// tanh(logits / softcap) in fp32. dlogits (`type`, may be null, may alias logits) is OVERWRITTEN
// with the gradient with respect to the raw logits, dloss * (softmax(z) - onehot) (times
// 1 - tanh^2(logits / softcap) when capped), in the first V columns and 0 in the padding.
// Targets are in [0, V); softcap is 0 (none) or positive and finite. One block per row, fp32
// softmax (row max, then the sum); deterministic.
Status SoftmaxCrossEntropy(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                           float dloss, int N, int V, int Vp, float softcap, DType type,
                           cudaStream_t stream);

}  // namespace hoist::kernels::cuda
