// The Llama family's CPU ops (kernels/cpu/ops.h) against float64 references written here from the
// formulas, and their backward ops against central finite differences of those references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/ops.h"
#include "kernels/rope.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using testing::ExpectAllClose;
using testing::FiniteDifferenceGrad;
using testing::RandomFloats;
using testing::ToDouble;
using testing::WeightedSum;

// ---- RMSNorm ----

std::vector<double> RmsNormRef(const std::vector<double>& x, const std::vector<double>& w, int N,
                               int C, double eps) {
  std::vector<double> out(x.size());
  for (int i = 0; i < N; ++i) {
    double ss = 0.0;
    for (int c = 0; c < C; ++c) ss += x[i * C + c] * x[i * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] * r * w[c];
  }
  return out;
}

TEST(RmsNorm, ForwardMatchesFloat64) {
  constexpr int N = 5, C = 37;
  constexpr float eps = 1e-5f;
  const std::vector<float> x = RandomFloats(N * C, 1, -2.0f, 2.0f), w = RandomFloats(C, 2);
  std::vector<float> out(x.size()), rstd(N);
  RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  ExpectAllClose(out, RmsNormRef(ToDouble(x), ToDouble(w), N, C, eps), 1e-6, 1e-6, "out");
  std::vector<double> rstd_ref(N);
  for (int i = 0; i < N; ++i) {
    double ss = 0.0;
    for (int c = 0; c < C; ++c) ss += double(x[i * C + c]) * x[i * C + c];
    rstd_ref[i] = 1.0 / std::sqrt(ss / C + eps);
  }
  ExpectAllClose(rstd, rstd_ref, 0.0, 1e-6, "rstd");
}

TEST(RmsNorm, EpsIsAParameter) {
  // A row of zeros except one small value: eps dominates the mean of squares, so two eps values
  // give visibly different outputs, each matching the reference with its own eps.
  constexpr int N = 1, C = 8;
  std::vector<float> x(C, 0.0f), w(C, 1.0f), out(C), rstd(N);
  x[3] = 1e-3f;
  for (const float eps : {1e-5f, 1e-6f}) {
    RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    ExpectAllClose(out, RmsNormRef(ToDouble(x), ToDouble(w), N, C, eps), 1e-7, 1e-6, "out");
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  constexpr int N = 4, C = 70;  // C > 64: two column blocks of dweight
  constexpr double eps = 1e-5;
  const std::vector<float> x = RandomFloats(N * C, 3, -2.0f, 2.0f), w = RandomFloats(C, 4),
                           dout = RandomFloats(N * C, 5);
  std::vector<float> out(x.size()), rstd(N);
  RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, static_cast<float>(eps));
  const std::vector<float> dx0 = RandomFloats(x.size(), 6), dw0 = RandomFloats(C, 7);
  std::vector<float> dx = dx0, dw = dw0;
  RmsNormBackward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);

  const std::vector<double> w64 = ToDouble(w), x64 = ToDouble(x);
  std::vector<double> want_dx = FiniteDifferenceGrad(x64, [&](const std::vector<double>& v) {
    return WeightedSum(RmsNormRef(v, w64, N, C, eps), dout);
  });
  std::vector<double> want_dw = FiniteDifferenceGrad(w64, [&](const std::vector<double>& v) {
    return WeightedSum(RmsNormRef(x64, v, N, C, eps), dout);
  });
  for (size_t i = 0; i < want_dx.size(); ++i) want_dx[i] += dx0[i];
  for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += dw0[i];
  ExpectAllClose(dx, want_dx, 1e-5, 1e-4, "dinp");
  ExpectAllClose(dw, want_dw, 1e-5, 1e-4, "dweight");
}

