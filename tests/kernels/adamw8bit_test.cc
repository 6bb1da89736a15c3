// The 8-bit AdamW step (adamw8bit_step.h): one step against a float64 reference of the same
// algorithm, and every SIMD level and thread count against the scalar loop, bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/adamw8bit_step.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/cast.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using testing::RandomFloats;

// A shard in the middle of a run: quantized moments of plausible magnitudes, block by block of
// different scales.
struct State {
  std::vector<float> param, grad;
  std::vector<uint16_t> grad16, copy;
  std::vector<uint8_t> m, v;
  std::vector<float> absmax_m, absmax_v;

  State(size_t n, DType grad_format, uint32_t seed)
      : param(RandomFloats(n, seed)),
        grad(RandomFloats(n, seed + 1)),
        grad16(n),
        copy(n, 0xffff),
        m(n),
        v(n),
        absmax_m(static_cast<size_t>(QuantBlocks(static_cast<int64_t>(n)))),
        absmax_v(absmax_m.size()) {
    std::vector<float> m32 = RandomFloats(n, seed + 2, -1e-2f, 1e-2f);
    std::vector<float> v32 = RandomFloats(n, seed + 3, 0.0f, 1e-3f);
    for (size_t i = 0; i < n; ++i) {
      const float scale = std::pow(4.0f, -static_cast<float>((i / 256) % 5));
      m32[i] *= scale;
      v32[i] *= scale * scale;
      grad[i] *= scale;
    }
    const auto sn = static_cast<int64_t>(n);
    QuantizeBlockwise(SignedDynamicMap(), m32.data(), sn, m.data(), absmax_m.data());
    QuantizeBlockwise(UnsignedDynamicMap(), v32.data(), sn, v.data(), absmax_v.data());
    if (grad_format == DType::kBFloat16) {
      CastFp32ToBf16(grad16.data(), grad.data(), sn);
      CastBf16ToFp32(grad.data(), grad16.data(), sn);
    } else if (grad_format == DType::kFloat16) {
      CastFp32ToFp16(grad16.data(), grad.data(), sn);
      CastFp16ToFp32(grad.data(), grad16.data(), sn);
    }
  }

  AdamW8bitShard Shard(DType grad_format, DType copy_format, bool with_copy) {
    AdamW8bitShard s;
    s.param = param.data();
    s.m = m.data();
    s.v = v.data();
    s.absmax_m = absmax_m.data();
    s.absmax_v = absmax_v.data();
    s.grad = grad_format == DType::kFloat32 ? static_cast<const void*>(grad.data())
                                            : static_cast<const void*>(grad16.data());
    s.grad_format = grad_format;
    s.param_copy = with_copy ? copy.data() : nullptr;
    s.copy_format = copy_format;
    s.n = param.size();
    return s;
  }
};

AdamWHyperparams Hyper() {
  AdamWHyperparams h;
  h.lr = 3e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.995f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.75f;
  h.step = 7;
  return h;
}

// The same algorithm in float64: dequantize, update, absmax, nearest code.
TEST(AdamW8bit, OneStepMatchesAFloat64Reference) {
  const size_t n = 3 * 256 + 77;
  State s(n, DType::kFloat32, 5);
  const State before = s;
  const AdamWHyperparams h = Hyper();
  AdamW8bitStepAt(SimdLevel::kScalar, s.Shard(DType::kFloat32, DType::kBFloat16, false), h);

  const DynamicMap& mm = SignedDynamicMap();
  const DynamicMap& vm = UnsignedDynamicMap();
  const double bc1 = 1 - std::pow(double{h.beta1}, 7.0), bc2 = 1 - std::pow(double{h.beta2}, 7.0);
  int near_midpoint = 0;
  for (size_t b = 0; b * 256 < n; ++b) {
    const size_t lo = b * 256, hi = std::min(n, lo + 256);
    std::vector<double> m(hi - lo), v(hi - lo);
    double am = 0, av = 0;
    for (size_t i = lo; i < hi; ++i) {
      const double g = double{before.grad[i]} * h.grad_scale;
      m[i - lo] =
          double{h.beta1} * mm.code[before.m[i]] * before.absmax_m[b] + (1 - double{h.beta1}) * g;
      v[i - lo] = double{h.beta2} * vm.code[before.v[i]] * before.absmax_v[b] +
                  (1 - double{h.beta2}) * g * g;
      am = std::max(am, std::fabs(m[i - lo]));
      av = std::max(av, v[i - lo]);
      const double p = before.param[i] * (1 - double{h.lr} * h.weight_decay) -
                       (h.lr / bc1) * m[i - lo] / (std::sqrt(v[i - lo] / bc2) + h.eps);
      // fp32 rounding of each operation: a few ulp of the parameter and of the update.
      EXPECT_NEAR(s.param[i], p, std::fabs(p) * 0x1p-21 + 1e-5 * h.lr) << i;
    }
    EXPECT_NEAR(s.absmax_m[b], am, am * 1e-6);
    EXPECT_NEAR(s.absmax_v[b], av, av * 1e-6);
    // Codes: the nearest code of m / absmax in float64, except within float rounding of a
    // midpoint, where the neighbour is as good.
    for (size_t i = lo; i < hi; ++i) {
      for (int which = 0; which < 2; ++which) {
        const DynamicMap& map = which == 0 ? mm : vm;
        const double y = which == 0 ? m[i - lo] / am : v[i - lo] / av;
        int best = 0;
        for (int c = 1; c < 256; ++c) {
          if (std::fabs(y - map.code[c]) < std::fabs(y - map.code[best])) best = c;
        }
        const int got = which == 0 ? s.m[i] : s.v[i];
        if (got != best) {
          ++near_midpoint;
          EXPECT_EQ(std::abs(got - best), 1);
          const double mid = (double{map.code[got]} + map.code[best]) / 2;
          EXPECT_LE(std::fabs(y - mid), std::fabs(mid) * 1e-5) << i;
        }
      }
    }
  }
  EXPECT_LE(near_midpoint, 3);
}

