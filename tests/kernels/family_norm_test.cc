// The norms Qwen3 and Gemma 2 add to the Llama family's (kernels/backend.h): Gemma's RMSNorm and
// the per-head q/k RMSNorm. Each against a float64 reference written here from HF's formulas: in
// fp32 within fp32 arithmetic's error, with one backward per op against central finite differences
// of the reference; in bf16 and fp16 through the CPU backend, within the roundings the contract
// names (u the type's unit roundoff, 2^-8 bf16, 2^-11 fp16; one rounding is u |ref|, and the fp32
// arithmetic before it adds about 1e-6 relative). And Llama's style keeps its bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

using FamilyNorm = family_testing::FamilyOpsTest;

// ---- RMSNorm, Gemma's style and per head ----

// One row of C at x: out = x * r * w (kLlama) or x * r * (1 + w) (kGemma); returns r.
double NormRowRef(const double* x, const double* w, int C, double eps, RmsNormStyle style,
                  double* out) {
  double ss = 0.0;
  for (int c = 0; c < C; ++c) ss += x[c] * x[c];
  const double r = 1.0 / std::sqrt(ss / C + eps);
  for (int c = 0; c < C; ++c)
    out[c] = x[c] * r * (style == RmsNormStyle::kGemma ? 1.0 + w[c] : w[c]);
  return r;
}

std::vector<double> RmsNormRef(const std::vector<double>& x, const std::vector<double>& w, int N,
                               int C, double eps, RmsNormStyle style) {
  std::vector<double> out(x.size());
  for (int i = 0; i < N; ++i)
    NormRowRef(&x[size_t{1} * i * C], w.data(), C, eps, style, &out[size_t{1} * i * C]);
  return out;
}

// Qwen3's q_norm and k_norm over rows of NH query, NKV key and NKV value heads; rstd (N, NH+NKV).
std::vector<double> HeadNormRef(const std::vector<double>& qkv, const std::vector<double>& qw,
                                const std::vector<double>& kw, int N, int NH, int NKV, int hd,
                                double eps, RmsNormStyle style,
                                std::vector<double>* rstd = nullptr) {
  const int width = (NH + 2 * NKV) * hd;
  std::vector<double> out = qkv;  // the value heads as they are
  if (rstd != nullptr) rstd->assign(size_t{1} * N * (NH + NKV), 0.0);
  for (int i = 0; i < N; ++i) {
    for (int h = 0; h < NH + NKV; ++h) {
      const size_t at = size_t{1} * i * width + size_t{1} * h * hd;
      const double r =
          NormRowRef(&qkv[at], h < NH ? qw.data() : kw.data(), hd, eps, style, &out[at]);
      if (rstd != nullptr) (*rstd)[size_t{1} * i * (NH + NKV) + h] = r;
    }
  }
  return out;
}

TEST_F(FamilyNorm, GemmaRmsNormMatchesFloat64AndFiniteDifferences) {
  constexpr int N = 4, C = 70;  // two column blocks of dweight
  constexpr float eps = 1e-6f;
  const std::vector<float> x = RandomFloats(N * C, 1, -2.0f, 2.0f),
                           w = RandomFloats(C, 2, -0.5f, 0.5f), dout = RandomFloats(N * C, 3),
                           dx0 = RandomFloats(N * C, 4), dw0 = RandomFloats(C, 5);
  std::vector<float> out(x.size()), rstd(N), dx = dx0, dw = dw0;
  EXPECT_OK(backend_.RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps,
                                    RmsNormStyle::kGemma, kF32, s()));
  EXPECT_OK(backend_.RmsNormBackward(dx.data(), dw.data(), dout.data(), x.data(), w.data(),
                                     rstd.data(), N, C, RmsNormStyle::kGemma, kF32, s()));
  Sync();
  const std::vector<double> x64 = ToDouble(x), w64 = ToDouble(w);
  ExpectAllClose(out, RmsNormRef(x64, w64, N, C, eps, RmsNormStyle::kGemma), 1e-6, 1e-6, "out");
  std::vector<double> want_dx = FiniteDifferenceGrad(x64, [&](const std::vector<double>& v) {
    return WeightedSum(RmsNormRef(v, w64, N, C, eps, RmsNormStyle::kGemma), dout);
  });
  std::vector<double> want_dw = FiniteDifferenceGrad(w64, [&](const std::vector<double>& v) {
    return WeightedSum(RmsNormRef(x64, v, N, C, eps, RmsNormStyle::kGemma), dout);
  });
  for (size_t i = 0; i < want_dx.size(); ++i) want_dx[i] += dx0[i];
  for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += dw0[i];
  ExpectAllClose(dx, want_dx, 1e-5, 1e-4, "dinp");
  ExpectAllClose(dw, want_dw, 1e-5, 1e-4, "dweight");
}

