// bf16 attention (kernels/cpu/attention_bf16.h) against the fp32 kernel on the same bf16 inputs,
// widened: forward and backward, multi-head and grouped-query, at lengths that fill row blocks
// and that do not. The bounds come from bf16's unit roundoff u = 2^-8 on the operands that the
// bf16 path rounds (P and dL/dscores) and on its outputs, times the sums of |products| of each
// output, computed from the data; the fp32 arithmetic of either path adds terms in 2^-24. Where the
// run's choice is the fp32 path (ISA masked), the CPU backend's bf16 attention is the widened fp32
// kernel bit for bit.
#include "kernels/cpu/attention_bf16.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cast.h"
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

// Multi-head and grouped-query; T = 1, lengths inside one row block of 32, across several, and
// past 256 (blocks of 128), none but one a multiple of its block.
const Shape kShapes[] = {{2, 1, 4, 4, 16},  {2, 33, 4, 4, 32},  {1, 64, 4, 4, 64},
                         {2, 70, 4, 2, 16}, {1, 300, 2, 1, 64}, {1, 257, 4, 2, 32}};

// Per query row, from the data (both paths read the same bf16 q, k, v exactly):
//  - each score's fp32 sum of hd products and its scaling differ between the paths by at most
//    delta = 2 (hd + 1) 2^-24 scale sum_c |q_c k_c|, which moves P relatively by e^{2 delta} - 1;
//  - the softmax's own fp32 rounding in each path (the argument s - max, ExpApprox's 2e-7 < 4 ulp,
//    the T-term sum, the reciprocal and the product) moves P by at most
//    (|s - max| + T + 8) 2^-24 relatively, for both paths twice that;
//  - the bf16 path rounds P: u more.
// That makes e_P, P's relative difference; out = sum_j P_j v_j then differs by e_P S plus both
// paths' summation of up to T terms (2 T 2^-24 (1 + e_P) S), S = sum_j P_j |v_j|, before its
// one rounding to bf16 (u |out|).
struct RowSoftmax {
  std::vector<double> p;  // P of the row's keys 0..t
  double e_p;             // P's relative difference between the paths, bound
};

RowSoftmax ScoresOfRow(const Shape& s, const std::vector<float>& qkv, int b, int h, int t) {
  const int W = s.W(), C = s.C(), hd = s.hd, T = s.T;
  const double scale = 1.0 / std::sqrt(double(hd));
  const float* q = qkv.data() + (size_t(b) * T + t) * W + h * hd;
  const int kvh = h / (s.NH / s.NKV);
  std::vector<double> score(t + 1), abs_sum(t + 1);
  for (int j = 0; j <= t; ++j) {
    const float* k = qkv.data() + (size_t(b) * T + j) * W + C + kvh * hd;
    double dot = 0, abs = 0;
    for (int c = 0; c < hd; ++c) dot += double(q[c]) * k[c], abs += std::fabs(double(q[c]) * k[c]);
    score[j] = scale * dot;
    abs_sum[j] = scale * abs;
  }
  const double m = *std::max_element(score.begin(), score.end());
  double delta = 0, spread = 0, sum = 0;
  for (int j = 0; j <= t; ++j) {
    delta = std::max(delta, 2.0 * (hd + 1) * kU32 * abs_sum[j]);
    spread = std::max(spread, m - score[j]);
  }
  RowSoftmax r;
  r.p.resize(t + 1);
  for (int j = 0; j <= t; ++j) sum += r.p[j] = std::exp(score[j] - m);
  for (double& p : r.p) p /= sum;
  r.e_p = std::expm1(2 * delta) + 2 * (spread + T + 8) * kU32 + kU;
  return r;
}