TEST(AdamW8bit, ZeroStateStartsLikeAdamW) {
  // Step 1 from zero moments: every code is the map's 0 and every absmax 0.
  const size_t n = 300;
  State s(n, DType::kFloat32, 9);
  std::fill(s.absmax_m.begin(), s.absmax_m.end(), 0.0f);
  std::fill(s.absmax_v.begin(), s.absmax_v.end(), 0.0f);
  std::fill(s.m.begin(), s.m.end(), QuantizeNearest(SignedDynamicMap(), 0.0f));
  std::fill(s.v.begin(), s.v.end(), QuantizeNearest(UnsignedDynamicMap(), 0.0f));
  std::vector<float> p32 = s.param, m32(n, 0.0f), v32(n, 0.0f);
  AdamWHyperparams h = Hyper();
  h.step = 1;
  AdamW8bitStepAt(SimdLevel::kScalar, s.Shard(DType::kFloat32, DType::kBFloat16, false), h);
  AdamWShard ref;
  ref.param = p32.data();
  ref.m = m32.data();
  ref.v = v32.data();
  ref.grad = s.grad.data();
  ref.n = n;
  AdamWFusedStepAt(SimdLevel::kScalar, ref, h);
  // The first update reads zero moments either way: the same bits as the 32-bit step.
  EXPECT_EQ(std::memcmp(p32.data(), s.param.data(), n * sizeof(float)), 0);
}

// Every level and thread count gives the scalar loop's bits: params, codes, absmaxes, copies.
TEST(AdamW8bit, SimdLevelsAndThreadsAreBitIdenticalToScalar) {
  const size_t sizes[] = {1, 255, 257, 16384 + 300, 3 * 16384 + 1000};
  const struct {
    DType grad, copy;
    bool with_copy;
  } formats[] = {{DType::kFloat32, DType::kBFloat16, false},
                 {DType::kBFloat16, DType::kBFloat16, true},
                 {DType::kFloat16, DType::kFloat16, true}};
  for (size_t n : sizes) {
    for (const auto& f : formats) {
      State ref(n, f.grad, 17);
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      AdamW8bitStepAt(SimdLevel::kScalar, ref.Shard(f.grad, f.copy, f.with_copy), Hyper());
      omp_set_num_threads(threads);
      for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
        if (!AdamWFusedLevelAvailable(level)) continue;
        State s(n, f.grad, 17);
        AdamW8bitStepAt(level, s.Shard(f.grad, f.copy, f.with_copy), Hyper());
        SCOPED_TRACE(std::string(SimdLevelName(level)) + " n=" + std::to_string(n));
        EXPECT_EQ(std::memcmp(s.param.data(), ref.param.data(), n * sizeof(float)), 0);
        EXPECT_EQ(s.m, ref.m);
        EXPECT_EQ(s.v, ref.v);
        EXPECT_EQ(s.absmax_m, ref.absmax_m);
        EXPECT_EQ(s.absmax_v, ref.absmax_v);
        EXPECT_EQ(s.copy, ref.copy);
      }
    }
  }
}

// Many steps keep the 8-bit trajectory close to the 32-bit one (the quantization error does
// not accumulate: each step requantizes the current moments).
TEST(AdamW8bit, TracksTheThirtyTwoBitStepOverManySteps) {
  const size_t n = 2048;
  State s(n, DType::kFloat32, 31);
  std::fill(s.absmax_m.begin(), s.absmax_m.end(), 0.0f);
  std::fill(s.absmax_v.begin(), s.absmax_v.end(), 0.0f);
  std::fill(s.m.begin(), s.m.end(), QuantizeNearest(SignedDynamicMap(), 0.0f));
  std::fill(s.v.begin(), s.v.end(), QuantizeNearest(UnsignedDynamicMap(), 0.0f));
  std::vector<float> p32 = s.param, m32(n, 0.0f), v32(n, 0.0f);
  const std::vector<float> start = s.param;
  AdamWHyperparams h = Hyper();
  for (int step = 1; step <= 100; ++step) {
    h.step = step;
    s.grad = RandomFloats(n, 1000 + static_cast<uint32_t>(step));
    for (size_t i = 0; i < n; ++i) s.grad[i] += 0.5f * std::sin(0.01f * static_cast<float>(i));
    AdamW8bitStepAt(SimdLevel::kScalar, s.Shard(DType::kFloat32, DType::kBFloat16, false), h);
    AdamWShard ref;
    ref.param = p32.data();
    ref.m = m32.data();
    ref.v = v32.data();
    ref.grad = s.grad.data();
    ref.n = n;
    AdamWFusedStepAt(SimdLevel::kScalar, ref, h);
  }
  double moved = 0, diff = 0;
  for (size_t i = 0; i < n; ++i) {
    moved += std::pow(double{p32[i]} - start[i], 2);
    diff += std::pow(double{p32[i]} - s.param[i], 2);
  }
  // Relative to how far the 32-bit step moved the weights.
  EXPECT_LT(std::sqrt(diff / moved), 0.05);
}

}  // namespace
}  // namespace hoist::kernels::cpu