// HF's GemmaRMSNorm rounds once, at the end: the 16-bit output is one rounding from float64 (where
// Llama's style rounds the normalised row too).
TEST_F(FamilyNorm, GemmaRmsNormSixteenBitRoundsOnce) {
  constexpr int N = 6, C = 96;
  constexpr float eps = 1e-6f;
  for (const DType h : kHalfTypes) {
    SCOPED_TRACE(DTypeName(h));
    const double u = UnitRoundoff(h);
    const std::vector<float> x = RandomIn(h, N * C, 6, -3.0f, 3.0f),
                             w = RandomIn(h, C, 7, -0.9f, 0.9f), dout = RandomIn(h, N * C, 8);
    std::vector<uint16_t> out(x.size()), dx(x.size(), 0);
    std::vector<float> rstd(N), dw(C, 0.0f);
    const std::vector<uint16_t> xb = Narrow(x, h), wb = Narrow(w, h), db = Narrow(dout, h);
    EXPECT_OK(backend_.RmsNormForward(out.data(), rstd.data(), xb.data(), wb.data(), N, C, eps,
                                      RmsNormStyle::kGemma, h, s()));
    EXPECT_OK(backend_.RmsNormBackward(dx.data(), dw.data(), db.data(), xb.data(), wb.data(),
                                       rstd.data(), N, C, RmsNormStyle::kGemma, h, s()));
    Sync();
    const std::vector<double> x64 = ToDouble(x), w64 = ToDouble(w);
    ExpectWithin(Widen(out, h), RmsNormRef(x64, w64, N, C, eps, RmsNormStyle::kGemma), u + 1e-6,
                 0.0, "out");
    // The gradients of the formula: dinp rounded once (a difference: fp32's error scales with the
    // largest term), dweight an fp32 sum.
    std::vector<double> want_dx(x.size()), want_dw(C, 0.0);
    for (int i = 0; i < N; ++i) {
      double ss = 0.0, dot = 0.0;
      for (int c = 0; c < C; ++c) ss += x64[i * C + c] * x64[i * C + c];
      const double r = 1.0 / std::sqrt(ss / C + eps);
      for (int c = 0; c < C; ++c) dot += (1.0 + w64[c]) * dout[i * C + c] * x64[i * C + c] * r;
      for (int c = 0; c < C; ++c) {
        const double n = x64[i * C + c] * r;
        want_dx[i * C + c] = r * ((1.0 + w64[c]) * dout[i * C + c] - n * dot / C);
        want_dw[c] += dout[i * C + c] * n;
      }
    }
    ExpectWithin(Widen(dx, h), want_dx, u + 1e-6, 1e-5, "dinp");
    ExpectWithin(dw, want_dw, 1e-5, 1e-6, "dweight");
  }
}

// The Llama style is what it was: the style parameter's kLlama gives the default's bits.
TEST_F(FamilyNorm, LlamaStyleIsTheDefaultRmsNorm) {
  constexpr int N = 5, C = 40;
  const std::vector<float> x = RandomFloats(N * C, 9), w = RandomFloats(C, 10),
                           dout = RandomFloats(N * C, 11);
  std::vector<float> a(x.size()), b(x.size()), ra(N), rb(N), da(x.size(), 0.5f),
      db = da, dwa(C, 0.0f), dwb = dwa;
  cpu::RmsNormForward(a.data(), ra.data(), x.data(), w.data(), N, C, 1e-5f, DType::kBFloat16);
  cpu::RmsNormForward(b.data(), rb.data(), x.data(), w.data(), N, C, 1e-5f, DType::kBFloat16,
                      RmsNormStyle::kLlama);
  cpu::RmsNormBackward(da.data(), dwa.data(), dout.data(), x.data(), w.data(), ra.data(), N, C);
  cpu::RmsNormBackward(db.data(), dwb.data(), dout.data(), x.data(), w.data(), rb.data(), N, C,
                       RmsNormStyle::kLlama);
  EXPECT_TRUE(SameBits(a, b));
  EXPECT_TRUE(SameBits(ra, rb));
  EXPECT_TRUE(SameBits(da, db));
  EXPECT_TRUE(SameBits(dwa, dwb));
}

