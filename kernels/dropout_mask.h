// The dropout mask of Backend::Dropout (kernels/backend.h), one definition for the CPU and the
// CUDA kernels so that the two cannot drift: keep(seed, i) depends on nothing but the seed and
// the element's index, in integer arithmetic that host and device compute identically.
//
// The hash is splitmix64's finaliser (Steele, Lea and Flood's SplitMix; the mixer of
// java.util.SplittableRandom) applied to a counter: the seed is mixed once into a stream base,
// element i hashes base + (i + 1) * golden, where golden is 2^64 over the golden ratio (odd, so
// the counters of one stream never repeat within 2^64 elements). The top 24 bits give
// u = k / 2^24 in [0, 1), exact in fp32, and the element is kept when u >= p.
// Seeds that differ by a small amount give unrelated masks (the seed is mixed before use).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HOIST_DROPOUT_HD __host__ __device__
#else
#define HOIST_DROPOUT_HD
#endif

namespace hoist::kernels::dropout {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

HOIST_DROPOUT_HD inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The per-call stream of `seed`: computed once per call, passed to Keep.
HOIST_DROPOUT_HD inline uint64_t StreamBase(uint64_t seed) { return Mix64(seed + kGolden); }

// Element i's uniform as a 24-bit integer k: u = k / 2^24.
HOIST_DROPOUT_HD inline uint32_t Uniform24(uint64_t base, uint64_t i) {
  return static_cast<uint32_t>(Mix64(base + (i + 1) * kGolden) >> 40);
}

// Whether element i is kept at drop probability p: u >= p, compared in fp32 (u is exact there).
HOIST_DROPOUT_HD inline bool Keep(uint64_t base, uint64_t i, float p) {
  return static_cast<float>(Uniform24(base, i)) * (1.0f / 16777216.0f) >= p;
}

// The factor kept elements are multiplied by, in fp32: 1 / (1 - p).
HOIST_DROPOUT_HD inline float KeepScale(float p) { return 1.0f / (1.0f - p); }

}  // namespace hoist::kernels::dropout

#undef HOIST_DROPOUT_HD
