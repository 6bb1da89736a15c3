// bf16 tiled attention (kernels/cpu/flash_attention_bf16.h) against the fp32 tiled kernel on the
// same bf16 inputs, widened: forward and backward, multi-head and grouped-query, at lengths that
// fill tiles and that do not, at the default tiles and at small uneven ones. The bounds come from
// bf16's unit roundoff u = 2^-8 on what the bf16 path rounds (the tiles' probabilities and
// dL/dscores) and on its outputs, times the sums of |products| of each output, computed from the
// data; the fp32 arithmetic of either path (the products' sums, the online softmax's exps and
// rescalings, once per key tile) adds terms in 2^-24. Where the run's choice is the fp32 path
// (ISA masked), the CPU backend's bf16 tiled attention is the widened fp32 kernel bit for bit.
#include "kernels/cpu/flash_attention_bf16.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "tests/kernels/bf16_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using testing::CountOver;
using testing::kU;
using testing::kU32;
using testing::RandomFloats;
using testing::SameBits;
using testing::ToBf16;
using testing::Widen;
using Shape = testing::AttentionShape;
using Inputs = testing::AttentionInputs;
Inputs MakeInputs(const Shape& s, uint32_t seed) { return testing::MakeAttentionInputs(s, seed); }

// Multi-head and grouped-query; T = 1, lengths inside one tile, across several, and past 256,
// none but one a multiple of the default tile (128) or of the small tiles below.
const Shape kShapes[] = {{2, 1, 4, 4, 16},  {2, 33, 4, 4, 32},  {1, 128, 4, 4, 64},
                         {2, 70, 4, 2, 16}, {1, 300, 2, 1, 64}, {1, 257, 4, 2, 32}};

// The bf16 kernels' default tiles, and small uneven ones (more key tiles than query tiles, a
// diagonal that crosses tiles at every offset).
std::vector<TiledAttentionOptions> Tilings(int T) {
  TiledAttentionOptions small = DefaultTiledAttentionBf16Options(T);
  small.q_rows = 32;
  small.k_cols = 24;
  return {DefaultTiledAttentionBf16Options(T), small};
}

int NumKeyTiles(const TiledAttentionOptions& o, int T) {
  const int cols = std::min(o.k_cols, T);
  return (T + cols - 1) / cols;
}

// One query row's scores in float64 from the bf16 inputs (exact in fp32 for both paths), with
//  - delta[j] = 2 (hd + 1) 2^-24 scale sum_c |q_c k_jc|: how far the paths' fp32 scores (sums of
//    hd products in different orders, then scaled) can be apart;
//  - spread = max_j (max - s_j).
struct RowScores {
  std::vector<double> s, delta;
  double max, spread, lse;
};

RowScores ScoresOfRow(const Shape& s, const std::vector<float>& qkv, int b, int h, int t) {
  const int W = s.W(), C = s.C(), hd = s.hd, T = s.T;
  const double scale = 1.0 / std::sqrt(double(hd));
  const float* q = qkv.data() + (size_t(b) * T + t) * W + h * hd;
  const int kvh = h / (s.NH / s.NKV);
  RowScores r;
  r.s.resize(t + 1);
  r.delta.resize(t + 1);
  for (int j = 0; j <= t; ++j) {
    const float* k = qkv.data() + (size_t(b) * T + j) * W + C + kvh * hd;
    double dot = 0, abs = 0;
    for (int c = 0; c < hd; ++c) dot += double(q[c]) * k[c], abs += std::fabs(double(q[c]) * k[c]);
    r.s[j] = scale * dot;
    r.delta[j] = 2.0 * (hd + 1) * kU32 * scale * abs;
  }
  r.max = *std::max_element(r.s.begin(), r.s.end());
  r.spread = 0;
  double sum = 0;
  for (int j = 0; j <= t; ++j) {
    r.spread = std::max(r.spread, r.max - r.s[j]);
    sum += std::exp(r.s[j] - r.max);
  }
  r.lse = r.max + std::log(sum);
  return r;
}

