#include <cstddef>
#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vector_kernels.h"

namespace hoist::kernels::cpu {

void LayerNormForwardAt(SimdLevel level, float* out, float* mean, float* rstd, const float* inp,
                        const float* weight, const float* bias, int N, int C) {
  const VectorKernels& k = VectorKernelsFor(level);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = static_cast<size_t>(i) * C;
    k.layernorm_forward_row(out + row, mean + i, rstd + i, inp + row, weight, bias, C);
  }
}

void LayerNormBackwardAt(SimdLevel level, float* dinp, float* dweight, float* dbias,
                         const float* dout, const float* inp, const float* weight,
                         const float* mean, const float* rstd, int N, int C) {
  const VectorKernels& k = VectorKernelsFor(level);
  // dweight and dbias sum over rows: threads own column blocks and walk the rows in order, so
  // there is no race and the order is fixed. dinp is per row. Frozen parameters (null) skip
  // their sums; where only one of the two is frozen, the row kernel's sums for it go to a
  // scratch row that is dropped.
  constexpr int kBlock = 64;
  const bool any_param = dweight != nullptr || dbias != nullptr;
  const int num_blocks = any_param ? (C + kBlock - 1) / kBlock : 0;
  std::vector<float> dropped;
  if (any_param && (dweight == nullptr || dbias == nullptr)) {
    dropped.assign(static_cast<size_t>(C), 0.0f);
    if (dweight == nullptr) dweight = dropped.data();
    if (dbias == nullptr) dbias = dropped.data();
  }
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int i = 0; i < N; ++i) {
      const size_t row = static_cast<size_t>(i) * C;
      k.layernorm_backward_row(dinp + row, dout + row, inp + row, weight, mean[i], rstd[i], C);
    }
#pragma omp for schedule(static)
    for (int blk = 0; blk < num_blocks; ++blk) {
      const int c0 = blk * kBlock;
      const int count = C - c0 < kBlock ? C - c0 : kBlock;
      for (int i = 0; i < N; ++i) {
        const size_t at = static_cast<size_t>(i) * C + c0;
        k.layernorm_param_grad_row(dweight + c0, dbias + c0, dout + at, inp + at, mean[i], rstd[i],
                                   count);
      }
    }
  }
}

void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int N, int C) {
  LayerNormForwardAt(ActiveSimdLevel(), out, mean, rstd, inp, weight, bias, N, C);
}

void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean, const float* rstd,
                       int N, int C) {
  LayerNormBackwardAt(ActiveSimdLevel(), dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

}  // namespace hoist::kernels::cpu
