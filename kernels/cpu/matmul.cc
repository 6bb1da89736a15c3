#include <cblas.h>

#include <cstddef>

#include "kernels/cpu/ops.h"

namespace hoist::kernels::cpu {

void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int N,
                   int C, int OC) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out,
              OC);
  if (bias == nullptr) return;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    float* __restrict o = out + static_cast<size_t>(i) * OC;
    for (int j = 0; j < OC; ++j) o[j] += bias[j];
  }
}

void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int N, int C, int OC) {
  if (dinp != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                1.0f, dinp, C);
  }
  if (dweight != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                dweight, C);
  }
  if (dbias != nullptr) BiasBackward(dbias, dout, N, OC);
}

void BiasBackward(float* dbias, const float* dout, int N, int OC) {
  // Column sums: each thread owns a block of columns and adds the rows in order (no race,
  // fixed order), with the inner loop running along a contiguous row segment.
  constexpr int kBlock = 128;
  const int num_blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < num_blocks; ++blk) {
    const int j0 = blk * kBlock;
    const int count = OC - j0 < kBlock ? OC - j0 : kBlock;
    float* __restrict db = dbias + j0;
    for (int i = 0; i < N; ++i) {
      const float* __restrict d = dout + static_cast<size_t>(i) * OC + j0;
      for (int j = 0; j < count; ++j) db[j] += d[j];
    }
  }
}

}  // namespace hoist::kernels::cpu