constexpr int kN = 3, kNH = 4, kNKV = 2, kHd = 8, kWidth = (kNH + 2 * kNKV) * kHd;

TEST_F(FamilyNorm, HeadRmsNormMatchesFloat64AndFiniteDifferences) {
  constexpr float eps = 1e-6f;
  const std::vector<float> qkv = RandomFloats(kN * kWidth, 12, -2.0f, 2.0f),
                           qw = RandomFloats(kHd, 13, 0.5f, 1.5f),
                           kw = RandomFloats(kHd, 14, 0.5f, 1.5f),
                           dout = RandomFloats(kN * kWidth, 15),
                           dx0 = RandomFloats(kN * kWidth, 16), dqw0 = RandomFloats(kHd, 17),
                           dkw0 = RandomFloats(kHd, 18);
  std::vector<float> out(qkv.size()), rstd(kN * (kNH + kNKV)), dx = dx0, dqw = dqw0, dkw = dkw0;
  EXPECT_OK(backend_.HeadRmsNormForward(out.data(), rstd.data(), qkv.data(), qw.data(), kw.data(),
                                        kN, kNH, kNKV, kHd, eps, RmsNormStyle::kLlama, kF32, s()));
  EXPECT_OK(backend_.HeadRmsNormBackward(dx.data(), dqw.data(), dkw.data(), dout.data(), qkv.data(),
                                         qw.data(), kw.data(), rstd.data(), kN, kNH, kNKV, kHd,
                                         RmsNormStyle::kLlama, kF32, s()));
  Sync();
  const std::vector<double> x64 = ToDouble(qkv), q64 = ToDouble(qw), k64 = ToDouble(kw);
  std::vector<double> rstd_ref;
  ExpectAllClose(
      out, HeadNormRef(x64, q64, k64, kN, kNH, kNKV, kHd, eps, RmsNormStyle::kLlama, &rstd_ref),
      1e-6, 1e-6, "out");
  ExpectAllClose(rstd, rstd_ref, 0.0, 1e-6, "rstd");
  for (int i = 0; i < kN; ++i) {  // the value heads are copied, bit for bit
    for (int c = (kNH + kNKV) * kHd; c < kWidth; ++c)
      EXPECT_EQ(out[i * kWidth + c], qkv[i * kWidth + c]);
  }
  const auto loss = [&](const std::vector<double>& x, const std::vector<double>& q,
                        const std::vector<double>& k) {
    return WeightedSum(HeadNormRef(x, q, k, kN, kNH, kNKV, kHd, eps, RmsNormStyle::kLlama), dout);
  };
  std::vector<double> want_dx =
      FiniteDifferenceGrad(x64, [&](const std::vector<double>& v) { return loss(v, q64, k64); });
  std::vector<double> want_dq =
      FiniteDifferenceGrad(q64, [&](const std::vector<double>& v) { return loss(x64, v, k64); });
  std::vector<double> want_dk =
      FiniteDifferenceGrad(k64, [&](const std::vector<double>& v) { return loss(x64, q64, v); });
  for (size_t i = 0; i < want_dx.size(); ++i) want_dx[i] += dx0[i];
  for (int i = 0; i < kHd; ++i) {
    want_dq[i] += dqw0[i];
    want_dk[i] += dkw0[i];
  }
  ExpectAllClose(dx, want_dx, 1e-5, 1e-4, "dinp (value heads: dout added)");
  ExpectAllClose(dqw, want_dq, 1e-5, 1e-4, "dq_weight");
  ExpectAllClose(dkw, want_dk, 1e-5, 1e-4, "dk_weight");
}

