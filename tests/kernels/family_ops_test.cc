// The elementwise ops Gemma 2 adds to the Llama family's (kernels/backend.h): GeGLU, logit
// soft-capping (alone and inside the cross-entropy) and the scale of the embedding. Each against a
// float64 reference written here from HF's formulas: in fp32 within fp32 arithmetic's error, with
// one backward per op against central finite differences of the reference; in bf16 and fp16
// through the CPU backend, within one rounding (u |ref|, u the type's unit roundoff) plus fp32's
// error. And what must not change: SwiGLU and the uncapped loss keep their bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "tests/kernels/family_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels {
namespace {

using cpu::testing::ExpectAllClose;
using cpu::testing::FiniteDifferenceGrad;
using cpu::testing::RandomFloats;
using cpu::testing::ToDouble;
using cpu::testing::WeightedSum;

using family_testing::ExpectWithin;
using family_testing::kF32;
using family_testing::kHalfTypes;
using family_testing::Narrow;
using family_testing::RandomIn;
using family_testing::SameBits;
using family_testing::UnitRoundoff;
using family_testing::Widen;

using FamilyOps = family_testing::FamilyOpsTest;

// ---- GeGLU ----

double GeluTanh(double g) {
  return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

// out (N, I) = gelu_tanh(gate) * up over rows [gate | up].
std::vector<double> GeGluRef(const std::vector<double>& inp, int N, int I) {
  std::vector<double> out(size_t{1} * N * I);
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < I; ++j) {
      out[size_t{1} * i * I + j] =
          GeluTanh(inp[size_t{1} * i * 2 * I + j]) * inp[size_t{1} * i * 2 * I + I + j];
    }
  }
  return out;
}

TEST_F(FamilyOps, GeGluMatchesFloat64AndFiniteDifferences) {
  constexpr int N = 4, I = 13;
  const std::vector<float> inp = RandomFloats(size_t{N} * 2 * I, 1, -5.0f, 5.0f),
                           dout = RandomFloats(size_t{N} * I, 2), d0 = RandomFloats(inp.size(), 3);
  std::vector<float> out(size_t{N} * I), dinp = d0;
  EXPECT_OK(backend_.GluForward(out.data(), inp.data(), N, I, GluActivation::kGeluTanh, kF32, s()));
  EXPECT_OK(backend_.GluBackward(dinp.data(), inp.data(), dout.data(), N, I,
                                 GluActivation::kGeluTanh, kF32, s()));
  Sync();
  ExpectAllClose(out, GeGluRef(ToDouble(inp), N, I), 1e-6, 1e-6, "out");
  std::vector<double> want = FiniteDifferenceGrad(ToDouble(inp), [&](const std::vector<double>& v) {
    return WeightedSum(GeGluRef(v, N, I), dout);
  });
  for (size_t i = 0; i < want.size(); ++i) want[i] += d0[i];
  ExpectAllClose(dinp, want, 1e-5, 1e-4, "dinp");
}