// Forward, per query row. Each path's effective weight of key j, (e^{s_j - m_k} rescaled by
// e^{m_k - m_(k+1)} ... up to the row's max) / sum, is off from P_j relatively by at most
//   (2 spread + 5 n + 4) 2^-24 in the numerator (the exps' arguments, each below spread in size
//   and the rescalings' telescoping to max - m_k; ExpApprox's 2e-7 < 4 ulp and a product's ulp
//   per rescaling, n key tiles), as much in the sum plus (T + n) 2^-24 for its additions, and
//   8 2^-24 for the reciprocal and the products,
// so for both paths together e_P = expm1(2 max delta) + 2 (4 spread + 11 n + T + 8) 2^-24, and
// the bf16 path rounds the numerators: u more. out = sum_j P_j v_j then differs by e_P S plus
// both paths' sums of T terms in n tiles (2 (T + n) 2^-24 (1 + e_P) S), S = sum_j P_j |v_j|,
// before its one rounding to bf16 (u |out|). lse = max + log(sum) is fp32 in both: it differs by
// the scores' 2 max delta, the sums' relative difference and two ulps of its size per path.
TEST(FlashAttentionBf16, ForwardWithinBf16RoundingOfTheFp32Kernel) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const Shape& s : kShapes) {
    for (const TiledAttentionOptions& tiles : Tilings(s.T)) {
      SCOPED_TRACE(::testing::Message()
                   << "B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV
                   << " hd=" << s.hd << " tiles " << tiles.q_rows << "x" << tiles.k_cols);
      const Inputs in = MakeInputs(s, 100 + s.T);
      std::vector<float> want(s.OutSize()), lse_want(s.LseSize()), lse(s.LseSize());
      std::vector<uint16_t> got(s.OutSize());
      AttentionForwardTiledGqa(want.data(), lse_want.data(), in.qkv32.data(), s.B, s.T, s.NH, s.NKV,
                               s.hd);
      AttentionForwardTiledGqaBf16With(tiles, got.data(), lse.data(), in.qkv.data(), s.B, s.T, s.NH,
                                       s.NKV, s.hd);

      const int W = s.W(), C = s.C(), hd = s.hd, T = s.T;
      const int n =
          std::max(NumKeyTiles(tiles, T), NumKeyTiles(DefaultTiledAttentionOptions(T), T));
      std::vector<double> out_bound(want.size()), lse_bound(lse.size());
      for (int b = 0; b < s.B; ++b) {
        for (int h = 0; h < s.NH; ++h) {
          const int kvh = h / (s.NH / s.NKV);
          for (int t = 0; t < T; ++t) {
            const RowScores r = ScoresOfRow(s, in.qkv32, b, h, t);
            const double max_delta = *std::max_element(r.delta.begin(), r.delta.end());
            const double e_sum =
                std::expm1(2 * max_delta) + 2 * (4 * r.spread + 11 * n + T + 8) * kU32;
            const double e_p = e_sum + kU;
            const size_t li = (size_t(b) * s.NH + h) * T + t;
            lse_bound[li] = 2 * max_delta + e_sum + 4 * kU32 * (std::fabs(r.lse) + r.max);
            for (int c = 0; c < hd; ++c) {
              double S = 0;
              for (int j = 0; j <= t; ++j) {
                S += std::exp(r.s[j] - r.lse) *
                     std::fabs(in.qkv32[(size_t(b) * T + j) * W + C + (s.NKV + kvh) * hd + c]);
              }
              const size_t i = (size_t(b) * T + t) * C + h * hd + c;
              const double D = (e_p + 2.0 * (T + n) * kU32 * (1 + e_p)) * S;
              out_bound[i] = D + kU * (std::fabs(want[i]) + D);
            }
          }
        }
      }
      EXPECT_EQ(CountOver(Widen(got), want, out_bound, "out"), 0);
      EXPECT_EQ(CountOver(lse, lse_want, lse_bound, "lse"), 0);
      // The bf16 path is not the fp32 one rounded at the end (but for T = 1: P = 1, exact).
      if (T > 1) {
        EXPECT_FALSE(SameBits(got, ToBf16(want)));
      }
    }
  }
}

