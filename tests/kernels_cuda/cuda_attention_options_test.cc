// The attention options (kernels/attention_options.h) on the CUDA grouped-query attention
// (kernels/cuda/attention.h) against the CPU twins with the same options on the same inputs
// rounded to the type: the tiled kernels in every type and the direct path in fp32 over the
// options' grid (windows 1, 3, T-1, T, T+5; softcaps; scales), the direct path in 16 bits on its
// tensor-core products; windows of T or more give the plain kernels' bits; key tiles outside
// every window are never read; bad options are refused naming the option.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention_options.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/workspace.h"
#include "tests/kernels/attention_options_test_util.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using kernels::testing::AttentionOptionGrid;
using kernels::testing::Describe;
using testing::CudaKernelTest;
using testing::DeviceArray;
using testing::DTypeParamName;
using testing::RandomFloats;
using testing::RoundTo;
using testing::Tolerance;
using testing::ToleranceFor;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |got - ref| <= atol + rtol |ref| + order_eps * max|ref|: the dtype's rounding of each output
// plus fp32 sums taken in another order than the CPU's, which scale with the largest value (as in
// cuda_llama_test.cc). The GPU's tanhf and the CPU's TanhApprox (1e-7 absolute) are a part in 1e7
// of the softcap apart, inside the fp32 order term.
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

struct Shape {
  int B, T, NH, NKV, hd;
  size_t qkv() const { return size_t{1} * B * T * (NH + 2 * NKV) * hd; }
  size_t out() const { return size_t{1} * B * T * NH * hd; }
  size_t att() const { return size_t{1} * B * NH * T * T; }
  size_t lse() const { return size_t{1} * B * NH * T; }
};

// T = 67: partial 32-row tiles, no multiple of the CPU's tiles; groups of 3 query heads.
constexpr Shape kShape = {2, 67, 6, 2, 16};

class CudaAttentionOptions : public CudaKernelTest, public ::testing::WithParamInterface<DType> {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    StatusOr<std::unique_ptr<BlasHandle>> blas = BlasHandle::Create();
    ASSERT_TRUE(blas.ok()) << blas.status().ToString();
    blas_ = std::move(*blas);
  }
  size_t WorkspaceFloats(const Shape& s) const {
    return static_cast<size_t>(
               std::max(GqaAttentionWorkspaceBytes(s.B, s.T, s.NH, s.NKV, s.hd, GetParam()),
                        TiledAttentionBackwardWorkspaceBytes(s.B, s.T, s.NH))) /
           sizeof(float);
  }
  std::unique_ptr<BlasHandle> blas_;
};

// The tiled kernels keep P and dS in fp32, as the CPU twin: the dtype's rounding of each output.
TEST_P(CudaAttentionOptions, TiledMatchesCpu) {
  const DType type = GetParam();
  const Shape s = kShape;
  const auto qkv = RoundTo(type, RandomFloats(s.qkv(), 61, -2.0f, 2.0f));
  const auto dout = RoundTo(type, RandomFloats(s.out(), 62));
  const auto dqkv0 = RoundTo(type, RandomFloats(s.qkv(), 63));
  DeviceArray d_qkv(type, qkv), d_dout(type, dout), workspace(DType::kFloat32, WorkspaceFloats(s));
  for (const AttentionOptions& options : AttentionOptionGrid(s.T)) {
    SCOPED_TRACE(Describe(options));
    DeviceArray d_out(type, s.out()), d_lse(DType::kFloat32, s.lse());
    d_out.Poison();
    d_lse.Poison();
    HOIST_ASSERT_OK(GqaAttentionForwardTiled(d_out.data(), d_lse.as<float>(), d_qkv.data(), s.B,
                                             s.T, s.NH, s.NKV, s.hd, options, type, stream()));
    std::vector<float> out(s.out()), lse(s.lse());
    cpu::AttentionForwardTiledGqa(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                                  options);
    ExpectCloseToScale(d_out.Download(), out, ToleranceFor(type), "out");
    ExpectCloseToScale(d_lse.Download(), lse, ToleranceFor(DType::kFloat32), "lse");

    // Both backwards from the CPU's out (rounded to the type) and lse.
    const auto out_rounded = RoundTo(type, out);
    DeviceArray d_dqkv(type, dqkv0), d_out_ref(type, out_rounded), d_lse_ref(DType::kFloat32, lse);
    HOIST_ASSERT_OK(GqaAttentionBackwardTiled(
        d_dqkv.data(), d_dout.data(), d_qkv.data(), d_out_ref.data(), d_lse_ref.as<float>(),
        workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd, options, type, stream()));
    std::vector<float> dqkv = dqkv0;
    cpu::AttentionBackwardTiledGqa(dqkv.data(), dout.data(), qkv.data(), out_rounded.data(),
                                   lse.data(), s.B, s.T, s.NH, s.NKV, s.hd, options);
    ExpectCloseToScale(d_dqkv.Download(), dqkv, ToleranceFor(type), "dqkv");
  }
}