TEST_F(FamilyOps, GeGluSixteenBitRoundsOnce) {
  constexpr int N = 300, I = 250;  // more than one of RowBlocks' 16-bit blocks
  for (const DType h : kHalfTypes) {
    SCOPED_TRACE(DTypeName(h));
    const double u = UnitRoundoff(h);
    const std::vector<float> inp = RandomIn(h, size_t{N} * 2 * I, 4, -4.0f, 4.0f),
                             dout = RandomIn(h, size_t{N} * I, 5);
    const std::vector<uint16_t> ib = Narrow(inp, h), db = Narrow(dout, h);
    std::vector<uint16_t> out(dout.size()), dinp(inp.size(), 0);
    EXPECT_OK(backend_.GluForward(out.data(), ib.data(), N, I, GluActivation::kGeluTanh, h, s()));
    EXPECT_OK(backend_.GluBackward(dinp.data(), ib.data(), db.data(), N, I,
                                   GluActivation::kGeluTanh, h, s()));
    Sync();
    // fp32's error where terms of the formulas cancel (1 + tanh near -1; act'(gate)'s two terms
    // near gate = -0.75): a few ulps of the terms, 1e-6 of their magnitudes.
    std::vector<double> want_dinp(inp.size()), slack_out(dout.size()), slack_dinp(inp.size());
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < I; ++j) {
        const size_t at = size_t{1} * i * 2 * I + j, e = size_t{1} * i * I + j;
        const double g = inp[at], up = inp[at + I], d = dout[e];
        const double k = std::sqrt(2.0 / M_PI), th = std::tanh(k * (g + 0.044715 * g * g * g));
        const double du = k * (1.0 + 3.0 * 0.044715 * g * g);
        want_dinp[at] = d * up * (0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * du);
        want_dinp[at + I] = d * GeluTanh(g);
        slack_out[e] = 1e-6 * std::fabs(0.5 * g * up);
        slack_dinp[at] = 1e-6 * std::fabs(d * up) * (1.0 + std::fabs(g * du));
        slack_dinp[at + I] = 1e-6 * std::fabs(0.5 * g * d);
      }
    }
    ExpectWithin(Widen(out, h), GeGluRef(ToDouble(inp), N, I), u + 1e-6, slack_out, "out");
    ExpectWithin(Widen(dinp, h), want_dinp, u + 1e-6, slack_dinp, "dinp");
  }
}

// SwiGLU's arithmetic written out here operation for operation, as the kSilu kernel must keep it:
// the same bits, forward and backward.
TEST_F(FamilyOps, SiluIsSwiGluOperationForOperation) {
  constexpr int N = 7, I = 33;
  const std::vector<float> inp = RandomFloats(size_t{N} * 2 * I, 6, -8.0f, 8.0f),
                           dout = RandomFloats(size_t{N} * I, 7), d0 = RandomFloats(inp.size(), 8);
  std::vector<float> out(size_t{N} * I), dinp = d0, want(out.size()), want_dinp = d0;
  cpu::GluForward(out.data(), inp.data(), N, I, GluActivation::kSilu);
  cpu::GluBackward(dinp.data(), inp.data(), dout.data(), N, I, GluActivation::kSilu);
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < I; ++j) {
      const size_t row = size_t{1} * i * 2 * I, e = size_t{1} * i * I + j;
      const float g = inp[row + j], up = inp[row + I + j];
      want[e] = g / (1.0f + std::exp(-g)) * up;
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float silu = g * sig;
      want_dinp[row + j] += dout[e] * up * sig * (1.0f + g * (1.0f - sig));
      want_dinp[row + I + j] += dout[e] * silu;
    }
  }
  EXPECT_TRUE(SameBits(out, want));
  EXPECT_TRUE(SameBits(dinp, want_dinp));
}

// ---- Logit soft-capping and the capped loss ----

std::vector<int32_t> RandomTargets(int N, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> out(N);
  for (int32_t& t : out) t = dist(rng);
  return out;
}

// The losses of logits (N, Vp) capped at `cap` (HF's Gemma 2: tanh(x / cap) * cap), and into
// dlogits (when not null) the gradient of dloss * sum(losses) with respect to the raw logits.
std::vector<double> CappedLossRef(const std::vector<double>& logits, const std::vector<int32_t>& t,
                                  double dloss, int N, int V, int Vp, double cap,
                                  std::vector<double>* dlogits = nullptr) {
  std::vector<double> losses(N);
  if (dlogits != nullptr) dlogits->assign(logits.size(), 0.0);
  for (int i = 0; i < N; ++i) {
    const double* x = &logits[size_t{1} * i * Vp];
    std::vector<double> z(V);
    double m = -std::numeric_limits<double>::infinity();
    for (int c = 0; c < V; ++c) {
      z[c] = std::tanh(x[c] / cap) * cap;
      m = std::max(m, z[c]);
    }
    double sum = 0.0;
    for (int c = 0; c < V; ++c) sum += std::exp(z[c] - m);
    losses[i] = std::log(sum) + m - z[t[i]];
    if (dlogits == nullptr) continue;
    for (int c = 0; c < V; ++c) {
      const double th = std::tanh(x[c] / cap);
      const double p = std::exp(z[c] - m) / sum - (c == t[i] ? 1.0 : 0.0);
      (*dlogits)[size_t{1} * i * Vp + c] = dloss * p * (1.0 - th * th);
    }
  }
  return losses;
}