// The backward from the same out (the fp32 kernel's, rounded to bf16, as a bf16 run keeps it) and
// lse, into a nonzero dqkv. Both paths recompute P_j = e^{s_j - lse} in fp32: apart by
//   e_P = expm1(delta_j) + 2 (|s_j - lse| + 8) 2^-24 (the scores, the exp's argument and ExpApprox)
// relatively. With dP = dout V^T, D = rowsum(dout * out) (the same loop in both paths, off from
// the exact one by E_D = hd 2^-24 sum |dout out| each) and E1 = 2 hd 2^-24 sum_c |dout_c v_c|
// (dP's sums), the bf16 path's dS = scale P (dP - D), rounded to bf16, is off from the fp32
// path's by
//   eps = u |dS| + (1 + u) scale P ((e_P + 8 2^-24) (|dP| + |D|) + E1 + 2 E_D).
// Then dq_c += sum_j dS_j k_jc: E = sum_j eps_j |k_jc|; dk_c += sum dS q_ic: the same over the
// group's heads' rows; dv_c += sum P d_ic: E = (u + (1 + u) e_P) sum P |d_ic| (P rounded). Each
// sum of m terms added a tile at a time in n tiles: 2 (m + n + 1) 2^-24 (|d0| + S + E), S the sum
// of |products|; each result rounded once to bf16: u (|ref| + D).
TEST(FlashAttentionBf16, BackwardWithinBf16RoundingOfTheFp32Kernel) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const Shape& s : kShapes) {
    for (const TiledAttentionOptions& tiles : Tilings(s.T)) {
      SCOPED_TRACE(::testing::Message()
                   << "B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV
                   << " hd=" << s.hd << " tiles " << tiles.q_rows << "x" << tiles.k_cols);
      const Inputs in = MakeInputs(s, 200 + s.T);
      std::vector<float> out32(s.OutSize()), lse(s.LseSize());
      AttentionForwardTiledGqa(out32.data(), lse.data(), in.qkv32.data(), s.B, s.T, s.NH, s.NKV,
                               s.hd);
      const std::vector<uint16_t> out = ToBf16(out32);
      const std::vector<float> outw = Widen(out);
      std::vector<float> want = in.dqkv032;
      AttentionBackwardTiledGqa(want.data(), in.dout32.data(), in.qkv32.data(), outw.data(),
                                lse.data(), s.B, s.T, s.NH, s.NKV, s.hd);
      std::vector<uint16_t> got = in.dqkv0;
      AttentionBackwardTiledGqaBf16With(tiles, got.data(), in.dout.data(), in.qkv.data(),
                                        out.data(), lse.data(), s.B, s.T, s.NH, s.NKV, s.hd);

      const int W = s.W(), C = s.C(), hd = s.hd, T = s.T, group = s.NH / s.NKV;
      const int n =
          std::max(NumKeyTiles(tiles, T), NumKeyTiles(DefaultTiledAttentionOptions(T), T));
      const double scale = 1.0 / std::sqrt(double(hd));
      std::vector<double> S(want.size(), 0.0), E(want.size(), 0.0);
      auto at = [&](int b, int t, int col) { return (size_t(b) * T + t) * W + col; };
      for (int b = 0; b < s.B; ++b) {
        for (int h = 0; h < s.NH; ++h) {
          const int kcol = C + h / group * hd, vcol = kcol + s.NKV * hd;
          for (int t = 0; t < T; ++t) {
            const RowScores r = ScoresOfRow(s, in.qkv32, b, h, t);
            const double row_lse = lse[(size_t(b) * s.NH + h) * T + t];
            const float* d = in.dout32.data() + (size_t(b) * T + t) * C + h * hd;
            const float* o = outw.data() + (size_t(b) * T + t) * C + h * hd;
            double D = 0, e_d = 0;
            for (int c = 0; c < hd; ++c) D += double(d[c]) * o[c], e_d += std::fabs(d[c] * o[c]);
            e_d *= hd * kU32;
            for (int j = 0; j <= t; ++j) {
              const float* v = in.qkv32.data() + at(b, j, vcol);
              double dp = 0, e1 = 0;
              for (int c = 0; c < hd; ++c) dp += double(d[c]) * v[c], e1 += std::fabs(d[c] * v[c]);
              e1 *= 2.0 * hd * kU32;
              const double p = std::exp(r.s[j] - row_lse);
              const double e_p =
                  std::expm1(r.delta[j]) + 2 * (std::fabs(r.s[j] - row_lse) + 8) * kU32;
              const double ds = scale * p * (dp - D);
              const double eps =
                  kU * std::fabs(ds) +
                  (1 + kU) * scale * p *
                      ((e_p + 8 * kU32) * (std::fabs(dp) + std::fabs(D)) + e1 + 2 * e_d);
              for (int c = 0; c < hd; ++c) {
                const double k = std::fabs(in.qkv32[at(b, j, kcol + c)]);
                const double q = std::fabs(in.qkv32[at(b, t, h * hd + c)]);
                S[at(b, t, h * hd + c)] += std::fabs(ds) * k;  // dq
                E[at(b, t, h * hd + c)] += eps * k;
                S[at(b, j, kcol + c)] += std::fabs(ds) * q;  // dk
                E[at(b, j, kcol + c)] += eps * q;
                const double pd = p * std::fabs(d[c]);  // dv
                S[at(b, j, vcol + c)] += pd;
                E[at(b, j, vcol + c)] += (kU + (1 + kU) * e_p) * pd;
              }
            }
          }
        }
      }
      std::vector<double> bound(want.size());
      for (int b = 0; b < s.B; ++b) {
        for (int t = 0; t < T; ++t) {
          for (int col = 0; col < W; ++col) {
            const size_t i = at(b, t, col);
            const double terms = col < C ? T + n + 1 : double(group) * (T + n) + 1;
            const double D = E[i] + 2.0 * terms * kU32 * (std::fabs(in.dqkv032[i]) + S[i] + E[i]);
            bound[i] = D + kU * (std::fabs(want[i]) + D);
          }
        }
      }
      EXPECT_EQ(CountOver(Widen(got), want, bound, "dqkv"), 0);
      if (T > 1) {
        EXPECT_FALSE(SameBits(got, ToBf16(want)));
      }
    }
  }
}

