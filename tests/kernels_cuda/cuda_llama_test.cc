// The Llama family's CUDA ops against their CPU twins: RMSNorm, rotary embeddings, SwiGLU
// (kernels/cuda/llama.h) and grouped-query attention (kernels/cuda/attention.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/llama.h"
#include "kernels/rope.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::DeviceArray;
using testing::DTypeParamName;
using testing::ExpectAllClose;
using testing::RandomFloats;
using testing::RoundTo;
using testing::Tolerance;
using testing::ToleranceFor;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |got - ref| <= atol + rtol |ref| + order_eps * max|ref|: the dtype's rounding of each output
// plus fp32 sums taken in another order than the CPU's, which scale with the largest value.
void ExpectCloseToScale(const std::vector<float>& got, const std::vector<float>& ref, Tolerance tol,
                        const std::string& what, double order_eps = 1e-5) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double scale = 0.0;
  for (float r : ref) scale = std::max(scale, static_cast<double>(std::fabs(r)));
  int reported = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double bound = tol.atol + tol.rtol * std::fabs(ref[i]) + order_eps * scale;
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i] << " (bound "
                    << bound << ")";
    }
  }
}

class CudaLlama : public CudaKernelTest, public ::testing::WithParamInterface<DType> {};

// C = 200: a partial last 32-wide lane pass; N = 300 spans several row chunks of dweight.
TEST_P(CudaLlama, RmsNormMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  for (const auto& [N, C] : {std::pair{37, 72}, std::pair{300, 200}}) {
    const size_t n = size_t{1} * N * C;
    const auto inp = RoundTo(type, RandomFloats(n, 1, -2.0f, 2.0f));
    const auto weight = RoundTo(type, RandomFloats(C, 2, 0.5f, 1.5f));
    const auto dout = RoundTo(type, RandomFloats(n, 3));
    std::vector<float> want(n), want_rstd(N);
    cpu::RmsNormForward(want.data(), want_rstd.data(), inp.data(), weight.data(), N, C, 1e-5f,
                        type);
    DeviceArray d_inp(type, inp), d_weight(type, weight), d_out(type, n),
        d_rstd(DType::kFloat32, N);
    d_out.Poison();
    d_rstd.Poison();
    HOIST_ASSERT_OK(RmsNormForward(d_out.data(), d_rstd.as<float>(), d_inp.data(), d_weight.data(),
                                   N, C, 1e-5f, RmsNormStyle::kLlama, type, stream()));
    // The normalised value's rounding to `type` may fall the other way where rstd differs in its
    // last fp32 bit: two roundings of `type` apart at most, within tol.
    ExpectAllClose(d_out.Download(), want, tol.atol, tol.rtol, "out");
    const Tolerance f32 = ToleranceFor(DType::kFloat32);
    ExpectAllClose(d_rstd.Download(), want_rstd, f32.atol, f32.rtol, "rstd");

    std::vector<float> want_dinp = RoundTo(type, RandomFloats(n, 4)), want_dw = RandomFloats(C, 5);
    DeviceArray d_dinp(type, want_dinp), d_dw(DType::kFloat32, want_dw), d_dout(type, dout),
        d_rstd_ref(DType::kFloat32, want_rstd);
    cpu::RmsNormBackward(want_dinp.data(), want_dw.data(), dout.data(), inp.data(), weight.data(),
                         want_rstd.data(), N, C);
    HOIST_ASSERT_OK(RmsNormBackward(d_dinp.data(), d_dw.as<float>(), d_dout.data(), d_inp.data(),
                                    d_weight.data(), d_rstd_ref.as<float>(), N, C,
                                    RmsNormStyle::kLlama, type, stream()));
    ExpectAllClose(d_dinp.Download(), want_dinp, tol.atol, tol.rtol, "dinp");
    // fp32 sums over N rows in another order (partials, then atomics).
    ExpectAllClose(d_dw.Download(), want_dw, 1e-4, 1e-4, "dweight");
  }
}