TEST(RmsNorm, SixteenBitRoundsTheNormalizedRowBeforeTheWeight) {
  // HF: weight * (x * rstd).to(dtype). With normalized_type bf16 the op's fp32 output is
  // w * round_bf16(x * rstd), exactly (the product of a bf16 value and w in fp32).
  constexpr int N = 3, C = 64;
  const std::vector<float> x = RandomFloats(N * C, 8, -3.0f, 3.0f),
                           w = RandomFloats(C, 9, 0.3f, 1.7f);
  std::vector<float> out(x.size()), rstd(N), plain(x.size()), plain_rstd(N);
  RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f, DType::kBFloat16);
  RmsNormForward(plain.data(), plain_rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  int differ = 0;
  for (int i = 0; i < N; ++i) {
    EXPECT_EQ(rstd[i], plain_rstd[i]);
    for (int c = 0; c < C; ++c) {
      const float n = x[i * C + c] * rstd[i];
      uint16_t bits;
      float rounded;
      FromFloat(&n, &bits, DType::kBFloat16, 1);
      ToFloat(&bits, DType::kBFloat16, &rounded, 1);
      EXPECT_EQ(out[i * C + c], w[c] * rounded) << i << "," << c;
      differ += out[i * C + c] != plain[i * C + c];
    }
  }
  EXPECT_GT(differ, N * C / 2);  // the rounding happened
}

// ---- Rotary position embeddings ----

// qkv rotated by the table in double: the q and k heads of each row, HF's rotate_half pairs.
std::vector<double> RopeRef(const std::vector<double>& qkv, const RopeTable& table, int B, int T,
                            int NH, int NKV, int hd) {
  std::vector<double> out = qkv;
  const int width = (NH + 2 * NKV) * hd, half = hd / 2;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < NH + NKV; ++h) {
        const size_t at = (size_t(b) * T + t) * width + size_t(h) * hd;
        for (int i = 0; i < hd; ++i) {
          const int j = i % half;
          const double c = table.cos[size_t(t) * half + j], s = table.sin[size_t(t) * half + j];
          // rotate_half(x) = cat(-x2, x1)
          const double rot = i < half ? -qkv[at + i + half] : qkv[at + i - half];
          out[at + i] = qkv[at + i] * c + rot * s;
        }
      }
    }
  }
  return out;
}

TEST(Rope, ForwardRotatesQueryAndKeyHeadsOnly) {
  constexpr int B = 2, T = 5, NH = 4, NKV = 2, hd = 8;
  const std::vector<float> inv_freq = RopeInvFreq(hd, 10000.0).value();
  const RopeTable table = MakeRopeTable(inv_freq, T);
  const int width = (NH + 2 * NKV) * hd;
  const std::vector<float> qkv = RandomFloats(size_t(B) * T * width, 10);
  std::vector<float> x = qkv;
  RopeForward(x.data(), table.cos.data(), table.sin.data(), B, T, NH, NKV, hd);
  ExpectAllClose(x, RopeRef(ToDouble(qkv), table, B, T, NH, NKV, hd), 1e-7, 1e-6, "rotated");
  for (int bt = 0; bt < B * T; ++bt) {
    for (int c = (NH + NKV) * hd; c < width; ++c) {
      EXPECT_EQ(x[size_t(bt) * width + c], qkv[size_t(bt) * width + c]) << "value head changed";
    }
  }
  // Position 0 is the identity; later positions are not.
  for (int c = 0; c < width; ++c) EXPECT_EQ(x[c], qkv[c]);
  EXPECT_NE(x[size_t(1) * width + 0], qkv[size_t(1) * width + 0]);
}

