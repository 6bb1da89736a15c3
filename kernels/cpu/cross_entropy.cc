#include <cstddef>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vector_kernels.h"

namespace hoist::kernels::cpu {

void SoftmaxCrossEntropyAt(SimdLevel level, float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, float dloss, int N, int V, int Vp) {
  const VectorKernels& k = VectorKernelsFor(level);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = static_cast<size_t>(i) * Vp;
    losses[i] = k.softmax_xent_row(dlogits == nullptr ? nullptr : dlogits + row, logits + row,
                                   targets[i], dloss, V, Vp);
  }
}

void SoftmaxCrossEntropy(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                         float dloss, int N, int V, int Vp) {
  SoftmaxCrossEntropyAt(ActiveSimdLevel(), losses, dlogits, logits, targets, dloss, N, V, Vp);
}

void SoftmaxCrossEntropy16(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                           float dloss, int N, int V, int Vp, DType type) {
  const VectorKernels& k = VectorKernelsFor(ActiveSimdLevel());
#pragma omp parallel
  {
    // One row at a time, widened into (and its gradient rounded from) a row that stays in cache;
    // the fp32 kernel may overwrite its input with the gradient.
    std::vector<float> row(static_cast<size_t>(Vp));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const int64_t offset = int64_t{i} * Vp;
      ToFloat(ElementPtr(logits, type, offset), type, row.data(), Vp);
      losses[i] = k.softmax_xent_row(dlogits == nullptr ? nullptr : row.data(), row.data(),
                                     targets[i], dloss, V, Vp);
      if (dlogits != nullptr) FromFloat(row.data(), ElementPtr(dlogits, type, offset), type, Vp);
    }
  }
}

}  // namespace hoist::kernels::cpu