// The direct path: fp32's products are true fp32, as the CPU's, so every output agrees to fp32's
// order of sums. 16-bit types multiply on the tensor cores with P and dS rounded to the type (the
// CPU twin keeps them fp32): att, fp32 in both, agrees as fp32 does; out and dqkv differ by those
// roundings, up to some of the type's rtol of the largest value where terms cancel.
TEST_P(CudaAttentionOptions, DirectMatchesCpu) {
  const DType type = GetParam();
  const bool fp32 = type == DType::kFloat32;
  const Shape s = kShape;
  const auto qkv = RoundTo(type, RandomFloats(s.qkv(), 71, -2.0f, 2.0f));
  const auto dout = RoundTo(type, RandomFloats(s.out(), 72));
  const auto dqkv0 = RoundTo(type, RandomFloats(s.qkv(), 73));
  const Tolerance tol = ToleranceFor(type);
  const double order_eps = fp32 ? 1e-5 : 4 * tol.rtol;
  DeviceArray d_qkv(type, qkv), d_dout(type, dout), workspace(DType::kFloat32, WorkspaceFloats(s));
  for (const AttentionOptions& options : AttentionOptionGrid(s.T)) {
    SCOPED_TRACE(Describe(options));
    DeviceArray d_out(type, s.out()), d_att(DType::kFloat32, s.att());
    d_out.Poison();
    d_att.Poison();
    HOIST_ASSERT_OK(GqaAttentionForward(*blas_, d_out.data(), d_att.as<float>(), d_qkv.data(),
                                        workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd, options,
                                        type, stream()));
    std::vector<float> out(s.out()), att(s.att());
    cpu::AttentionForwardGqa(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                             options);
    ExpectCloseToScale(d_out.Download(), out, tol, "out", order_eps);
    const std::vector<float> got_att = d_att.Download();
    ExpectCloseToScale(got_att, att, ToleranceFor(DType::kFloat32), "att");
    for (size_t i = 0; i < att.size(); ++i) {
      if (att[i] == 0.0f) {
        EXPECT_EQ(got_att[i], 0.0f) << "att[" << i << "] outside the window";
      }
    }

    DeviceArray d_dqkv(type, dqkv0), d_att_ref(DType::kFloat32, att);
    HOIST_ASSERT_OK(GqaAttentionBackward(*blas_, d_dqkv.data(), d_dout.data(), d_qkv.data(),
                                         d_att_ref.as<float>(), workspace.data(), s.B, s.T, s.NH,
                                         s.NKV, s.hd, options, type, stream()));
    std::vector<float> dqkv = dqkv0;
    cpu::AttentionBackwardGqa(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH,
                              s.NKV, s.hd, options);
    ExpectCloseToScale(d_dqkv.Download(), dqkv, tol, "dqkv", order_eps);
  }
}