TEST(Rope, BackwardIsTheTransposeOfTheForward) {
  constexpr int B = 1, T = 6, NH = 2, NKV = 1, hd = 6;
  RopeScaling llama3;
  llama3.llama3 = true;
  llama3.original_max_position_embeddings = 16.0;
  const RopeTable table = MakeRopeTable(RopeInvFreq(hd, 500000.0, llama3).value(), T);
  const int width = (NH + 2 * NKV) * hd;
  const std::vector<float> qkv = RandomFloats(size_t(B) * T * width, 11),
                           dout = RandomFloats(qkv.size(), 12);
  std::vector<float> d = dout;
  RopeBackward(d.data(), table.cos.data(), table.sin.data(), B, T, NH, NKV, hd);
  const std::vector<double> want =
      FiniteDifferenceGrad(ToDouble(qkv), [&](const std::vector<double>& v) {
        return WeightedSum(RopeRef(v, table, B, T, NH, NKV, hd), dout);
      });
  ExpectAllClose(d, want, 1e-6, 1e-5, "dqkv");
  // And forward then backward is the identity to rounding.
  std::vector<float> x = qkv;
  RopeForward(x.data(), table.cos.data(), table.sin.data(), B, T, NH, NKV, hd);
  RopeBackward(x.data(), table.cos.data(), table.sin.data(), B, T, NH, NKV, hd);
  ExpectAllClose(x, qkv, 1e-6, 0.0, "round trip");
}

// HF's inv_freq written from the formula in double: 1 / theta^(2i/hd), then (llama3) the
// wavelength bands of _compute_llama3_parameters.
double InvFreqRef(int i, int hd, double theta, const RopeScaling* s, int* band) {
  const double f = 1.0 / std::pow(theta, 2.0 * i / hd);
  *band = 0;
  if (s == nullptr) return f;
  const double wavelen = 2.0 * M_PI / f;
  const double low_wavelen = s->original_max_position_embeddings / s->low_freq_factor;
  const double high_wavelen = s->original_max_position_embeddings / s->high_freq_factor;
  if (wavelen < high_wavelen) return f;  // high frequency: kept
  if (wavelen > low_wavelen) {
    *band = 2;
    return f / s->factor;  // low frequency: divided by factor
  }
  *band = 1;
  const double smooth = (s->original_max_position_embeddings / wavelen - s->low_freq_factor) /
                        (s->high_freq_factor - s->low_freq_factor);
  return (1.0 - smooth) * f / s->factor + smooth * f;
}

TEST(Rope, DefaultInvFreqMatchesTheFormula) {
  constexpr int hd = 64;
  const std::vector<float> f = RopeInvFreq(hd, 10000.0).value();
  ASSERT_EQ(f.size(), size_t{hd / 2});
  int band;
  for (int i = 0; i < hd / 2; ++i) {
    EXPECT_NEAR(f[i], InvFreqRef(i, hd, 10000.0, nullptr, &band), 2e-7 * f[i]) << i;
  }
  EXPECT_EQ(f[0], 1.0f);
  // The second pair turns at theta^(-2/hd).
  EXPECT_NEAR(f[1], std::pow(10000.0, -2.0 / 64.0), 1e-7);
}

TEST(Rope, Llama3ScalingMatchesHuggingFacesFormulaInEveryBand) {
  // Llama 3.1's values: head 128, theta 500000, factor 8, low 1, high 4, original 8192.
  constexpr int hd = 128;
  RopeScaling s;
  s.llama3 = true;
  const std::vector<float> f = RopeInvFreq(hd, 500000.0, s).value();
  const std::vector<float> plain = RopeInvFreq(hd, 500000.0).value();
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < hd / 2; ++i) {
    int band;
    const double want = InvFreqRef(i, hd, 500000.0, &s, &band);
    ++counts[band];
    EXPECT_NEAR(f[i], want, 1e-6 * want) << "pair " << i << " band " << band;
    if (band == 0) {
      EXPECT_EQ(f[i], plain[i]) << i;
    } else if (band == 2) {
      EXPECT_NEAR(f[i], plain[i] / 8.0, 1e-7 * plain[i]) << i;
    }
  }
  // Every band is exercised by these parameters.
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  // Hand-checked pairs. i = 40: 500000^(-80/128) = 2.7425e-4, wavelength 22911 > 8192/1: the
  // low-frequency band, divided by 8.
  EXPECT_NEAR(f[40], 2.7425e-4 / 8.0, 1e-8);
  // i = 24: 500000^(-48/128) = 7.2927e-3, wavelength 861.6 < 8192/4 = 2048: kept.
  EXPECT_NEAR(f[24], 7.2927e-3, 1e-7);
  // i = 30: 500000^(-60/128) = 2.1311e-3, wavelength 2948.3 in [2048, 8192]: smooth =
  // (8192/2948.3 - 1)/3 = 0.59285, f = (1 - smooth) f/8 + smooth f = 1.3719e-3.
  EXPECT_NEAR(f[30], 1.3719e-3, 1e-7);
  const double f30 = std::pow(500000.0, -0.46875);
  const double smooth30 = (8192.0 / (2.0 * M_PI / f30) - 1.0) / 3.0;
  EXPECT_GT(smooth30, 0.0);
  EXPECT_LT(smooth30, 1.0);
  EXPECT_NEAR(f[30], (1.0 - smooth30) * f30 / 8.0 + smooth30 * f30, 1e-6 * f30);
}