// The rotation is exact arithmetic of the CPU's (no FMA): in fp32 the same bits; in 16-bit types
// the CPU op on the widened values, rounded once, is the same computation, so the same bits too.
TEST_P(CudaLlama, RopeIsTheCpuRotationBitForBit) {
  const DType type = GetParam();
  constexpr int B = 2, T = 37, NH = 6, NKV = 2, hd = 64;
  RopeScaling llama3;
  llama3.llama3 = true;
  llama3.original_max_position_embeddings = 64.0;
  const RopeTable table = MakeRopeTable(RopeInvFreq(hd, 500000.0, llama3).value(), T);
  const size_t n = size_t{B} * T * (NH + 2 * NKV) * hd;
  const auto qkv = RoundTo(type, RandomFloats(n, 6));
  DeviceArray d_cos(DType::kFloat32, table.cos), d_sin(DType::kFloat32, table.sin);
  DeviceArray d_x(type, qkv), d_dx(type, qkv);
  HOIST_ASSERT_OK(RopeForward(d_x.data(), d_cos.as<float>(), d_sin.as<float>(), B, T, NH, NKV, hd,
                              type, stream()));
  HOIST_ASSERT_OK(RopeBackward(d_dx.data(), d_cos.as<float>(), d_sin.as<float>(), B, T, NH, NKV, hd,
                               type, stream()));
  std::vector<float> x = qkv, dx = qkv;
  cpu::RopeForward(x.data(), table.cos.data(), table.sin.data(), B, T, NH, NKV, hd);
  cpu::RopeBackward(dx.data(), table.cos.data(), table.sin.data(), B, T, NH, NKV, hd);
  EXPECT_TRUE(SameBits(d_x.Download(), RoundTo(type, x)));
  EXPECT_TRUE(SameBits(d_dx.Download(), RoundTo(type, dx)));
}

TEST_P(CudaLlama, SwiGluMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  constexpr int N = 45, I = 173;
  const auto inp = RoundTo(type, RandomFloats(size_t{N} * 2 * I, 7, -5.0f, 5.0f));
  const auto dout = RoundTo(type, RandomFloats(size_t{N} * I, 8));
  std::vector<float> want(size_t{N} * I), want_dinp = RoundTo(type, RandomFloats(inp.size(), 9));
  DeviceArray d_inp(type, inp), d_out(type, want.size()), d_dout(type, dout),
      d_dinp(type, want_dinp);
  d_out.Poison();
  cpu::GluForward(want.data(), inp.data(), N, I, GluActivation::kSilu);
  cpu::GluBackward(want_dinp.data(), inp.data(), dout.data(), N, I, GluActivation::kSilu);
  HOIST_ASSERT_OK(
      GluForward(d_out.data(), d_inp.data(), N, I, GluActivation::kSilu, type, stream()));
  HOIST_ASSERT_OK(GluBackward(d_dinp.data(), d_inp.data(), d_dout.data(), N, I,
                              GluActivation::kSilu, type, stream()));
  ExpectAllClose(d_out.Download(), want, tol.atol, tol.rtol, "out");
  ExpectAllClose(d_dinp.Download(), want_dinp, tol.atol, tol.rtol, "dinp");
}