// The per-head norm is RmsNorm's arithmetic on each head as a row: gathering the query heads into
// (N*NH, hd) rows and the key heads into (N*NKV, hd) rows, RmsNormForward/Backward give the same
// bits, the weight gradients summed over the same rows in the same order. In either style.
TEST_F(FamilyNorm, HeadRmsNormIsRmsNormOnEachHeadBitForBit) {
  constexpr float eps = 1e-6f;
  const std::vector<float> qkv = RandomFloats(kN * kWidth, 19, -2.0f, 2.0f),
                           qw = RandomFloats(kHd, 20), kw = RandomFloats(kHd, 21),
                           dout = RandomFloats(kN * kWidth, 22),
                           dx0 = RandomFloats(kN * kWidth, 23);
  for (const RmsNormStyle style : {RmsNormStyle::kLlama, RmsNormStyle::kGemma}) {
    SCOPED_TRACE(style == RmsNormStyle::kLlama ? "llama" : "gemma");
    std::vector<float> out(qkv.size()), rstd(kN * (kNH + kNKV)), dx = dx0, dqw(kHd, 0.25f),
                                                                 dkw(kHd, 0.25f);
    cpu::HeadRmsNormForward(out.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), kN, kNH,
                            kNKV, kHd, eps, DType::kBFloat16, style);
    cpu::HeadRmsNormBackward(dx.data(), dqw.data(), dkw.data(), dout.data(), qkv.data(), qw.data(),
                             kw.data(), rstd.data(), kN, kNH, kNKV, kHd, style);
    for (const bool query : {true, false}) {
      const int heads = query ? kNH : kNKV, first = query ? 0 : kNH, rows = kN * heads;
      const auto gather = [&](const std::vector<float>& a) {
        std::vector<float> g(size_t{1} * rows * kHd);
        for (int i = 0; i < kN; ++i) {
          for (int h = 0; h < heads; ++h) {
            std::copy_n(&a[i * kWidth + (first + h) * kHd], kHd, &g[(i * heads + h) * kHd]);
          }
        }
        return g;
      };
      const std::vector<float>& w = query ? qw : kw;
      std::vector<float> want(size_t{1} * rows * kHd), want_rstd(rows), want_dx = gather(dx0),
                                                                        want_dw(kHd, 0.25f);
      cpu::RmsNormForward(want.data(), want_rstd.data(), gather(qkv).data(), w.data(), rows, kHd,
                          eps, DType::kBFloat16, style);
      cpu::RmsNormBackward(want_dx.data(), want_dw.data(), gather(dout).data(), gather(qkv).data(),
                           w.data(), want_rstd.data(), rows, kHd, style);
      std::vector<float> got_rstd;
      for (int i = 0; i < kN; ++i) {
        for (int h = 0; h < heads; ++h) got_rstd.push_back(rstd[i * (kNH + kNKV) + first + h]);
      }
      EXPECT_TRUE(SameBits(gather(out), want)) << (query ? "q" : "k");
      EXPECT_TRUE(SameBits(got_rstd, want_rstd)) << (query ? "q" : "k");
      EXPECT_TRUE(SameBits(gather(dx), want_dx)) << (query ? "q" : "k");
      EXPECT_TRUE(SameBits(query ? dqw : dkw, want_dw)) << (query ? "q" : "k");
    }
  }
}