TEST(Rope, TableIsCosAndSinOfPositionTimesFrequency) {
  constexpr int hd = 16, T = 40;
  const std::vector<float> f = RopeInvFreq(hd, 10000.0).value();
  const RopeTable table = MakeRopeTable(f, T);
  ASSERT_EQ(table.cos.size(), size_t{T} * hd / 2);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < hd / 2; ++i) {
      int band;
      const double angle = double(t) * InvFreqRef(i, hd, 10000.0, nullptr, &band);
      EXPECT_NEAR(table.cos[t * hd / 2 + i], std::cos(angle), 1e-5) << t << "," << i;
      EXPECT_NEAR(table.sin[t * hd / 2 + i], std::sin(angle), 1e-5) << t << "," << i;
    }
  }
}

TEST(Rope, RejectsBadArguments) {
  EXPECT_FALSE(RopeInvFreq(7, 10000.0).ok());
  EXPECT_FALSE(RopeInvFreq(8, 0.0).ok());
  RopeScaling s;
  s.llama3 = true;
  s.high_freq_factor = 1.0;
  EXPECT_FALSE(RopeInvFreq(8, 10000.0, s).ok());
}

// ---- SwiGLU ----

std::vector<double> SwiGluRef(const std::vector<double>& inp, int N, int I) {
  std::vector<double> out(size_t(N) * I);
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < I; ++j) {
      const double g = inp[size_t(i) * 2 * I + j], u = inp[size_t(i) * 2 * I + I + j];
      out[size_t(i) * I + j] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  return out;
}

TEST(SwiGlu, ForwardMatchesFloat64) {
  constexpr int N = 6, I = 19;
  const std::vector<float> inp = RandomFloats(size_t(N) * 2 * I, 13, -6.0f, 6.0f);
  std::vector<float> out(size_t(N) * I);
  GluForward(out.data(), inp.data(), N, I, GluActivation::kSilu);
  ExpectAllClose(out, SwiGluRef(ToDouble(inp), N, I), 1e-6, 1e-6, "out");
}

TEST(SwiGlu, BackwardMatchesFiniteDifferencesAndAccumulates) {
  constexpr int N = 4, I = 11;
  const std::vector<float> inp = RandomFloats(size_t(N) * 2 * I, 14, -4.0f, 4.0f),
                           dout = RandomFloats(size_t(N) * I, 15);
  const std::vector<float> d0 = RandomFloats(inp.size(), 16);
  std::vector<float> dinp = d0;
  GluBackward(dinp.data(), inp.data(), dout.data(), N, I, GluActivation::kSilu);
  std::vector<double> want = FiniteDifferenceGrad(ToDouble(inp), [&](const std::vector<double>& v) {
    return WeightedSum(SwiGluRef(v, N, I), dout);
  });
  for (size_t i = 0; i < want.size(); ++i) want[i] += d0[i];
  ExpectAllClose(dinp, want, 1e-5, 1e-4, "dinp");
}

}  // namespace
}  // namespace hoist::kernels::cpu
