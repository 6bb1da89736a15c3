#include "kernels/cpu/cast.h"

#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/cast_kernels.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/parallel_for.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace hoist::kernels::cpu {
namespace {

// Elements per parallel work item: a chunk's fp32 side is 128 KiB, large enough to amortise
// the indirect call and the thread hand-off, small enough to balance threads on one bucket.
constexpr int64_t kChunk = 32768;

bool CpuHasF16c() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

const CastKernels& CastKernelsFor(SimdLevel level) {
  HOIST_CHECK(CastLevelAvailable(level))
      << "SIMD level " << SimdLevelName(level) << " is not available for casts on this CPU";
  switch (level) {
    case SimdLevel::kScalar: return scalar::kCastKernels;
    case SimdLevel::kAvx2: return avx2::kCastKernels;
    case SimdLevel::kAvx512: return avx512::kCastKernels;
  }
  return scalar::kCastKernels;
}

SimdLevel CastLevel() {
  static const SimdLevel level =
      CastLevelAvailable(ActiveSimdLevel()) ? ActiveSimdLevel() : SimdLevel::kScalar;
  return level;
}

int64_t NumChunks(int64_t n) { return (n + kChunk - 1) / kChunk; }
size_t ChunkSize(int64_t n, int64_t chunk) {
  const int64_t begin = chunk * kChunk;
  return static_cast<size_t>(n - begin < kChunk ? n - begin : kChunk);
}

// Calls fn(begin, count) for each chunk of [0, n), in parallel when there is more than one.
template <typename Fn>
void ForEachChunk(int64_t n, Fn fn) {
  HOIST_CHECK_GE(n, 0);
  const int64_t chunks = NumChunks(n);
  ParallelFor(chunks, chunks > 1, [&](int64_t c) { fn(c * kChunk, ChunkSize(n, c)); });
}

}  // namespace

bool CastLevelAvailable(SimdLevel level) {
  static const bool has_f16c = CpuHasF16c();
  return SimdLevelAvailable(level) && (level == SimdLevel::kScalar || has_f16c);
}

void CastFp32ToBf16At(SimdLevel level, uint16_t* out, const float* in, int64_t n) {
  const CastKernels& k = CastKernelsFor(level);
  ForEachChunk(
      n, [&](int64_t begin, size_t count) { k.fp32_to_bf16(out + begin, in + begin, count); });
}

void CastFp32ToFp16At(SimdLevel level, uint16_t* out, const float* in, int64_t n) {
  const CastKernels& k = CastKernelsFor(level);
  ForEachChunk(
      n, [&](int64_t begin, size_t count) { k.fp32_to_fp16(out + begin, in + begin, count); });
}

void CastBf16ToFp32At(SimdLevel level, float* out, const uint16_t* in, int64_t n) {
  const CastKernels& k = CastKernelsFor(level);
  ForEachChunk(
      n, [&](int64_t begin, size_t count) { k.bf16_to_fp32(out + begin, in + begin, count); });
}

void CastFp16ToFp32At(SimdLevel level, float* out, const uint16_t* in, int64_t n) {
  const CastKernels& k = CastKernelsFor(level);
  ForEachChunk(
      n, [&](int64_t begin, size_t count) { k.fp16_to_fp32(out + begin, in + begin, count); });
}

bool AllFiniteAt(SimdLevel level, const float* x, int64_t n) {
  const CastKernels& k = CastKernelsFor(level);
  HOIST_CHECK_GE(n, 0);
  const int64_t chunks = NumChunks(n);
  // One chunk without OpenMP, as ParallelFor (kernels/cpu/parallel_for.h) does.
  if (chunks <= 1) return n == 0 || k.all_finite(x, ChunkSize(n, 0));
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite)
  for (int64_t c = 0; c < chunks; ++c) {
    finite = k.all_finite(x + c * kChunk, ChunkSize(n, c)) && finite;
  }
  return finite;
}

bool UnscaleInPlaceAt(SimdLevel level, float* x, int64_t n, float scale) {
  HOIST_CHECK(scale > 0 && std::isfinite(scale)) << "loss scale " << scale;
  const CastKernels& k = CastKernelsFor(level);
  HOIST_CHECK_GE(n, 0);
  const float factor = 1.0f / scale;
  const int64_t chunks = NumChunks(n);
  if (chunks <= 1) return n == 0 || k.scale_all_finite(x, ChunkSize(n, 0), factor);
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite)
  for (int64_t c = 0; c < chunks; ++c) {
    // Every chunk is scaled even after a non-finite one: the caller may still read the values.
    const bool chunk_finite = k.scale_all_finite(x + c * kChunk, ChunkSize(n, c), factor);
    finite = chunk_finite && finite;
  }
  return finite;
}

void CastFp32ToBf16(uint16_t* out, const float* in, int64_t n) {
  CastFp32ToBf16At(CastLevel(), out, in, n);
}
void CastFp32ToFp16(uint16_t* out, const float* in, int64_t n) {
  CastFp32ToFp16At(CastLevel(), out, in, n);
}
void CastBf16ToFp32(float* out, const uint16_t* in, int64_t n) {
  CastBf16ToFp32At(CastLevel(), out, in, n);
}
void CastFp16ToFp32(float* out, const uint16_t* in, int64_t n) {
  CastFp16ToFp32At(CastLevel(), out, in, n);
}
bool AllFinite(const float* x, int64_t n) { return AllFiniteAt(CastLevel(), x, n); }
bool UnscaleInPlace(float* x, int64_t n, float scale) {
  return UnscaleInPlaceAt(CastLevel(), x, n, scale);
}

}  // namespace hoist::kernels::cpu