// Windows of T or more are no window: the same kernels' bits as window 0, direct and tiled,
// with and without a softcap.
TEST_P(CudaAttentionOptions, WindowOfAtLeastTIsTheFullCausalResultBitForBit) {
  const DType type = GetParam();
  const Shape s = kShape;
  const auto qkv = RandomFloats(s.qkv(), 81, -2.0f, 2.0f), dout = RandomFloats(s.out(), 82),
             dqkv0 = RandomFloats(s.qkv(), 83);
  DeviceArray d_qkv(type, qkv), d_dout(type, dout), workspace(DType::kFloat32, WorkspaceFloats(s));
  // Runs the four ops with `options`; returns out, att, dqkv (direct) then out, lse, dqkv (tiled).
  const auto run = [&](const AttentionOptions& options) {
    std::vector<std::vector<float>> results;
    DeviceArray out(type, s.out()), att(DType::kFloat32, s.att()), dqkv(type, dqkv0);
    EXPECT_TRUE(GqaAttentionForward(*blas_, out.data(), att.as<float>(), d_qkv.data(),
                                    workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd, options, type,
                                    stream())
                    .ok());
    EXPECT_TRUE(GqaAttentionBackward(*blas_, dqkv.data(), d_dout.data(), d_qkv.data(),
                                     att.as<float>(), workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                                     options, type, stream())
                    .ok());
    results.push_back(out.Download());
    results.push_back(att.Download());
    results.push_back(dqkv.Download());
    DeviceArray tout(type, s.out()), lse(DType::kFloat32, s.lse()), tdqkv(type, dqkv0);
    EXPECT_TRUE(GqaAttentionForwardTiled(tout.data(), lse.as<float>(), d_qkv.data(), s.B, s.T, s.NH,
                                         s.NKV, s.hd, options, type, stream())
                    .ok());
    EXPECT_TRUE(GqaAttentionBackwardTiled(tdqkv.data(), d_dout.data(), d_qkv.data(), tout.data(),
                                          lse.as<float>(), workspace.data(), s.B, s.T, s.NH, s.NKV,
                                          s.hd, options, type, stream())
                    .ok());
    results.push_back(tout.Download());
    results.push_back(lse.Download());
    results.push_back(tdqkv.Download());
    return results;
  };
  for (const int window : {s.T, s.T + 5, INT_MAX}) {
    for (const float softcap : {0.0f, 0.7f}) {
      const AttentionOptions plain{0.0f, 0, softcap}, windowed{0.0f, window, softcap};
      SCOPED_TRACE(Describe(windowed));
      const auto want = run(plain), got = run(windowed);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(SameBits(got[i], want[i])) << i;
    }
  }
}

// Keys outside every window of a query tile are never read: values of +inf there would make NaN
// of the masked zeros. Window 10, 32-row tiles: query tiles from row 64 on start at key 55, in
// the tile from 32, so values of +inf before key 32 leave their rows as on clean inputs; dout of
// +inf from row 96 on leaves dk and dv of keys [0, 64) so (key tile k0's queries end before
// k0 + 41, inside the query tile that starts at k0 + 32).
TEST_P(CudaAttentionOptions, TiledSkipsTilesOutsideEveryWindow) {
  const DType type = GetParam();
  const Shape s = {1, 128, 2, 1, 16};
  const int w = (s.NH + 2 * s.NKV) * s.hd, c = s.NH * s.hd;
  const AttentionOptions options{0.0f, 10, 0.0f};
  const float inf = std::numeric_limits<float>::infinity();
  const auto qkv = RandomFloats(s.qkv(), 91), dout = RandomFloats(s.out(), 92);
  auto poisoned = qkv, poisoned_dout = dout;
  for (int j = 0; j < 32; ++j) {
    for (int i = 0; i < s.NKV * s.hd; ++i) poisoned[size_t(j) * w + c + s.NKV * s.hd + i] = inf;
  }
  for (size_t i = size_t(96) * c; i < dout.size(); ++i) poisoned_dout[i] = inf;
  DeviceArray d_qkv(type, qkv), d_poisoned(type, poisoned), d_dout(type, dout),
      d_poisoned_dout(type, poisoned_dout), workspace(DType::kFloat32, WorkspaceFloats(s));
  DeviceArray out(type, s.out()), out_p(type, s.out()), lse(DType::kFloat32, s.lse()),
      lse_p(DType::kFloat32, s.lse());
  HOIST_ASSERT_OK(GqaAttentionForwardTiled(out.data(), lse.as<float>(), d_qkv.data(), s.B, s.T,
                                           s.NH, s.NKV, s.hd, options, type, stream()));
  HOIST_ASSERT_OK(GqaAttentionForwardTiled(out_p.data(), lse_p.as<float>(), d_poisoned.data(), s.B,
                                           s.T, s.NH, s.NKV, s.hd, options, type, stream()));
  const std::vector<float> clean = out.Download(), dirty = out_p.Download();
  EXPECT_TRUE(std::equal(clean.begin() + 64 * c, clean.end(), dirty.begin() + 64 * c));

  DeviceArray dqkv(type, std::vector<float>(s.qkv(), 0.0f)),
      dqkv_p(type, std::vector<float>(s.qkv(), 0.0f));
  HOIST_ASSERT_OK(GqaAttentionBackwardTiled(dqkv.data(), d_dout.data(), d_qkv.data(), out.data(),
                                            lse.as<float>(), workspace.data(), s.B, s.T, s.NH,
                                            s.NKV, s.hd, options, type, stream()));
  HOIST_ASSERT_OK(GqaAttentionBackwardTiled(dqkv_p.data(), d_poisoned_dout.data(), d_qkv.data(),
                                            out.data(), lse.as<float>(), workspace.data(), s.B, s.T,
                                            s.NH, s.NKV, s.hd, options, type, stream()));
  const std::vector<float> grad = dqkv.Download(), grad_p = dqkv_p.Download();
  for (int j = 0; j < 64; ++j) {  // dk and dv of keys [0, 64)
    const size_t at = size_t(j) * w + c;
    EXPECT_TRUE(
        std::equal(grad.begin() + at, grad.begin() + at + 2 * s.NKV * s.hd, grad_p.begin() + at))
        << "key " << j;
  }
}