TEST(AttentionBf16, ForwardWithinBf16RoundingOfTheFp32Kernel) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                      << " NKV=" << s.NKV << " hd=" << s.hd);
    const Inputs in = MakeInputs(s, 100 + s.T);
    std::vector<float> want(s.OutSize()), att_want(s.AttSize()), att(s.AttSize());
    std::vector<uint16_t> got(s.OutSize());
    AttentionForwardGqa(want.data(), att_want.data(), in.qkv32.data(), s.B, s.T, s.NH, s.NKV, s.hd);
    AttentionForwardGqaBf16(got.data(), att.data(), in.qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd);

    const int W = s.W(), C = s.C(), hd = s.hd, T = s.T;
    std::vector<double> out_bound(want.size()), att_bound(att.size(), 0.0);
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) {
        const int kvh = h / (s.NH / s.NKV);
        for (int t = 0; t < T; ++t) {
          const RowSoftmax r = ScoresOfRow(s, in.qkv32, b, h, t);
          // att is fp32 in both paths: P's difference without the bf16 rounding.
          for (int j = 0; j <= t; ++j) {
            att_bound[((size_t(b) * s.NH + h) * T + t) * T + j] = (r.e_p - kU) * r.p[j];
          }
          for (int c = 0; c < hd; ++c) {
            double S = 0;
            for (int j = 0; j <= t; ++j) {
              S += r.p[j] *
                   std::fabs(in.qkv32[(size_t(b) * T + j) * W + C + (s.NKV + kvh) * hd + c]);
            }
            const size_t i = (size_t(b) * T + t) * C + h * hd + c;
            const double D = (r.e_p + 2.0 * T * kU32 * (1 + r.e_p)) * S;
            out_bound[i] = D + kU * (std::fabs(want[i]) + D);
          }
        }
      }
    }
    EXPECT_EQ(CountOver(Widen(got), want, out_bound, "out"), 0);
    EXPECT_EQ(CountOver(att, att_want, att_bound, "att"), 0);
    // The bf16 path is not the fp32 one rounded at the end (but for T = 1: P = 1, exact in bf16).
    if (T > 1) {
      EXPECT_FALSE(SameBits(got, ToBf16(want)));
    }
  }
}

