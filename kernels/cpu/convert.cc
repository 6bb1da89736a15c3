#include "kernels/cpu/convert.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cast.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel_for.h"

namespace hoist::kernels::cpu {
namespace {

// 16-bit arithmetic goes through fp32 in chunks of this many elements.
constexpr int64_t kChunk = 1 << 16;

}  // namespace

void ToFloat(const void* src, DType type, float* dst, int64_t n) {
  switch (type) {
    case DType::kFloat32:
      if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBFloat16: CastBf16ToFp32(dst, static_cast<const uint16_t*>(src), n); return;
    case DType::kFloat16: CastFp16ToFp32(dst, static_cast<const uint16_t*>(src), n); return;
  }
}

void FromFloat(const float* src, void* dst, DType type, int64_t n) {
  switch (type) {
    case DType::kFloat32:
      if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBFloat16: CastFp32ToBf16(static_cast<uint16_t*>(dst), src, n); return;
    case DType::kFloat16: CastFp32ToFp16(static_cast<uint16_t*>(dst), src, n); return;
  }
}

void Accumulate(void* acc, const void* add, DType type, float scale, int64_t n) {
  if (type == DType::kFloat32) {
    float* a = static_cast<float*>(acc);
    const float* b = static_cast<const float*>(add);
    ParallelFor(n, n > kChunk, [&](int64_t i) { a[i] += scale * b[i]; });
    return;
  }
  std::vector<float> wide_a(static_cast<size_t>(std::min(n, kChunk)));
  std::vector<float> wide_b(wide_a.size());
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    void* a = ElementPtr(acc, type, begin);
    ToFloat(a, type, wide_a.data(), count);
    ToFloat(ElementPtr(add, type, begin), type, wide_b.data(), count);
    for (int64_t i = 0; i < count; ++i) wide_a[size_t(i)] += scale * wide_b[size_t(i)];
    FromFloat(wide_a.data(), a, type, count);
  }
}

void AccumulateFloat(void* acc, DType type, const float* add, int64_t n) {
  if (type == DType::kFloat32) {
    float* a = static_cast<float*>(acc);
    ParallelFor(n, n > kChunk, [&](int64_t i) { a[i] += add[i]; });
    return;
  }
  std::vector<float> wide(static_cast<size_t>(std::min(n, kChunk)));
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    void* a = ElementPtr(acc, type, begin);
    ToFloat(a, type, wide.data(), count);
    for (int64_t i = 0; i < count; ++i) wide[size_t(i)] += add[begin + i];
    FromFloat(wide.data(), a, type, count);
  }
}

double ScaledSumOfSquares(const void* x, DType type, float scale, int64_t n) {
  if (n <= 0) return 0.0;
  if (type == DType::kFloat32 && scale == 1.0f) {
    return SumOfSquares(static_cast<const float*>(x), static_cast<size_t>(n));
  }
  // Fixed-size chunks widened to fp32 (and scaled), each summed by the deterministic kernel.
  std::vector<float> chunk(static_cast<size_t>(std::min(n, kChunk)));
  double sum = 0.0;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    ToFloat(ElementPtr(x, type, begin), type, chunk.data(), count);
    if (scale != 1.0f) {
      for (int64_t i = 0; i < count; ++i) chunk[static_cast<size_t>(i)] *= scale;
    }
    sum += SumOfSquares(chunk.data(), static_cast<size_t>(count));
  }
  return sum;
}

}  // namespace hoist::kernels::cpu