TEST_P(CudaLlama, RefusesBadArguments) {
  const DType type = GetParam();
  DeviceArray a(type, 64), f(DType::kFloat32, 64);
  EXPECT_EQ(
      RopeForward(a.data(), f.as<float>(), f.as<float>(), 1, 2, 2, 1, 7, type, stream()).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNormForward(a.data(), f.as<float>(), nullptr, a.data(), 2, 4, 1e-5f,
                           RmsNormStyle::kLlama, type, stream())
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(GluForward(a.data(), a.data(), 2, 0, GluActivation::kSilu, type, stream()).code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaLlama,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         DTypeParamName);

struct GqaShape {
  int B, T, NH, NKV, hd;
  size_t qkv() const { return size_t{1} * B * T * (NH + 2 * NKV) * hd; }
  size_t out() const { return size_t{1} * B * T * NH * hd; }
  size_t att() const { return size_t{1} * B * NH * T * T; }
  size_t lse() const { return size_t{1} * B * NH * T; }
};

// T = 67: partial 32-row tiles; groups of 3 query heads per key/value head.
constexpr GqaShape kGqa = {2, 67, 6, 2, 16};

// qkv (B,T,(NH+2*NKV)*hd) with each key/value head repeated for its group: (B,T,3*NH*hd).
std::vector<float> RepeatKv(const std::vector<float>& qkv, const GqaShape& s) {
  const int group = s.NH / s.NKV, w = (s.NH + 2 * s.NKV) * s.hd, C = s.NH * s.hd;
  std::vector<float> out(size_t{1} * s.B * s.T * 3 * C);
  for (int r = 0; r < s.B * s.T; ++r) {
    const float* src = qkv.data() + size_t{1} * r * w;
    float* dst = out.data() + size_t{1} * r * 3 * C;
    std::copy(src, src + C, dst);
    for (int h = 0; h < s.NH; ++h) {
      const float* k = src + C + (h / group) * s.hd;
      std::copy(k, k + s.hd, dst + C + h * s.hd);
      std::copy(k + s.NKV * s.hd, k + s.NKV * s.hd + s.hd, dst + 2 * C + h * s.hd);
    }
  }
  return out;
}

class CudaGqaAttention : public CudaKernelTest, public ::testing::WithParamInterface<DType> {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    StatusOr<std::unique_ptr<BlasHandle>> blas = BlasHandle::Create();
    ASSERT_TRUE(blas.ok()) << blas.status().ToString();
    blas_ = std::move(*blas);
  }
  size_t WorkspaceFloats(const GqaShape& s) const {
    return static_cast<size_t>(
               std::max(GqaAttentionWorkspaceBytes(s.B, s.T, s.NH, s.NKV, s.hd, GetParam()),
                        TiledAttentionBackwardWorkspaceBytes(s.B, s.T, s.NH))) /
           sizeof(float);
  }
  std::unique_ptr<BlasHandle> blas_;
};

// The tiled kernels keep P and dS in fp32, as the CPU twin: the dtype's rounding of each output.
TEST_P(CudaGqaAttention, TiledMatchesCpu) {
  const DType type = GetParam();
  const GqaShape s = kGqa;
  const auto qkv = RoundTo(type, RandomFloats(s.qkv(), 11));
  const auto dout = RoundTo(type, RandomFloats(s.out(), 12));
  const auto dqkv0 = RoundTo(type, RandomFloats(s.qkv(), 13));
  DeviceArray d_qkv(type, qkv), d_out(type, s.out()), d_lse(DType::kFloat32, s.lse());
  d_out.Poison();
  d_lse.Poison();
  HOIST_ASSERT_OK(GqaAttentionForwardTiled(d_out.data(), d_lse.as<float>(), d_qkv.data(), s.B, s.T,
                                           s.NH, s.NKV, s.hd, {}, type, stream()));
  std::vector<float> out(s.out()), lse(s.lse());
  cpu::AttentionForwardTiledGqa(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd);
  ExpectCloseToScale(d_out.Download(), out, ToleranceFor(type), "out");
  ExpectCloseToScale(d_lse.Download(), lse, ToleranceFor(DType::kFloat32), "lse");

  const auto out_rounded = RoundTo(type, out);
  DeviceArray d_dout(type, dout), d_dqkv(type, dqkv0), d_out_ref(type, out_rounded),
      d_lse_ref(DType::kFloat32, lse), workspace(DType::kFloat32, WorkspaceFloats(s));
  HOIST_ASSERT_OK(GqaAttentionBackwardTiled(
      d_dqkv.data(), d_dout.data(), d_qkv.data(), d_out_ref.data(), d_lse_ref.as<float>(),
      workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd, {}, type, stream()));
  std::vector<float> dqkv = dqkv0;
  cpu::AttentionBackwardTiledGqa(dqkv.data(), dout.data(), qkv.data(), out_rounded.data(),
                                 lse.data(), s.B, s.T, s.NH, s.NKV, s.hd);
  ExpectCloseToScale(d_dqkv.Download(), dqkv, ToleranceFor(type), "dqkv");
}

// fp32: the direct path's products are true fp32, as the CPU's.
TEST_P(CudaGqaAttention, DirectMatchesCpuInFp32) {
  if (GetParam() != DType::kFloat32) GTEST_SKIP() << "16-bit: see DirectIsMultiHeadOverRepeatedKv";
  const DType type = DType::kFloat32;
  const GqaShape s = kGqa;
  const auto qkv = RandomFloats(s.qkv(), 21), dout = RandomFloats(s.out(), 22),
             dqkv0 = RandomFloats(s.qkv(), 23);
  DeviceArray d_qkv(type, qkv), d_out(type, s.out()), d_att(type, s.att()),
      workspace(type, WorkspaceFloats(s));
  d_out.Poison();
  d_att.Poison();
  HOIST_ASSERT_OK(GqaAttentionForward(*blas_, d_out.data(), d_att.as<float>(), d_qkv.data(),
                                      workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd, {}, type,
                                      stream()));
  std::vector<float> out(s.out()), att(s.att());
  cpu::AttentionForwardGqa(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd);
  ExpectCloseToScale(d_out.Download(), out, ToleranceFor(type), "out");
  ExpectCloseToScale(d_att.Download(), att, ToleranceFor(type), "att");
  DeviceArray d_dout(type, dout), d_dqkv(type, dqkv0), d_att_ref(type, att);
  HOIST_ASSERT_OK(GqaAttentionBackward(*blas_, d_dqkv.data(), d_dout.data(), d_qkv.data(),
                                       d_att_ref.as<float>(), workspace.data(), s.B, s.T, s.NH,
                                       s.NKV, s.hd, {}, type, stream()));
  std::vector<float> dqkv = dqkv0;
  cpu::AttentionBackwardGqa(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH, s.NKV,
                            s.hd);
  ExpectCloseToScale(d_dqkv.Download(), dqkv, ToleranceFor(type), "dqkv");
}

// Every type: the grouped forward is the GPU's multi-head forward over the repeated heads, bit for
// bit (the same head arrays reach the same products); the backward's shared-head gradient is the
// sum over the group of the multi-head gradients, which here are each rounded to `type` once
// more: (group + 1) roundings apart, bounded by the dtype's rtol times the largest value.
TEST_P(CudaGqaAttention, DirectIsMultiHeadOverRepeatedKv) {
  const DType type = GetParam();
  const GqaShape s = kGqa;
  const int C = s.NH * s.hd, group = s.NH / s.NKV;
  const GqaShape mha = {s.B, s.T, s.NH, s.NH, s.hd};
  const auto qkv = RandomFloats(s.qkv(), 31), dout = RandomFloats(s.out(), 32);
  const auto rep = RepeatKv(qkv, s);
  DeviceArray d_qkv(type, qkv), d_rep(type, rep), d_dout(type, dout);
  DeviceArray out(type, s.out()), rep_out(type, s.out()), att(DType::kFloat32, s.att()),
      rep_att(DType::kFloat32, s.att()), workspace(DType::kFloat32, WorkspaceFloats(s));
  HOIST_ASSERT_OK(GqaAttentionForward(*blas_, out.data(), att.as<float>(), d_qkv.data(),
                                      workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd, {}, type,
                                      stream()));
  HOIST_ASSERT_OK(AttentionForward(*blas_, rep_out.data(), rep_att.as<float>(), d_rep.data(),
                                   workspace.data(), s.B, s.T, C, s.NH, type, stream()));
  EXPECT_TRUE(SameBits(out.Download(), rep_out.Download()));
  EXPECT_TRUE(SameBits(att.Download(), rep_att.Download()));

  DeviceArray dqkv(type, std::vector<float>(s.qkv(), 0.0f)),
      rep_dqkv(type, std::vector<float>(mha.qkv(), 0.0f));
  HOIST_ASSERT_OK(GqaAttentionBackward(*blas_, dqkv.data(), d_dout.data(), d_qkv.data(),
                                       att.as<float>(), workspace.data(), s.B, s.T, s.NH, s.NKV,
                                       s.hd, {}, type, stream()));
  HOIST_ASSERT_OK(AttentionBackward(*blas_, rep_dqkv.data(), d_dout.data(), d_rep.data(),
                                    rep_att.as<float>(), workspace.data(), s.B, s.T, C, s.NH, type,
                                    stream()));
  const std::vector<float> got = dqkv.Download(), rep_got = rep_dqkv.Download();
  std::vector<float> folded(s.qkv(), 0.0f);
  const int w = (s.NH + 2 * s.NKV) * s.hd;
  for (int r = 0; r < s.B * s.T; ++r) {
    const float* src = rep_got.data() + size_t{1} * r * 3 * C;
    float* dst = folded.data() + size_t{1} * r * w;
    for (int c = 0; c < C; ++c) dst[c] = src[c];
    for (int h = 0; h < s.NH; ++h) {
      for (int d = 0; d < s.hd; ++d) {
        dst[C + (h / group) * s.hd + d] += src[C + h * s.hd + d];
        dst[C + s.NKV * s.hd + (h / group) * s.hd + d] += src[2 * C + h * s.hd + d];
      }
    }
  }
  const Tolerance tol = ToleranceFor(type);
  ExpectCloseToScale(got, folded, tol, "dqkv", tol.rtol);
}

// NKV == NH: the grouped entries are the multi-head ones, kernel for kernel: the same bits.
TEST_P(CudaGqaAttention, EqualHeadCountsAreMultiHeadBitForBit) {
  const DType type = GetParam();
  const GqaShape s = {2, 67, 4, 4, 16};
  const int C = s.NH * s.hd;
  const auto qkv = RandomFloats(s.qkv(), 41), dout = RandomFloats(s.out(), 42),
             dqkv0 = RandomFloats(s.qkv(), 43);
  DeviceArray d_qkv(type, qkv), d_dout(type, dout), workspace(DType::kFloat32, WorkspaceFloats(s));
  for (const bool tiled : {false, true}) {
    SCOPED_TRACE(tiled ? "tiled" : "direct");
    DeviceArray out(type, s.out()), mha_out(type, s.out());
    DeviceArray saved(DType::kFloat32, tiled ? s.lse() : s.att()),
        mha_saved(DType::kFloat32, tiled ? s.lse() : s.att());
    DeviceArray dqkv(type, dqkv0), mha_dqkv(type, dqkv0);
    if (tiled) {
      HOIST_ASSERT_OK(GqaAttentionForwardTiled(out.data(), saved.as<float>(), d_qkv.data(), s.B,
                                               s.T, s.NH, s.NKV, s.hd, {}, type, stream()));
      HOIST_ASSERT_OK(AttentionForwardTiled(mha_out.data(), mha_saved.as<float>(), d_qkv.data(),
                                            s.B, s.T, C, s.NH, type, stream()));
      HOIST_ASSERT_OK(GqaAttentionBackwardTiled(dqkv.data(), d_dout.data(), d_qkv.data(),
                                                out.data(), saved.as<float>(), workspace.data(),
                                                s.B, s.T, s.NH, s.NKV, s.hd, {}, type, stream()));
      HOIST_ASSERT_OK(AttentionBackwardTiled(mha_dqkv.data(), d_dout.data(), d_qkv.data(),
                                             mha_out.data(), mha_saved.as<float>(),
                                             workspace.data(), s.B, s.T, C, s.NH, type, stream()));
    } else {
      HOIST_ASSERT_OK(GqaAttentionForward(*blas_, out.data(), saved.as<float>(), d_qkv.data(),
                                          workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd, {}, type,
                                          stream()));
      HOIST_ASSERT_OK(AttentionForward(*blas_, mha_out.data(), mha_saved.as<float>(), d_qkv.data(),
                                       workspace.data(), s.B, s.T, C, s.NH, type, stream()));
      HOIST_ASSERT_OK(GqaAttentionBackward(*blas_, dqkv.data(), d_dout.data(), d_qkv.data(),
                                           saved.as<float>(), workspace.data(), s.B, s.T, s.NH,
                                           s.NKV, s.hd, {}, type, stream()));
      HOIST_ASSERT_OK(AttentionBackward(*blas_, mha_dqkv.data(), d_dout.data(), d_qkv.data(),
                                        mha_saved.as<float>(), workspace.data(), s.B, s.T, C, s.NH,
                                        type, stream()));
    }
    EXPECT_TRUE(SameBits(out.Download(), mha_out.Download()));
    EXPECT_TRUE(SameBits(saved.Download(), mha_saved.Download()));
    EXPECT_TRUE(SameBits(dqkv.Download(), mha_dqkv.Download()));
  }
}

TEST_P(CudaGqaAttention, RefusesHeadCountsThatDoNotGroup) {
  const DType type = GetParam();
  DeviceArray a(type, 256), f(DType::kFloat32, 256);
  EXPECT_EQ(
      GqaAttentionForwardTiled(a.data(), f.as<float>(), a.data(), 1, 2, 6, 4, 8, {}, type, stream())
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(GqaAttentionForward(*blas_, a.data(), f.as<float>(), a.data(), f.data(), 1, 2, 6, 4, 8,
                                {}, type, stream())
                .code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaGqaAttention,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         DTypeParamName);

}  // namespace
}  // namespace hoist::kernels::cuda
