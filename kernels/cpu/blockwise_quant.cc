#include "kernels/cpu/blockwise_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"

namespace hoist::kernels::cpu {
namespace {

DynamicMap BuildDynamicMap(bool is_signed) {
  std::vector<double> values;
  for (int i = 0; i < 7; ++i) {
    // Decade i holds k midpoints of the k intervals of linspace(0.1, 1, k + 1), scaled to
    // [10^(i-7), 10^(i-6)]; a signed map spends half its codes on the negative side.
    const int k = is_signed ? (1 << i) : (1 << (i + 1));
    const double scale = std::pow(10.0, i - 6);
    for (int j = 0; j < k; ++j) {
      const double lo = 0.1 + 0.9 * j / k;
      const double hi = 0.1 + 0.9 * (j + 1) / k;
      const double mean = scale * ((lo + hi) / 2.0);
      values.push_back(mean);
      if (is_signed) values.push_back(-mean);
    }
  }
  values.push_back(0.0);
  values.push_back(1.0);
  std::sort(values.begin(), values.end());
  DynamicMap map{};
  for (int c = 0; c < 256; ++c) map.code[c] = static_cast<float>(values[static_cast<size_t>(c)]);
  for (int c = 0; c < 255; ++c) {
    map.threshold[c] =
        static_cast<float>((static_cast<double>(map.code[c]) + map.code[c + 1]) / 2.0);
  }
  map.threshold[255] = std::numeric_limits<float>::infinity();
  // The buckets: [lo, hi) in magnitude; a positive bucket's base counts the midpoints below lo, a
  // negative one's (values in (-hi, -lo]) those at or below -hi.
  for (int sign = 0; sign < 2; ++sign) {
    for (int e = 0; e < kQuantExponents; ++e) {
      for (int m = 0; m < 256; ++m) {
        const double scale = std::ldexp(1.0, e - 26);
        const double lo = e == 0 ? 0.0 : scale * (1.0 + m / 256.0);
        const double hi = e == 0 ? std::ldexp(1.0, -25) : scale * (1.0 + (m + 1) / 256.0);
        int base = 0, inside = 0;
        for (int t = 0; t < 255; ++t) {
          const double x = map.threshold[t];
          if (sign == 0) {
            base += x < lo;
            inside += x >= lo && x < hi;
          } else {
            base += x <= -hi;
            inside += x > -hi && x <= -lo;
          }
        }
        HOIST_CHECK_LE(inside, 1) << "two midpoints in one quantization bucket";
        map.bucket_base[((sign * kQuantExponents + e) << 8) + m] = static_cast<uint8_t>(base);
      }
    }
  }
  return map;
}

void QuantizeBlock(const DynamicMap& map, const float* x, int64_t n, float absmax, uint8_t* codes) {
  const float inv = InverseAbsmax(absmax);
  for (int64_t i = 0; i < n; ++i) codes[i] = QuantizeByBucket(map, x[i] * inv);
}

// Whether the codes of x under `absmax` dequantize to x's bits.
bool Reproduces(const DynamicMap& map, const float* x, int64_t n, float absmax, uint8_t* codes) {
  QuantizeBlock(map, x, n, absmax, codes);
  for (int64_t i = 0; i < n; ++i) {
    const float back = map.code[codes[i]] * absmax;
    if (std::memcmp(&back, &x[i], sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace

const DynamicMap& SignedDynamicMap() {
  static const DynamicMap map = BuildDynamicMap(true);
  return map;
}

const DynamicMap& UnsignedDynamicMap() {
  static const DynamicMap map = BuildDynamicMap(false);
  return map;
}

void QuantizeBlockwise(const DynamicMap& map, const float* x, int64_t n, uint8_t* codes,
                       float* absmax) {
  for (int64_t b = 0; b * kQuantBlockSize < n; ++b) {
    const int64_t begin = b * kQuantBlockSize;
    const int64_t len = std::min(kQuantBlockSize, n - begin);
    float a = 0.0f;
    for (int64_t i = 0; i < len; ++i) a = std::max(a, std::fabs(x[begin + i]));
    absmax[b] = a;
    QuantizeBlock(map, x + begin, len, a, codes + begin);
  }
}

void DequantizeBlockwise(const DynamicMap& map, const uint8_t* codes, const float* absmax,
                         int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = map.code[codes[i]] * absmax[i / kQuantBlockSize];
}

void RequantizeBlockwise(const DynamicMap& map, const float* x, int64_t n, uint8_t* codes,
                         float* absmax) {
  for (int64_t b = 0; b * kQuantBlockSize < n; ++b) {
    const int64_t begin = b * kQuantBlockSize;
    const int64_t len = std::min(kQuantBlockSize, n - begin);
    const float* xb = x + begin;
    uint8_t* cb = codes + begin;
    float a = 0.0f;
    float most_negative = 0.0f;
    for (int64_t i = 0; i < len; ++i) {
      a = std::max(a, std::fabs(xb[i]));
      most_negative = std::min(most_negative, xb[i]);
    }
    absmax[b] = a;
    if (Reproduces(map, xb, len, a, cb)) continue;
    bool found = false;
    if (map.code[0] < 0.0f && most_negative < 0.0f) {
      // The largest magnitude was stored on the lowest code: the absmax it came from is near
      // |x| / |code[0]|, the division rounded once more than the product it undoes.
      const float guess = -most_negative / -map.code[0];
      float candidates[5] = {guess, std::nextafter(guess, 0.0f),
                             std::nextafter(guess, 2.0f * guess), 0.0f, 0.0f};
      candidates[3] = std::nextafter(candidates[1], 0.0f);
      candidates[4] = std::nextafter(candidates[2], 2.0f * guess);
      for (float candidate : candidates) {
        if (Reproduces(map, xb, len, candidate, cb)) {
          absmax[b] = candidate;
          found = true;
          break;
        }
      }
    }
    if (!found) QuantizeBlock(map, xb, len, a, cb);
  }
}

}  // namespace hoist::kernels::cpu
