#include "kernels/cpu/nf4.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/nf4.h"

namespace hoist::kernels::cpu {
namespace {

// Phi^-1(p) for p in [0.5, 1): bisection on Phi(x) = erfc(-x / sqrt 2) / 2, which is increasing,
// until the bracket cannot shrink (adjacent doubles), so the result is as exact as erfc is.
double NormalQuantile(double p) {
  double lo = 0.0, hi = 40.0;
  while (true) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo + (hi - lo) / 2;
}

// torch.linspace(start, end, steps) in fp32, as its CPU kernel evaluates it: a step in fp32, the
// first half counted up from start and the second half down from end.
std::vector<float> LinspaceFloat(float start, float end, int steps) {
  const float step = (end - start) / static_cast<float>(steps - 1);
  std::vector<float> out(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    out[static_cast<size_t>(i)] = i < steps / 2 ? start + step * static_cast<float>(i)
                                                : end - step * static_cast<float>(steps - 1 - i);
  }
  return out;
}

}  // namespace

Status QuantizeNf4(const float* src, int64_t n, uint8_t* codes, float* absmax) {
  if (n < 0) {
    return InvalidArgumentError("QuantizeNf4: n is negative (" + std::to_string(n) + ")");
  }
  if (n == 0) return Status::Ok();
  if (src == nullptr) return InvalidArgumentError("QuantizeNf4: src is null");
  if (codes == nullptr) return InvalidArgumentError("QuantizeNf4: codes is null");
  if (absmax == nullptr) return InvalidArgumentError("QuantizeNf4: absmax is null");
  // Scanned before anything is written, so that a refused tensor leaves the outputs untouched.
  int64_t first_bad = n;
#pragma omp parallel for schedule(static) reduction(min : first_bad)
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(src[i]) && i < first_bad) first_bad = i;
  }
  if (first_bad < n) {
    return InvalidArgumentError("QuantizeNf4: element " + std::to_string(first_bad) + " is " +
                                std::to_string(src[first_bad]) +
                                "; a 4-bit base needs finite weights (check the checkpoint)");
  }
  const int64_t blocks = nf4::Blocks(n);
  // A block is 64 elements, 32 whole bytes: the threads write disjoint bytes.
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * nf4::kBlock, last = std::min(n, first + nf4::kBlock);
    float amax = 0.0f;
    for (int64_t i = first; i < last; ++i) amax = std::max(amax, std::fabs(src[i]));
    absmax[b] = amax;
    for (int64_t i = first; i < last; i += 2) {
      const uint8_t hi = amax == 0.0f ? nf4::Nearest(0.0f) : nf4::Nearest(src[i] / amax);
      uint8_t lo = 0;
      if (i + 1 < last) lo = amax == 0.0f ? nf4::Nearest(0.0f) : nf4::Nearest(src[i + 1] / amax);
      codes[i / 2] = static_cast<uint8_t>((hi << 4) | lo);
    }
  }
  return Status::Ok();
}

void DequantizeNf4(const uint8_t* codes, const float* absmax, int64_t n, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = nf4::kCodebook[nf4::CodeAt(codes, i)] * absmax[i / nf4::kBlock];
  }
}

std::vector<double> Nf4CodebookFromDefinition() {
  constexpr float kOffset = 0.9677083f;
  std::vector<double> values;
  const std::vector<float> positive = LinspaceFloat(kOffset, 0.5f, 9);
  for (int i = 0; i < 8; ++i) values.push_back(NormalQuantile(positive[static_cast<size_t>(i)]));
  values.push_back(0.0);
  const std::vector<float> negative = LinspaceFloat(kOffset, 0.5f, 8);
  for (int i = 0; i < 7; ++i) values.push_back(-NormalQuantile(negative[static_cast<size_t>(i)]));
  std::sort(values.begin(), values.end());
  const double largest = values.back();
  for (double& v : values) v /= largest;
  return values;
}

}  // namespace hoist::kernels::cpu
