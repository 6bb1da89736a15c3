#include <cblas.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/dropout_mask.h"

namespace hoist::kernels::cpu {

void Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (beta == 0.0f || K == 0) {
    // beta 0 must not read C (it may hold NaN, which 0 * C would keep: the window is zeroed
    // first, whatever the BLAS does with beta 0), and sgemm with K 0 is not C = beta C in every
    // BLAS (it is done here).
    ParallelFor(M, int64_t{M} * N > 16384, [&](int64_t i) {
      float* __restrict row = C + static_cast<size_t>(i) * static_cast<size_t>(ldc);
      if (beta == 0.0f) {
        for (int j = 0; j < N; ++j) row[j] = 0.0f;
      } else {
        for (int j = 0; j < N; ++j) row[j] *= beta;
      }
    });
    if (K == 0) return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void Dropout(float* out, const float* inp, int64_t n, float p, uint64_t seed, int64_t first) {
  const uint64_t base = dropout::StreamBase(seed);
  const float scale = dropout::KeepScale(p);
  ParallelFor(n, n > 65536, [&](int64_t i) {
    const bool keep = dropout::Keep(base, static_cast<uint64_t>(first + i), p);
    out[i] = keep ? inp[i] * scale : 0.0f;
  });
}

}  // namespace hoist::kernels::cpu
