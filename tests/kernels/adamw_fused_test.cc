#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/adamw_step.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using testing::ExpectAllClose;
using testing::RandomFloats;

constexpr uint16_t kPoison = 0xffff;  // a NaN in bf16 and in fp16

// Sizes around the vector widths (8, 16), the inner block (512) and the parallel chunk (16384).
const size_t kSizes[] = {1, 7, 17, 511, 513, 16384 + 5, 3 * 16384 + 100};

// What a shard looks like before the step: the state of a run in progress at `step` (m, v from
// earlier steps) or a fresh one at step 1 (m = v = 0).
struct Inputs {
  std::vector<float> param, m, v;
  std::vector<float> grad;       // the gradient's values, exactly representable in grad_format
  std::vector<uint16_t> grad16;  // its bits when grad_format is 16-bit
};

Inputs MakeInputs(size_t n, int64_t step, DType grad_format, uint32_t seed) {
  Inputs in;
  in.param = RandomFloats(n, seed);
  if (step == 1) {
    in.m.assign(n, 0.0f);
    in.v.assign(n, 0.0f);
  } else {
    in.m = RandomFloats(n, seed + 1, -1e-2f, 1e-2f);
    in.v = RandomFloats(n, seed + 2, 1e-4f, 1e-2f);
  }
  in.grad = RandomFloats(n, seed + 3, -1.0f, 1.0f);
  if (grad_format != DType::kFloat32) {
    in.grad16.resize(n);
    if (grad_format == DType::kBFloat16) {
      CastFp32ToBf16At(SimdLevel::kScalar, in.grad16.data(), in.grad.data(), n);
      CastBf16ToFp32At(SimdLevel::kScalar, in.grad.data(), in.grad16.data(), n);
    } else {
      CastFp32ToFp16At(SimdLevel::kScalar, in.grad16.data(), in.grad.data(), n);
      CastFp16ToFp32At(SimdLevel::kScalar, in.grad.data(), in.grad16.data(), n);
    }
  }
  return in;
}

struct Outputs {
  std::vector<float> param, m, v;
  std::vector<uint16_t> copy;  // n + 1: the last element is a guard that must stay poisoned
};

Outputs RunFused(SimdLevel level, const Inputs& in, DType grad_format, bool with_copy,
                 DType copy_format, const AdamWHyperparams& h) {
  const size_t n = in.param.size();
  Outputs out{in.param, in.m, in.v, std::vector<uint16_t>(n + 1, kPoison)};
  AdamWShard s;
  s.param = out.param.data();
  s.m = out.m.data();
  s.v = out.v.data();
  s.grad = grad_format == DType::kFloat32 ? static_cast<const void*>(in.grad.data())
                                          : static_cast<const void*>(in.grad16.data());
  s.grad_format = grad_format;
  s.param_copy = with_copy ? out.copy.data() : nullptr;
  s.copy_format = copy_format;
  s.n = n;
  AdamWFusedStepAt(level, s, h);
  return out;
}

// adamw_step.h's formula in double, written directly from the state before the step.
void ExpectMatchesFloat64(const Inputs& in, const Outputs& out, const AdamWHyperparams& h) {
  const size_t n = in.param.size();
  const double b1 = h.beta1, b2 = h.beta2, lr = h.lr;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(h.step));
  std::vector<double> param(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(in.grad[i]) * h.grad_scale;
    m[i] = b1 * in.m[i] + (1.0 - b1) * g;
    v[i] = b2 * in.v[i] + (1.0 - b2) * g * g;
    const double p = in.param[i] * (1.0 - lr * h.weight_decay);
    param[i] = p - lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + h.eps);
  }
  // One step of fp32 arithmetic: the update lr * m/sqrt(v) (|.| <~ lr) to a few ulp, and the
  // parameter's own rounding (<= 6e-8 for |param| <= 1). b1 m and (1-b1) g may nearly cancel,
  // so m's error is a few ulp of the terms (<= 0.06, ulp 7.5e-9), not of the result.
  ExpectAllClose(out.param, param, 1e-7 + 8 * 6e-8 * lr, 4e-7, "param");
  ExpectAllClose(out.m, m, 2e-8, 4e-7, "m");
  ExpectAllClose(out.v, v, 1e-14, 4e-7, "v");
}

void ExpectCopyIsRounding(const Outputs& out, DType format) {
  const size_t n = out.param.size();
  std::vector<uint16_t> want(n);
  if (format == DType::kBFloat16) {
    CastFp32ToBf16At(SimdLevel::kScalar, want.data(), out.param.data(), n);
  } else {
    CastFp32ToFp16At(SimdLevel::kScalar, want.data(), out.param.data(), n);
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(out.copy[i], want[i]) << "copy[" << i << "] of " << n;
  }
  EXPECT_EQ(out.copy[n], kPoison) << "wrote past the end";
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  DType grad_format;
  DType copy_format;
  float weight_decay;
  int64_t step;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* grad = c.grad_format == DType::kFloat32    ? "Fp32Grad"
                     : c.grad_format == DType::kBFloat16 ? "Bf16Grad"
                                                         : "Fp16Grad";
  return std::string(grad) + (c.copy_format == DType::kBFloat16 ? "Bf16Copy" : "Fp16Copy") +
         (c.weight_decay > 0 ? "Decay" : "NoDecay") + "Step" + std::to_string(c.step);
}