TEST_F(FamilyNorm, HeadRmsNormSixteenBitWithinItsRoundings) {
  constexpr int N = 600;  // rows of 128 values: two of RowBlocks' 16-bit blocks
  constexpr int NH = 4, NKV = 2, hd = 16, width = (NH + 2 * NKV) * hd;
  constexpr float eps = 1e-6f;
  for (const DType h : kHalfTypes) {
    SCOPED_TRACE(DTypeName(h));
    const double u = UnitRoundoff(h);
    const std::vector<float> x = RandomIn(h, N * width, 24, -3.0f, 3.0f),
                             qw = RandomIn(h, hd, 25, 0.5f, 1.5f),
                             kw = RandomIn(h, hd, 26, 0.5f, 1.5f),
                             dout = RandomIn(h, N * width, 27);
    const std::vector<uint16_t> xb = Narrow(x, h), qb = Narrow(qw, h), kb = Narrow(kw, h),
                                db = Narrow(dout, h);
    std::vector<uint16_t> out(xb.size()), dx(xb.size(), 0);
    std::vector<float> rstd(N * (NH + NKV)), dq(hd, 0.0f), dk(hd, 0.0f);
    std::vector<uint16_t> frozen(xb.size(), 0);
    EXPECT_OK(backend_.HeadRmsNormForward(out.data(), rstd.data(), xb.data(), qb.data(), kb.data(),
                                          N, NH, NKV, hd, eps, RmsNormStyle::kLlama, h, s()));
    EXPECT_OK(backend_.HeadRmsNormBackward(dx.data(), dq.data(), dk.data(), db.data(), xb.data(),
                                           qb.data(), kb.data(), rstd.data(), N, NH, NKV, hd,
                                           RmsNormStyle::kLlama, h, s()));
    EXPECT_OK(backend_.HeadRmsNormBackward(frozen.data(), nullptr, nullptr, db.data(), xb.data(),
                                           qb.data(), kb.data(), rstd.data(), N, NH, NKV, hd,
                                           RmsNormStyle::kLlama, h, s()));
    Sync();
    const std::vector<double> x64 = ToDouble(x), q64 = ToDouble(qw), k64 = ToDouble(kw);
    // Llama's rounding: the normalised value, then the output (2u).
    ExpectWithin(Widen(out, h),
                 HeadNormRef(x64, q64, k64, N, NH, NKV, hd, eps, RmsNormStyle::kLlama),
                 2 * u * (1 + u) + 1e-6, 0.0, "out");
    for (int i = 0; i < N; ++i) {
      for (int c = (NH + NKV) * hd; c < width; ++c)
        EXPECT_EQ(out[i * width + c], xb[i * width + c]);
    }
    std::vector<double> want_dx(x.size()), want_dq(hd, 0.0), want_dk(hd, 0.0);
    for (int i = 0; i < N; ++i) {
      for (int head = 0; head < NH + 2 * NKV; ++head) {
        const size_t at = size_t{1} * i * width + head * hd;
        if (head >= NH + NKV) {
          for (int c = 0; c < hd; ++c) want_dx[at + c] = dout[at + c];
          continue;
        }
        const std::vector<double>& w = head < NH ? q64 : k64;
        std::vector<double>& dw = head < NH ? want_dq : want_dk;
        double ss = 0.0, dot = 0.0;
        for (int c = 0; c < hd; ++c) ss += x64[at + c] * x64[at + c];
        const double r = 1.0 / std::sqrt(ss / hd + eps);
        for (int c = 0; c < hd; ++c) dot += w[c] * dout[at + c] * x64[at + c] * r;
        for (int c = 0; c < hd; ++c) {
          const double n = x64[at + c] * r;
          want_dx[at + c] = r * (w[c] * dout[at + c] - n * dot / hd);
          dw[c] += dout[at + c] * n;
        }
      }
    }
    ExpectWithin(Widen(dx, h), want_dx, u + 1e-6, 1e-5, "dinp");
    ExpectWithin(dq, want_dq, 1e-5, 1e-6, "dq_weight");
    ExpectWithin(dk, want_dk, 1e-5, 1e-6, "dk_weight");
    EXPECT_TRUE(SameBits(frozen, dx)) << "frozen weights: the same dinp";
  }
}

TEST_F(FamilyNorm, HeadRmsNormRefusesBadArguments) {
  std::vector<float> a(4096), b(4096), w(64);
  const auto expect = [](const Status& status, const std::string& what) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("HeadRmsNorm"), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(what), std::string::npos) << status.ToString();
  };
  expect(backend_.HeadRmsNormForward(a.data(), b.data(), a.data(), w.data(), w.data(), 2, 4, 2, 8,
                                     1e-6f, RmsNormStyle::kLlama, kF32, s()),
         "out overlaps inp");
  expect(backend_.HeadRmsNormForward(a.data() + 8, b.data(), a.data(), w.data(), w.data(), 2, 4, 2,
                                     8, 1e-6f, RmsNormStyle::kLlama, kF32, s()),
         "out overlaps inp");
  expect(backend_.HeadRmsNormForward(a.data(), b.data(), b.data() + 64, w.data(), nullptr, 2, 4, 2,
                                     8, 1e-6f, RmsNormStyle::kLlama, kF32, s()),
         "k_weight is null");
  expect(backend_.HeadRmsNormForward(a.data(), b.data(), b.data() + 64, w.data(), w.data(), 2, 0, 2,
                                     8, 1e-6f, RmsNormStyle::kLlama, kF32, s()),
         "NH must be positive");
  expect(backend_.HeadRmsNormForward(a.data(), b.data(), b.data() + 64, w.data(), w.data(), 2, 4, 2,
                                     8, -1.0f, RmsNormStyle::kLlama, kF32, s()),
         "eps must be >= 0");
  expect(
      backend_.HeadRmsNormBackward(a.data(), nullptr, nullptr, b.data(), b.data(), w.data(),
                                   w.data(), nullptr, 2, 4, 2, 8, RmsNormStyle::kLlama, kF32, s()),
      "rstd is null");
}

}  // namespace
}  // namespace hoist::kernels
