#include <omp.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vector_kernels.h"

namespace hoist::kernels::cpu {
namespace {

// Elements per parallel work item of the streaming ops: large enough to amortise the indirect
// call, small enough to balance threads on GPT-2's activation sizes.
constexpr size_t kChunk = 16384;

size_t NumChunks(size_t n) { return (n + kChunk - 1) / kChunk; }
size_t ChunkSize(size_t n, size_t chunk) {
  const size_t begin = chunk * kChunk;
  return n - begin < kChunk ? n - begin : kChunk;
}

}  // namespace

void GeluForwardAt(SimdLevel level, float* out, const float* inp, size_t n) {
  const VectorKernels& k = VectorKernelsFor(level);
  const long long chunks = static_cast<long long>(NumChunks(n));
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < chunks; ++i) {
    const size_t begin = static_cast<size_t>(i) * kChunk;
    k.gelu_forward(out + begin, inp + begin, ChunkSize(n, i));
  }
}

void GeluBackwardAt(SimdLevel level, float* dinp, const float* inp, const float* dout, size_t n) {
  const VectorKernels& k = VectorKernelsFor(level);
  const long long chunks = static_cast<long long>(NumChunks(n));
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < chunks; ++i) {
    const size_t begin = static_cast<size_t>(i) * kChunk;
    k.gelu_backward(dinp + begin, inp + begin, dout + begin, ChunkSize(n, i));
  }
}

double SumOfSquaresAt(SimdLevel level, const float* x, size_t n) {
  const VectorKernels& k = VectorKernelsFor(level);
  // One contiguous slice per thread, partials added in thread order: the result depends only
  // on n and the thread count.
  std::vector<double> partials(omp_get_max_threads(), 0.0);
#pragma omp parallel
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t id = static_cast<size_t>(omp_get_thread_num());
    const size_t begin = n / threads * id + (id < n % threads ? id : n % threads);
    const size_t count = n / threads + (id < n % threads ? 1 : 0);
    partials[id] = k.sum_of_squares(x + begin, count);
  }
  double sum = 0.0;
  for (double p : partials) sum += p;
  return sum;
}

void GeluForward(float* out, const float* inp, size_t n) {
  GeluForwardAt(ActiveSimdLevel(), out, inp, n);
}

void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) {
  GeluBackwardAt(ActiveSimdLevel(), dinp, inp, dout, n);
}

void Scale(float* out, const float* inp, size_t n, float scale) {
  const long long count = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < count; ++i) out[i] = inp[i] * scale;
}

void SoftcapForward(float* x, size_t n, float cap) {
  const long long count = static_cast<long long>(n);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < count; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

void ResidualForward(float* out, const float* a, const float* b, size_t n) {
  const long long count = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

void ResidualBackward(float* da, float* db, const float* dout, size_t n) {
  const long long count = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < count; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

double SumOfSquares(const float* x, size_t n) { return SumOfSquaresAt(ActiveSimdLevel(), x, n); }

}  // namespace hoist::kernels::cpu