constexpr int kN = 5, kV = 37, kVp = 40;
constexpr float kCap = 3.0f;  // small next to the logits below, so that the cap bends them

TEST_F(FamilyOps, CappedLossMatchesFloat64AndFiniteDifferences) {
  const std::vector<float> logits = RandomFloats(size_t{kN} * kVp, 9, -8.0f, 8.0f);
  const std::vector<int32_t> targets = RandomTargets(kN, kV, 10);
  constexpr float dloss = 0.5f;
  std::vector<float> losses(kN), dlogits(logits.size(), 7.0f);
  EXPECT_OK(backend_.SoftmaxCrossEntropy(losses.data(), dlogits.data(), logits.data(),
                                         targets.data(), dloss, kN, kV, kVp, kCap, kF32, s()));
  Sync();
  std::vector<double> want_d;
  const std::vector<double> want =
      CappedLossRef(ToDouble(logits), targets, dloss, kN, kV, kVp, kCap, &want_d);
  ExpectAllClose(losses, want, 1e-6, 1e-5, "losses");
  ExpectAllClose(dlogits, want_d, 1e-7, 1e-5, "dlogits (0 in the padding)");
  // The gradient of the raw logits, against finite differences of the capped loss.
  std::vector<double> fd =
      FiniteDifferenceGrad(ToDouble(logits), [&](const std::vector<double>& v) {
        double total = 0.0;
        for (double l : CappedLossRef(v, targets, dloss, kN, kV, kVp, kCap)) total += l;
        return dloss * total;
      });
  ExpectAllClose(dlogits, fd, 1e-6, 1e-4, "dlogits against finite differences");
}

// The capped loss is the loss of the capped logits: SoftcapForward's values, bit for bit (the same
// tanh and product), through the uncapped loss.
TEST_F(FamilyOps, CappedLossIsTheLossOfSoftcapForwardsLogits) {
  const std::vector<float> logits = RandomFloats(size_t{kN} * kVp, 11, -8.0f, 8.0f);
  const std::vector<int32_t> targets = RandomTargets(kN, kV, 12);
  std::vector<float> capped_losses(kN), losses(kN), capped = logits;
  EXPECT_OK(backend_.SoftmaxCrossEntropy(capped_losses.data(), nullptr, logits.data(),
                                         targets.data(), 1.0f, kN, kV, kVp, kCap, kF32, s()));
  EXPECT_OK(
      backend_.SoftcapForward(capped.data(), static_cast<int64_t>(capped.size()), kCap, kF32, s()));
  EXPECT_OK(backend_.SoftmaxCrossEntropy(losses.data(), nullptr, capped.data(), targets.data(),
                                         1.0f, kN, kV, kVp, 0.0f, kF32, s()));
  Sync();
  EXPECT_TRUE(SameBits(capped_losses, losses));
}