// The backward from the same att (the fp32 kernel's), into a nonzero dqkv. Per element, with
// dP = dout V^T, dS = scale P (dP - sum P dP) and E1 = 2 hd 2^-24 sum_c |dout_c v_c| (dP's
// summation in either path): the bf16 path's dS, rounded to bf16, is off from the fp32 path's by
//   eps = u |dS| + (1 + u) scale P ((E1 + sum P E1) + 2 (T + 8) 2^-24 (|dP| + sum P |dP|)),
// the last term the softmax backward's fp32 rounding in either path. Then
//   dq_c += sum_j dS_j k_jc:  D = sum_j eps_j |k_jc| + 2 (T + 1) 2^-24 (|dq0| + S + D0),
//   dk_c += sum_hi dS q_ic:   the same over the group's heads' rows (n = group T + 1 terms),
//   dv_c += sum_hi P d_ic:    P rounded: D0 = u S,
// with S the sum of |products| and D0 its first term; each is rounded once to bf16: u (|ref| + D).
TEST(AttentionBf16, BackwardWithinBf16RoundingOfTheFp32Kernel) {
  SKIP_WITHOUT_BF16_GEMM();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                      << " NKV=" << s.NKV << " hd=" << s.hd);
    const Inputs in = MakeInputs(s, 200 + s.T);
    std::vector<float> out(s.OutSize()), att(s.AttSize());
    AttentionForwardGqa(out.data(), att.data(), in.qkv32.data(), s.B, s.T, s.NH, s.NKV, s.hd);
    std::vector<float> want = in.dqkv032;
    AttentionBackwardGqa(want.data(), in.dout32.data(), in.qkv32.data(), att.data(), s.B, s.T, s.NH,
                         s.NKV, s.hd);
    std::vector<uint16_t> got = in.dqkv0;
    AttentionBackwardGqaBf16(got.data(), in.dout.data(), in.qkv.data(), att.data(), s.B, s.T, s.NH,
                             s.NKV, s.hd);

    const int W = s.W(), C = s.C(), hd = s.hd, T = s.T, group = s.NH / s.NKV;
    const double scale = 1.0 / std::sqrt(double(hd));
    // Sums of |products| (S) and of the bf16 path's extra error (E) per element of dqkv.
    std::vector<double> S(want.size(), 0.0), E(want.size(), 0.0);
    auto at = [&](int b, int t, int col) { return (size_t(b) * T + t) * W + col; };
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) {
        const int kcol = C + h / group * hd, vcol = kcol + s.NKV * hd;
        for (int t = 0; t < T; ++t) {
          const float* d = in.dout32.data() + (size_t(b) * T + t) * C + h * hd;
          const float* p = att.data() + ((size_t(b) * s.NH + h) * T + t) * T;
          std::vector<double> dp(t + 1), e1(t + 1);
          double sum_pdp = 0, sum_pe1 = 0, sum_pabs = 0;
          for (int j = 0; j <= t; ++j) {
            const float* v = in.qkv32.data() + at(b, j, vcol);
            double dot = 0, abs = 0;
            for (int c = 0; c < hd; ++c) dot += double(d[c]) * v[c], abs += std::fabs(d[c] * v[c]);
            dp[j] = dot;
            e1[j] = 2.0 * hd * kU32 * abs;
            sum_pdp += p[j] * dot;
            sum_pe1 += p[j] * e1[j];
            sum_pabs += p[j] * std::fabs(dot);
          }
          for (int j = 0; j <= t; ++j) {
            const double ds = scale * p[j] * (dp[j] - sum_pdp);
            const double eps =
                kU * std::fabs(ds) +
                (1 + kU) * scale * p[j] *
                    (e1[j] + sum_pe1 + 2.0 * (T + 8) * kU32 * (std::fabs(dp[j]) + sum_pabs));
            for (int c = 0; c < hd; ++c) {
              const double k = std::fabs(in.qkv32[at(b, j, kcol + c)]);
              const double q = std::fabs(in.qkv32[at(b, t, h * hd + c)]);
              S[at(b, t, h * hd + c)] += std::fabs(ds) * k;  // dq
              E[at(b, t, h * hd + c)] += eps * k;
              S[at(b, j, kcol + c)] += std::fabs(ds) * q;  // dk
              E[at(b, j, kcol + c)] += eps * q;
              const double pd = p[j] * std::fabs(d[c]);  // dv
              S[at(b, j, vcol + c)] += pd;
              E[at(b, j, vcol + c)] += kU * pd;
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
          const double terms = col < C ? T + 1 : double(group) * T + 1;
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

// Each product of a task runs on the task's thread: the team's size does not change a bit.
TEST(AttentionBf16, SameBitsOnOneThreadAsOnTheTeam) {
  SKIP_WITHOUT_BF16_GEMM();
  const Shape s{2, 300, 4, 2, 32};
  const Inputs in = MakeInputs(s, 7);
  auto run = [&](int threads, std::vector<uint16_t>& out, std::vector<float>& att,
                 std::vector<uint16_t>& dqkv) {
    const int old = omp_get_max_threads();
    omp_set_num_threads(threads);
    out.assign(s.OutSize(), 0);
    att.assign(s.AttSize(), 0.0f);
    dqkv = in.dqkv0;
    AttentionForwardGqaBf16(out.data(), att.data(), in.qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd);
    AttentionBackwardGqaBf16(dqkv.data(), in.dout.data(), in.qkv.data(), att.data(), s.B, s.T, s.NH,
                             s.NKV, s.hd);
    omp_set_num_threads(old);
  };
  std::vector<uint16_t> out1, dqkv1, outn, dqkvn;
  std::vector<float> att1, attn;
  run(1, out1, att1, dqkv1);
  run(std::max(2, omp_get_max_threads()), outn, attn, dqkvn);
  EXPECT_TRUE(SameBits(out1, outn));
  EXPECT_TRUE(SameBits(att1, attn));
  EXPECT_TRUE(SameBits(dqkv1, dqkvn));
}

// The CPU backend's bf16 attention, both APIs (GPT-2's and Llama's), next to what the run's path
// gives: the bf16 kernels where ActiveAttentionPath() chose them, else the fp32 kernels on widened
// copies, outputs rounded once (bit for bit). Returns how many arrays differed.
int BackendMismatches() {
  const Shape s{2, 40, 4, 2, 16};
  const Inputs in = MakeInputs(s, 9);
  const bool bf16 = ActiveAttentionPath().bf16;
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  CpuBackend backend(&device, HostStream::Mode::kInline);
  const Stream& stream = backend.compute_stream();
  const DType h = DType::kBFloat16;
  int mismatches = 0;
  // Llama's grouped-query form.
  std::vector<uint16_t> out(s.OutSize()), dqkv = in.dqkv0;
  std::vector<float> att(s.AttSize());
  mismatches += !backend
                     .GqaAttentionForward(out.data(), att.data(), in.qkv.data(), nullptr, s.B, s.T,
                                          s.NH, s.NKV, s.hd, {}, h, stream)
                     .ok();
  mismatches += !backend
                     .GqaAttentionBackward(dqkv.data(), in.dout.data(), in.qkv.data(), att.data(),
                                           nullptr, s.B, s.T, s.NH, s.NKV, s.hd, {}, h, stream)
                     .ok();
  mismatches += !stream.Synchronize().ok();
  std::vector<uint16_t> out_want(s.OutSize()), dqkv_want = in.dqkv0;
  std::vector<float> att_want(s.AttSize());
  if (bf16) {
    AttentionForwardGqaBf16(out_want.data(), att_want.data(), in.qkv.data(), s.B, s.T, s.NH, s.NKV,
                            s.hd);
    AttentionBackwardGqaBf16(dqkv_want.data(), in.dout.data(), in.qkv.data(), att_want.data(), s.B,
                             s.T, s.NH, s.NKV, s.hd);
  } else {
    std::vector<float> o(s.OutSize()), d = in.dqkv032;
    AttentionForwardGqa(o.data(), att_want.data(), in.qkv32.data(), s.B, s.T, s.NH, s.NKV, s.hd);
    AttentionBackwardGqa(d.data(), in.dout32.data(), in.qkv32.data(), att_want.data(), s.B, s.T,
                         s.NH, s.NKV, s.hd);
    out_want = ToBf16(o);
    dqkv_want = ToBf16(d);
  }
  mismatches += !SameBits(out, out_want) + !SameBits(att, att_want) + !SameBits(dqkv, dqkv_want);
  // GPT-2's multi-head form: the grouped-query one with NKV = NH.
  const Shape m{2, 40, 4, 4, 16};
  const Inputs mi = MakeInputs(m, 10);
  std::vector<uint16_t> mout(m.OutSize()), mdqkv = mi.dqkv0;
  std::vector<float> matt(m.AttSize());
  mismatches += !backend
                     .AttentionForward(mout.data(), matt.data(), mi.qkv.data(), nullptr, m.B, m.T,
                                       m.C(), m.NH, h, stream)
                     .ok();
  mismatches += !backend
                     .AttentionBackward(mdqkv.data(), mi.dout.data(), mi.qkv.data(), matt.data(),
                                        nullptr, m.B, m.T, m.C(), m.NH, h, stream)
                     .ok();
  mismatches += !stream.Synchronize().ok();
  std::vector<uint16_t> mout_want(m.OutSize()), mdqkv_want = mi.dqkv0;
  std::vector<float> matt_want(m.AttSize());
  if (bf16) {
    AttentionForwardGqaBf16(mout_want.data(), matt_want.data(), mi.qkv.data(), m.B, m.T, m.NH,
                            m.NKV, m.hd);
    AttentionBackwardGqaBf16(mdqkv_want.data(), mi.dout.data(), mi.qkv.data(), matt_want.data(),
                             m.B, m.T, m.NH, m.NKV, m.hd);
  } else {
    std::vector<float> o(m.OutSize()), d = mi.dqkv032;
    AttentionForward(o.data(), matt_want.data(), mi.qkv32.data(), m.B, m.T, m.C(), m.NH);
    AttentionBackward(d.data(), mi.dout32.data(), mi.qkv32.data(), matt_want.data(), m.B, m.T,
                      m.C(), m.NH);
    mout_want = ToBf16(o);
    mdqkv_want = ToBf16(d);
  }
  mismatches +=
      !SameBits(mout, mout_want) + !SameBits(matt, matt_want) + !SameBits(mdqkv, mdqkv_want);
  return mismatches;
}

TEST(AttentionBf16Backend, TakesTheRunsAttentionPath) { EXPECT_EQ(BackendMismatches(), 0); }

TEST(AttentionPathChoice, FollowsTheMatmulsAndTimesBothWhereItCanChoose) {
  const char* mode = std::getenv("HOIST_GEMM");
  if (mode != nullptr && *mode != '\0' && std::string(mode) != "auto") {
    GTEST_SKIP() << "HOIST_GEMM=" << mode << " decides without timing";
  }
  const AttentionChoice choice = DecideAttentionPath();
  if (ActiveGemmPath().path != GemmPath::kBf16Dnnl) {
    EXPECT_FALSE(choice.bf16) << choice.reason;
    EXPECT_EQ(choice.bf16_ms, 0.0);
    return;
  }
  EXPECT_GT(choice.bf16_ms, 0.0);
  EXPECT_GT(choice.fp32_ms, 0.0);
  EXPECT_EQ(choice.bf16, choice.bf16_ms < choice.fp32_ms) << choice.reason;
}

// The paths are decided once per process, so each setting runs in a fresh child process
// ("threadsafe" death tests re-execute the binary) that exits with its count of mismatches, or
// 100 where the attention path is not the one the setting asks for.
void ExitWithMismatchesUnder(const char* mask) {
  setenv("HOIST_CPU_MASK", mask, 1);
  if (ActiveGemmPath().path != GemmPath::kFp32Blas || ActiveAttentionPath().bf16) std::exit(100);
  std::exit(BackendMismatches());
}

TEST(AttentionBf16BackendDeathTest, MaskedIsaKeepsTheFp32KernelsBitForBit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitWithMismatchesUnder("bf16"), ::testing::ExitedWithCode(0), "");
}

TEST(AttentionBf16BackendDeathTest, Fp32GemmModeKeepsTheFp32KernelsBitForBit) {
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

TEST(AttentionBf16BackendDeathTest, Bf16GemmModeTakesTheBf16KernelsUntimed) {
  SKIP_WITHOUT_BF16_GEMM();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitWithMismatchesUnderForcedBf16(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace hoist::kernels::cpu