// Each product of a task runs on the task's thread: the team's size does not change a bit.
TEST(FlashAttentionBf16, SameBitsOnOneThreadAsOnTheTeam) {
  SKIP_WITHOUT_BF16_GEMM();
  const Shape s{2, 300, 4, 2, 32};
  const Inputs in = MakeInputs(s, 7);
  auto run = [&](int threads, std::vector<uint16_t>& out, std::vector<float>& lse,
                 std::vector<uint16_t>& dqkv) {
    const int old = omp_get_max_threads();
    omp_set_num_threads(threads);
    out.assign(s.OutSize(), 0);
    lse.assign(s.LseSize(), 0.0f);
    dqkv = in.dqkv0;
    AttentionForwardTiledGqaBf16(out.data(), lse.data(), in.qkv.data(), s.B, s.T, s.NH, s.NKV,
                                 s.hd);
    AttentionBackwardTiledGqaBf16(dqkv.data(), in.dout.data(), in.qkv.data(), out.data(),
                                  lse.data(), s.B, s.T, s.NH, s.NKV, s.hd);
    omp_set_num_threads(old);
  };
  std::vector<uint16_t> out1, dqkv1, outn, dqkvn;
  std::vector<float> lse1, lsen;
  run(1, out1, lse1, dqkv1);
  run(std::max(2, omp_get_max_threads()), outn, lsen, dqkvn);
  EXPECT_TRUE(SameBits(out1, outn));
  EXPECT_TRUE(SameBits(lse1, lsen));
  EXPECT_TRUE(SameBits(dqkv1, dqkvn));
}

