#include "kernels/cpu/nf4.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/nf4_kernels.h"
#include "kernels/cpu/parallel_for.h"
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

void DequantizeNf4Rect(const nf4::Matrix& matrix, int64_t C, int64_t row0, int64_t rows,
                       int64_t col0, int64_t cols, DType type, bool out_bf16, void* out) {
  DequantizeNf4RectAt(ActiveSimdLevel(), matrix, C, row0, rows, col0, cols, type, out_bf16, out);
}

void DequantizeNf4RectAt(SimdLevel level, const nf4::Matrix& matrix, int64_t C, int64_t row0,
                         int64_t rows, int64_t col0, int64_t cols, DType type, bool out_bf16,
                         void* out) {
  HOIST_CHECK(level != SimdLevel::kAvx512 || SimdLevelAvailable(level))
      << "DequantizeNf4RectAt: avx512 on a CPU without it";
  const DynamicMap* map = matrix.absmax == nullptr ? &SignedDynamicMap() : nullptr;
  const bool avx512 = level == SimdLevel::kAvx512;
  const auto absmax_of = [&](int64_t b) {
    if (map == nullptr) return matrix.absmax[b];
    const float scaled =
        map->code[matrix.absmax_codes[b]] * matrix.absmax_scales[b / kQuantBlockSize];
    return scaled + matrix.absmax_offset;
  };
  // Each run of a row within one block: the block's 16 values computed and rounded once, then
  // looked up per code (so the bits of multiplying and rounding element by element).
  const auto row = [&](int64_t r, auto* dst) {
    using T = std::remove_pointer_t<decltype(dst)>;
    const int64_t flat = matrix.first + (row0 + r) * C + col0;
    for (int64_t i = 0; i < cols;) {
      const int64_t at = flat + i, block = at / nf4::kBlock;
      const int64_t run = std::min(cols - i, (block + 1) * nf4::kBlock - at);
      const float absmax = absmax_of(block);
      float values[16];
      for (int k = 0; k < 16; ++k) values[k] = nf4::kCodebook[k] * absmax;
      T table[16];
      if constexpr (sizeof(T) == 2) {
        FromFloat(values, table, DType::kBFloat16, 16);
      } else if (type != DType::kFloat32) {
        alignas(4) uint16_t rounded[16];
        FromFloat(values, rounded, type, 16);
        ToFloat(rounded, type, table, 16);
      } else {
        std::copy(values, values + 16, table);
      }
      T* d = dst + i;
      int64_t j = 0;
      if (at % 2 != 0) {  // the run starts on a low nibble
        d[0] = table[matrix.codes[at / 2] & 15];
        j = 1;
      }
      if (avx512) {
        constexpr int64_t kVector = sizeof(T) == 2 ? 32 : 16;
        const int64_t vector = (run - j) / kVector * kVector;
        if constexpr (sizeof(T) == 2) {
          avx512::Nf4LookUpBf16(matrix.codes + (at + j) / 2, vector, table, d + j);
        } else {
          avx512::Nf4LookUpFp32(matrix.codes + (at + j) / 2, vector, table, d + j);
        }
        j += vector;
      }
      const uint8_t* bytes = matrix.codes + (at + j) / 2;
      for (; j + 1 < run; j += 2, ++bytes) {
        d[j] = table[*bytes >> 4];
        d[j + 1] = table[*bytes & 15];
      }
      if (j < run) d[j] = table[*bytes >> 4];
      i += run;
    }
  };
  const bool parallel = rows > 1 && rows * cols >= (int64_t{1} << 15);
  ParallelFor(rows, parallel, [&](int64_t r) {
    if (out_bf16) {
      row(r, static_cast<uint16_t*>(out) + r * cols);
    } else {
      row(r, static_cast<float*>(out) + r * cols);
    }
  });
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