// A negative window, or a scale or softcap that is negative, NaN or infinite: kInvalidArgument
// naming the op and the option, from each of the four entries.
TEST_P(CudaAttentionOptions, RefusesBadOptionsNamingTheOpAndTheOption) {
  const DType type = GetParam();
  const Shape s = {1, 4, 2, 1, 8};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const struct {
    AttentionOptions options;
    const char* name;
  } bad[] = {{{0.0f, -1, 0.0f}, "window"},  {{-0.5f, 0, 0.0f}, "scale"},
             {{nan, 0, 0.0f}, "scale"},     {{inf, 0, 0.0f}, "scale"},
             {{0.0f, 0, -1.0f}, "softcap"}, {{0.0f, 0, nan}, "softcap"},
             {{0.0f, 0, inf}, "softcap"}};
  DeviceArray qkv(type, s.qkv()), out(type, s.out()), saved(DType::kFloat32, s.att()),
      workspace(DType::kFloat32, WorkspaceFloats(s));
  const auto expect = [](const Status& status, const std::string& op, const std::string& name) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(op + ": attention option " + name), std::string::npos)
        << status.ToString();
  };
  for (const auto& [options, name] : bad) {
    expect(GqaAttentionForward(*blas_, out.data(), saved.as<float>(), qkv.data(), workspace.data(),
                               s.B, s.T, s.NH, s.NKV, s.hd, options, type, stream()),
           "GqaAttentionForward", name);
    expect(GqaAttentionBackward(*blas_, qkv.data(), out.data(), qkv.data(), saved.as<float>(),
                                workspace.data(), s.B, s.T, s.NH, s.NKV, s.hd, options, type,
                                stream()),
           "GqaAttentionBackward", name);
    expect(GqaAttentionForwardTiled(out.data(), saved.as<float>(), qkv.data(), s.B, s.T, s.NH,
                                    s.NKV, s.hd, options, type, stream()),
           "GqaAttentionForwardTiled", name);
    expect(GqaAttentionBackwardTiled(qkv.data(), out.data(), qkv.data(), out.data(),
                                     saved.as<float>(), workspace.data(), s.B, s.T, s.NH, s.NKV,
                                     s.hd, options, type, stream()),
           "GqaAttentionBackwardTiled", name);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaAttentionOptions,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         DTypeParamName);

}  // namespace
}  // namespace hoist::kernels::cuda