// The CPU backend's bf16 tiled attention, both APIs (GPT-2's and Llama's), next to what the run's
// path gives: the bf16 tiled kernels where ActiveAttentionPath() chose the bf16 attention, else
// the fp32 tiled kernels on widened copies, outputs rounded once (bit for bit). Returns how many
// arrays differed.
int BackendMismatches() {
  const bool bf16 = ActiveAttentionPath().bf16;
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  CpuBackend backend(&device, HostStream::Mode::kInline);
  const Stream& stream = backend.compute_stream();
  const DType type = DType::kBFloat16;
  int mismatches = 0;
  // Llama's grouped-query form, then GPT-2's multi-head one (NKV = NH).
  for (const Shape& s : {Shape{2, 140, 4, 2, 16}, Shape{2, 140, 4, 4, 16}}) {
    const bool gqa = s.NKV != s.NH;
    const Inputs in = MakeInputs(s, gqa ? 9 : 10);
    std::vector<uint16_t> out(s.OutSize()), dqkv = in.dqkv0;
    std::vector<float> lse(s.LseSize());
    if (gqa) {
      mismatches += !backend
                         .GqaAttentionForwardTiled(out.data(), lse.data(), in.qkv.data(), s.B, s.T,
                                                   s.NH, s.NKV, s.hd, {}, type, stream)
                         .ok();
      mismatches += !backend
                         .GqaAttentionBackwardTiled(dqkv.data(), in.dout.data(), in.qkv.data(),
                                                    out.data(), lse.data(), nullptr, s.B, s.T, s.NH,
                                                    s.NKV, s.hd, {}, type, stream)
                         .ok();
    } else {
      mismatches += !backend
                         .AttentionForwardTiled(out.data(), lse.data(), in.qkv.data(), s.B, s.T,
                                                s.C(), s.NH, type, stream)
                         .ok();
      mismatches +=
          !backend
               .AttentionBackwardTiled(dqkv.data(), in.dout.data(), in.qkv.data(), out.data(),
                                       lse.data(), nullptr, s.B, s.T, s.C(), s.NH, type, stream)
               .ok();
    }
    mismatches += !stream.Synchronize().ok();
    std::vector<uint16_t> out_want(s.OutSize()), dqkv_want = in.dqkv0;
    std::vector<float> lse_want(s.LseSize());
    if (bf16) {
      AttentionForwardTiledGqaBf16(out_want.data(), lse_want.data(), in.qkv.data(), s.B, s.T, s.NH,
                                   s.NKV, s.hd);
      AttentionBackwardTiledGqaBf16(dqkv_want.data(), in.dout.data(), in.qkv.data(),
                                    out_want.data(), lse_want.data(), s.B, s.T, s.NH, s.NKV, s.hd);
    } else {
      std::vector<float> o(s.OutSize()), d = in.dqkv032;
      if (gqa) {
        AttentionForwardTiledGqa(o.data(), lse_want.data(), in.qkv32.data(), s.B, s.T, s.NH, s.NKV,
                                 s.hd);
      } else {
        AttentionForwardTiled(o.data(), lse_want.data(), in.qkv32.data(), s.B, s.T, s.C(), s.NH);
      }
      out_want = ToBf16(o);
      const std::vector<float> ow = Widen(out_want);  // the backward reads the rounded out
      if (gqa) {
        AttentionBackwardTiledGqa(d.data(), in.dout32.data(), in.qkv32.data(), ow.data(),
                                  lse_want.data(), s.B, s.T, s.NH, s.NKV, s.hd);
      } else {
        AttentionBackwardTiled(d.data(), in.dout32.data(), in.qkv32.data(), ow.data(),
                               lse_want.data(), s.B, s.T, s.C(), s.NH);
      }
      dqkv_want = ToBf16(d);
    }
    mismatches += !SameBits(out, out_want) + !SameBits(lse, lse_want) + !SameBits(dqkv, dqkv_want);
  }
  return mismatches;
}

TEST(FlashAttentionBf16Backend, TakesTheRunsAttentionPath) { EXPECT_EQ(BackendMismatches(), 0); }

// The paths are decided once per process, so each setting runs in a fresh child process
// ("threadsafe" death tests re-execute the binary) that exits with its count of mismatches, or
// 100 where the attention path is not the one the setting asks for.
void ExitWithMismatchesUnder(const char* mask) {
  setenv("HOIST_CPU_MASK", mask, 1);
  if (ActiveGemmPath().path != GemmPath::kFp32Blas || ActiveAttentionPath().bf16) std::exit(100);
  std::exit(BackendMismatches());
}

TEST(FlashAttentionBf16BackendDeathTest, MaskedIsaKeepsTheFp32KernelsBitForBit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitWithMismatchesUnder("bf16"), ::testing::ExitedWithCode(0), "");
}

TEST(FlashAttentionBf16BackendDeathTest, Fp32GemmModeKeepsTheFp32KernelsBitForBit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("HOIST_GEMM", "fp32", 1);
        ExitWithMismatchesUnder("");
      },
      ::testing::ExitedWithCode(0), "");
}

void ExitWithMismatchesUnderForcedBf16() {
  setenv("HOIST_GEMM", "bf16", 1);
  if (!ActiveAttentionPath().bf16) std::exit(100);
  std::exit(BackendMismatches());
}

TEST(FlashAttentionBf16BackendDeathTest, Bf16GemmModeTakesTheBf16KernelsUntimed) {
  SKIP_WITHOUT_BF16_GEMM();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitWithMismatchesUnderForcedBf16(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace hoist::kernels::cpu
