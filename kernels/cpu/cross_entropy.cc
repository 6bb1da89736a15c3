#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vector_kernels.h"

namespace hoist::kernels::cpu {
namespace {

// A position whose target is negative (ignored, as a masked prompt token): no loss, and a zero
// gradient row (Vp elements of `type`; null: loss only).
void IgnoredRow(float* loss, void* dlogits, DType type, int Vp) {
  *loss = 0.0f;
  if (dlogits != nullptr) std::memset(dlogits, 0, static_cast<size_t>(Vp) * DTypeSize(type));
}

}  // namespace

void SoftmaxCrossEntropyAt(SimdLevel level, float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, float dloss, int N, int V, int Vp) {
  const VectorKernels& k = VectorKernelsFor(level);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = static_cast<size_t>(i) * Vp;
    if (targets[i] < 0) {
      IgnoredRow(&losses[i], dlogits == nullptr ? nullptr : dlogits + row, DType::kFloat32, Vp);
      continue;
    }
    losses[i] = k.softmax_xent_row(dlogits == nullptr ? nullptr : dlogits + row, logits + row,
                                   targets[i], dloss, V, Vp);
  }
}

namespace {

// One row's loss with the logits capped first: t = tanh(x / cap) and the capped logits t * cap go
// to `scratch` (2 Vp floats), the row kernel takes its gradient with respect to the capped logits
// there, and the cap's derivative 1 - t^2 carries it to the raw logits in dlogits (null: loss
// only). dlogits may alias logits: every logit is read before the first write.
float CappedXentRow(const VectorKernels& k, float* dlogits, const float* logits, int target,
                    float dloss, int V, int Vp, float softcap, float* scratch) {
  float* t = scratch;
  float* capped = scratch + Vp;
  for (int i = 0; i < V; ++i) {
    t[i] = std::tanh(logits[i] / softcap);
    capped[i] = t[i] * softcap;
  }
  const float loss =
      k.softmax_xent_row(dlogits == nullptr ? nullptr : capped, capped, target, dloss, V, Vp);
  if (dlogits != nullptr) {
    for (int i = 0; i < V; ++i) dlogits[i] = capped[i] * (1.0f - t[i] * t[i]);
    for (int i = V; i < Vp; ++i) dlogits[i] = 0.0f;
  }
  return loss;
}

}  // namespace

void SoftmaxCrossEntropy(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                         float dloss, int N, int V, int Vp, float softcap) {
  if (softcap == 0.0f) {
    SoftmaxCrossEntropyAt(ActiveSimdLevel(), losses, dlogits, logits, targets, dloss, N, V, Vp);
    return;
  }
  const VectorKernels& k = VectorKernelsFor(ActiveSimdLevel());
#pragma omp parallel
  {
    std::vector<float> scratch(2 * static_cast<size_t>(Vp));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const size_t row = static_cast<size_t>(i) * Vp;
      if (targets[i] < 0) {
        IgnoredRow(&losses[i], dlogits == nullptr ? nullptr : dlogits + row, DType::kFloat32, Vp);
        continue;
      }
      losses[i] = CappedXentRow(k, dlogits == nullptr ? nullptr : dlogits + row, logits + row,
                                targets[i], dloss, V, Vp, softcap, scratch.data());
    }
  }
}

void SoftmaxCrossEntropy16(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                           float dloss, int N, int V, int Vp, DType type, float softcap) {
  const VectorKernels& k = VectorKernelsFor(ActiveSimdLevel());
#pragma omp parallel
  {
    // One row at a time, widened into (and its gradient rounded from) a row that stays in cache;
    // the fp32 kernel may overwrite its input with the gradient.
    std::vector<float> row(static_cast<size_t>(Vp));
    std::vector<float> scratch(softcap == 0.0f ? 0 : 2 * static_cast<size_t>(Vp));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const int64_t offset = int64_t{i} * Vp;
      if (targets[i] < 0) {
        IgnoredRow(&losses[i], dlogits == nullptr ? nullptr : ElementPtr(dlogits, type, offset),
                   type, Vp);
        continue;
      }
      ToFloat(ElementPtr(logits, type, offset), type, row.data(), Vp);
      float* d = dlogits == nullptr ? nullptr : row.data();
      losses[i] = softcap == 0.0f ? k.softmax_xent_row(d, row.data(), targets[i], dloss, V, Vp)
                                  : CappedXentRow(k, d, row.data(), targets[i], dloss, V, Vp,
                                                  softcap, scratch.data());
      if (dlogits != nullptr) FromFloat(row.data(), ElementPtr(dlogits, type, offset), type, Vp);
    }
  }
}

}  // namespace hoist::kernels::cpu
