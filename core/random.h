// Rng: a small deterministic random number generator (SplitMix64 seeding xoshiro256**) with
// uniform and normal draws that do not depend on the C++ library's distributions, so weights,
// samples and tests are reproducible: uniform draws are bit-exact everywhere; normal draws go
// through libm's log and cos, whose last bit may differ between C libraries or CPU variants. Not
// thread-safe; cheap to copy (the copy continues the same stream).
#pragma once

#include <cmath>
#include <cstdint>

namespace hoist {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& word : state_) word = SplitMix64(x);
  }

  uint64_t NextU64() {
    uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Uniform in [0, bound), bound > 0, without bias: the high word of a 128-bit product, the
  // draws that would favour the low values rejected.
  uint64_t Below(uint64_t bound) {
    unsigned __int128 product = static_cast<unsigned __int128>(NextU64()) * bound;
    if (static_cast<uint64_t>(product) < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (static_cast<uint64_t>(product) < threshold) {
        product = static_cast<unsigned __int128>(NextU64()) * bound;
      }
    }
    return static_cast<uint64_t>(product >> 64);
  }

  // Standard normal by Box-Muller (one value per call; the pair's second half is dropped so the
  // stream position does not depend on call history).
  double Normal() {
    double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t SplitMix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4];
};

}  // namespace hoist