// softcap 0 is the loss without a cap: the kernels' own bits, fp32 and 16-bit.
TEST_F(FamilyOps, SoftcapZeroIsTheUncappedLossBitForBit) {
  const std::vector<float> logits = RandomFloats(size_t{kN} * kVp, 13, -8.0f, 8.0f);
  const std::vector<int32_t> targets = RandomTargets(kN, kV, 14);
  std::vector<float> losses(kN), dlogits(logits.size()), want_losses(kN), want_d(logits.size());
  EXPECT_OK(backend_.SoftmaxCrossEntropy(losses.data(), dlogits.data(), logits.data(),
                                         targets.data(), 0.25f, kN, kV, kVp, 0.0f, kF32, s()));
  Sync();
  cpu::SoftmaxCrossEntropy(want_losses.data(), want_d.data(), logits.data(), targets.data(), 0.25f,
                           kN, kV, kVp);
  EXPECT_TRUE(SameBits(losses, want_losses));
  EXPECT_TRUE(SameBits(dlogits, want_d));
  for (const DType h : kHalfTypes) {
    const std::vector<uint16_t> lb = Narrow(logits, h);
    std::vector<uint16_t> d16(lb.size()), want16(lb.size());
    EXPECT_OK(backend_.SoftmaxCrossEntropy(losses.data(), d16.data(), lb.data(), targets.data(),
                                           0.25f, kN, kV, kVp, 0.0f, h, s()));
    Sync();
    cpu::SoftmaxCrossEntropy16(want_losses.data(), want16.data(), lb.data(), targets.data(), 0.25f,
                               kN, kV, kVp, h);
    EXPECT_TRUE(SameBits(losses, want_losses)) << DTypeName(h);
    EXPECT_TRUE(SameBits(d16, want16)) << DTypeName(h);
  }
}

// 16-bit logits: the loss in fp32 from the widened logits, the gradient rounded once; in place
// (dlogits over the logits) the same bits.
TEST_F(FamilyOps, CappedLossSixteenBitRoundsTheGradientOnce) {
  constexpr int N = 9, V = 300, Vp = 320;
  const std::vector<int32_t> targets = RandomTargets(N, V, 15);
  for (const DType h : kHalfTypes) {
    SCOPED_TRACE(DTypeName(h));
    const double u = UnitRoundoff(h);
    const std::vector<float> logits = RandomIn(h, size_t{N} * Vp, 16, -30.0f, 30.0f);
    const std::vector<uint16_t> lb = Narrow(logits, h);
    std::vector<uint16_t> d(lb.size()), in_place = lb;
    std::vector<float> losses(N), losses_in_place(N);
    constexpr float dloss = 1.0f / N;
    EXPECT_OK(backend_.SoftmaxCrossEntropy(losses.data(), d.data(), lb.data(), targets.data(),
                                           dloss, N, V, Vp, 15.0f, h, s()));
    EXPECT_OK(backend_.SoftmaxCrossEntropy(losses_in_place.data(), in_place.data(), in_place.data(),
                                           targets.data(), dloss, N, V, Vp, 15.0f, h, s()));
    Sync();
    std::vector<double> want_d;
    const std::vector<double> want =
        CappedLossRef(ToDouble(logits), targets, dloss, N, V, Vp, 15.0, &want_d);
    ExpectWithin(losses, want, 1e-5, 0.0, "losses");
    // The gradient's fp32 error is relative to dloss (a difference at the target).
    ExpectWithin(Widen(d, h), want_d, u + 1e-5, 1e-5, "dlogits");
    EXPECT_TRUE(SameBits(d, in_place));
    EXPECT_TRUE(SameBits(losses, losses_in_place));
  }
}