class AdamWFusedTest : public ::testing::TestWithParam<Case> {};

TEST_P(AdamWFusedTest, EveryLevelMatchesFloat64AndWritesTheRoundedCopy) {
  const Case& c = GetParam();
  AdamWHyperparams h;
  h.lr = 1e-2f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = c.weight_decay;
  h.grad_scale = 0.5f;
  h.step = c.step;
  for (SimdLevel level : testing::kAllLevels) {
    if (!AdamWFusedLevelAvailable(level)) continue;
    SCOPED_TRACE(SimdLevelName(level));
    for (size_t n : kSizes) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const Inputs in = MakeInputs(n, c.step, c.grad_format, static_cast<uint32_t>(n));
      const Outputs out = RunFused(level, in, c.grad_format, true, c.copy_format, h);
      ExpectMatchesFloat64(in, out, h);
      ExpectCopyIsRounding(out, c.copy_format);
    }
  }
}

// adamw_kernels.inc: no contraction and no reassociation, so the levels agree bit for bit.
TEST_P(AdamWFusedTest, EveryLevelGivesTheScalarBits) {
  const Case& c = GetParam();
  AdamWHyperparams h;
  h.lr = 3e-3f;
  h.weight_decay = c.weight_decay;
  h.step = c.step;
  const size_t n = 3 * 16384 + 100;
  const Inputs in = MakeInputs(n, c.step, c.grad_format, 7);
  const Outputs want = RunFused(SimdLevel::kScalar, in, c.grad_format, true, c.copy_format, h);
  int checked = 0;
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (!AdamWFusedLevelAvailable(level)) continue;
    const Outputs got = RunFused(level, in, c.grad_format, true, c.copy_format, h);
    EXPECT_TRUE(SameBits(got.param, want.param)) << SimdLevelName(level);
    EXPECT_TRUE(SameBits(got.m, want.m)) << SimdLevelName(level);
    EXPECT_TRUE(SameBits(got.v, want.v)) << SimdLevelName(level);
    EXPECT_EQ(got.copy, want.copy) << SimdLevelName(level);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "CPU has no SIMD level above scalar for AdamW";
}

const Case kCases[] = {
    {DType::kFloat32, DType::kBFloat16, 0.1f, 1},
    {DType::kFloat32, DType::kBFloat16, 0.0f, 1000},
    {DType::kFloat32, DType::kFloat16, 0.0f, 1},
    {DType::kFloat32, DType::kFloat16, 0.1f, 1000},
    {DType::kBFloat16, DType::kBFloat16, 0.1f, 1000},
    {DType::kFloat16, DType::kFloat16, 0.1f, 1},
};
INSTANTIATE_TEST_SUITE_P(Formats, AdamWFusedTest, ::testing::ValuesIn(kCases), CaseName);

TEST(AdamWFused, WithoutCopyLeavesNothingElseWritten) {
  const size_t n = 16384 + 5;
  const Inputs in = MakeInputs(n, 1000, DType::kFloat32, 3);
  AdamWHyperparams h;
  h.step = 1000;
  h.weight_decay = 0.1f;
  const Outputs out = RunFused(SimdLevel::kScalar, in, DType::kFloat32, false, DType::kBFloat16, h);
  ExpectMatchesFloat64(in, out, h);
  for (uint16_t x : out.copy) ASSERT_EQ(x, kPoison);
}

TEST(AdamWFused, AgreesWithOpsAdamWUpToContraction) {
  const size_t n = 4099;
  const Inputs in = MakeInputs(n, 1000, DType::kFloat32, 5);
  AdamWHyperparams h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.25f;
  h.step = 1000;
  const Outputs fused =
      RunFused(SimdLevel::kScalar, in, DType::kFloat32, false, DType::kBFloat16, h);
  std::vector<float> param = in.param, m = in.m, v = in.v;
  AdamW(param.data(), in.grad.data(), m.data(), v.data(), n, h.lr, h.beta1, h.beta2, h.eps,
        h.weight_decay, h.step, h.grad_scale);
  ExpectAllClose(fused.param, testing::ToDouble(param), 1e-7, 4e-7, "param");
  ExpectAllClose(fused.m, testing::ToDouble(m), 2e-8, 4e-7, "m");  // see ExpectMatchesFloat64
  ExpectAllClose(fused.v, testing::ToDouble(v), 1e-14, 4e-7, "v");
}

TEST(AdamWFused, EmptyShardIsANoOp) {
  AdamWShard s;  // null arrays, n = 0
  AdamWFusedStep(s, AdamWHyperparams{});
}

}  // namespace
}  // namespace hoist::kernels::cpu