TEST_F(FamilyOps, SoftcapForwardMatchesFloat64) {
  constexpr int64_t n = 10000;  // more than one of ChunkedElementwise's chunks
  for (const DType type : {kF32, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    const std::vector<float> x = RandomIn(type, n, 17, -100.0f, 100.0f);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = std::tanh(x[i] / 30.0) * 30.0;
    std::vector<float> got = x;
    if (type == kF32) {
      EXPECT_OK(backend_.SoftcapForward(got.data(), n, 30.0f, type, s()));
      Sync();
      ExpectWithin(got, want, 1e-6, 0.0, "capped");
    } else {
      std::vector<uint16_t> bits = Narrow(x, type);
      EXPECT_OK(backend_.SoftcapForward(bits.data(), n, 30.0f, type, s()));
      Sync();
      ExpectWithin(Widen(bits, type), want, UnitRoundoff(type) + 1e-6, 0.0, "capped");
    }
  }
  std::vector<float> x = RandomFloats(64, 18), y = x;  // cap 0: nothing done
  EXPECT_OK(backend_.SoftcapForward(y.data(), 64, 0.0f, kF32, s()));
  Sync();
  EXPECT_TRUE(SameBits(x, y));
}

// ---- The scale ----

// fp32: the product of two floats is exact in double, so the op's result is that product rounded
// once (bit for bit); 16-bit: one rounding of the type from it. Backward is the same op on the
// gradient: against finite differences.
TEST_F(FamilyOps, ScaleIsTheProductRoundedOnce) {
  constexpr int64_t n = 9000;
  const float scale = 45.25f;  // sqrt(2048) rounded to bf16, as Gemma's normalizer
  for (const DType type : {kF32, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    const std::vector<float> x = RandomIn(type, n, 19, -2.0f, 2.0f);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = double{x[i]} * scale;
    if (type == kF32) {
      std::vector<float> out(n), in_place = x;
      EXPECT_OK(backend_.Scale(out.data(), x.data(), n, scale, type, s()));
      EXPECT_OK(backend_.Scale(in_place.data(), in_place.data(), n, scale, type, s()));
      Sync();
      std::vector<float> exact(n);
      for (int64_t i = 0; i < n; ++i) exact[i] = static_cast<float>(want[i]);
      EXPECT_TRUE(SameBits(out, exact));
      EXPECT_TRUE(SameBits(in_place, exact));
    } else {
      const std::vector<uint16_t> xb = Narrow(x, type);
      std::vector<uint16_t> out(n), in_place = xb;
      EXPECT_OK(backend_.Scale(out.data(), xb.data(), n, scale, type, s()));
      EXPECT_OK(backend_.Scale(in_place.data(), in_place.data(), n, scale, type, s()));
      Sync();
      ExpectWithin(Widen(out, type), want, UnitRoundoff(type) + 1e-6, 0.0, "scaled");
      EXPECT_TRUE(SameBits(out, in_place));
    }
  }
  constexpr int m = 16;
  const std::vector<float> x = RandomFloats(m, 20), dout = RandomFloats(m, 21);
  std::vector<float> dx(m);
  EXPECT_OK(backend_.Scale(dx.data(), dout.data(), m, scale, kF32, s()));
  Sync();
  const std::vector<double> fd =
      FiniteDifferenceGrad(ToDouble(x), [&](const std::vector<double>& v) {
        std::vector<double> y(v.size());
        for (size_t i = 0; i < v.size(); ++i) y[i] = v[i] * scale;
        return WeightedSum(y, dout);
      });
  ExpectAllClose(dx, fd, 1e-6, 1e-6, "dinp");
}

TEST_F(FamilyOps, CapAndScaleRefuseBadArguments) {
  std::vector<float> a(64), b(64);
  std::vector<int32_t> t(4, 0);
  const auto expect = [](const Status& status, const std::string& op, const std::string& what) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(op), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(what), std::string::npos) << status.ToString();
  };
  for (const float cap :
       {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    expect(backend_.SoftmaxCrossEntropy(a.data(), b.data(), b.data(), t.data(), 1.0f, 4, 8, 8, cap,
                                        kF32, s()),
           "SoftmaxCrossEntropy", "softcap must be 0");
    expect(backend_.SoftcapForward(a.data(), 64, cap, kF32, s()), "SoftcapForward",
           "cap must be 0");
  }
  expect(backend_.Scale(a.data(), b.data(), 64, std::numeric_limits<float>::quiet_NaN(), kF32, s()),
         "Scale", "scale must be finite");
  expect(backend_.Scale(a.data(), b.data(), -1, 2.0f, kF32, s()), "Scale", "n is negative");
  expect(backend_.Scale(nullptr, b.data(), 64, 2.0f, kF32, s()), "Scale", "out is null");
  expect(backend_.GluForward(a.data(), b.data(), 0, 4, GluActivation::kGeluTanh, kF32, s()),
         "GluForward", "N must be positive");
  EXPECT_OK(backend_.Scale(nullptr, nullptr, 0, 2.0f, kF32, s()));  // n 0: nothing to do
}

}  // namespace
}  // namespace hoist::kernels
