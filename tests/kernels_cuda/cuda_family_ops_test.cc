// The CUDA ops Qwen3 and Gemma 2 add to the Llama family's against their CPU twins: Gemma's
// RMSNorm and the per-head RMSNorm (kernels/cuda/llama.h), GeGLU (llama.h), the capped
// cross-entropy (cross_entropy.h), the scale and the standalone soft-cap (elementwise.h), in
// fp32, bf16 and fp16. Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/llama.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::DeviceArray;
using testing::DeviceInts;
using testing::DTypeParamName;
using testing::ExpectAllClose;
using testing::RandomFloats;
using testing::RoundTo;
using testing::Tolerance;
using testing::ToleranceFor;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaFamilyOps : public CudaKernelTest, public ::testing::WithParamInterface<DType> {};

// C = 200: a partial last 32-wide lane pass; N = 300 spans several row chunks of dweight.
TEST_P(CudaFamilyOps, GemmaRmsNormMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  constexpr int N = 300, C = 200;
  const size_t n = size_t{1} * N * C;
  const auto inp = RoundTo(type, RandomFloats(n, 1, -2.0f, 2.0f));
  const auto weight = RoundTo(type, RandomFloats(C, 2, -0.5f, 0.5f));
  const auto dout = RoundTo(type, RandomFloats(n, 3));
  std::vector<float> want(n), want_rstd(N);
  cpu::RmsNormForward(want.data(), want_rstd.data(), inp.data(), weight.data(), N, C, 1e-6f, type,
                      RmsNormStyle::kGemma);
  DeviceArray d_inp(type, inp), d_weight(type, weight), d_out(type, n), d_rstd(DType::kFloat32, N);
  d_out.Poison();
  d_rstd.Poison();
  HOIST_ASSERT_OK(RmsNormForward(d_out.data(), d_rstd.as<float>(), d_inp.data(), d_weight.data(), N,
                                 C, 1e-6f, RmsNormStyle::kGemma, type, stream()));
  ExpectAllClose(d_out.Download(), RoundTo(type, want), tol.atol, tol.rtol, "out");
  const Tolerance f32 = ToleranceFor(DType::kFloat32);
  ExpectAllClose(d_rstd.Download(), want_rstd, f32.atol, f32.rtol, "rstd");

  std::vector<float> want_dinp = RoundTo(type, RandomFloats(n, 4)), want_dw = RandomFloats(C, 5);
  DeviceArray d_dinp(type, want_dinp), d_dw(DType::kFloat32, want_dw), d_dout(type, dout),
      d_rstd_ref(DType::kFloat32, want_rstd);
  cpu::RmsNormBackward(want_dinp.data(), want_dw.data(), dout.data(), inp.data(), weight.data(),
                       want_rstd.data(), N, C, RmsNormStyle::kGemma);
  HOIST_ASSERT_OK(RmsNormBackward(d_dinp.data(), d_dw.as<float>(), d_dout.data(), d_inp.data(),
                                  d_weight.data(), d_rstd_ref.as<float>(), N, C,
                                  RmsNormStyle::kGemma, type, stream()));
  ExpectAllClose(d_dinp.Download(), RoundTo(type, want_dinp), tol.atol, tol.rtol, "dinp");
  ExpectAllClose(d_dw.Download(), want_dw, 1e-4, 1e-4, "dweight");  // fp32 sums in another order
}

// Qwen3's shape of heads (hd 128, 2 query heads per key/value head) over rows enough for several
// chunks of the weights' gradients; both styles. The value heads are copied and their gradient
// passed through: the same bits as the CPU's.
TEST_P(CudaFamilyOps, HeadRmsNormMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  constexpr int N = 130, NH = 4, NKV = 2, hd = 128, width = (NH + 2 * NKV) * hd;
  const size_t n = size_t{1} * N * width, heads = size_t{1} * N * (NH + NKV);
  const auto inp = RoundTo(type, RandomFloats(n, 6, -2.0f, 2.0f));
  const auto qw = RoundTo(type, RandomFloats(hd, 7, 0.5f, 1.5f));
  const auto kw = RoundTo(type, RandomFloats(hd, 8, 0.5f, 1.5f));
  const auto dout = RoundTo(type, RandomFloats(n, 9));
  const auto dinp0 = RoundTo(type, RandomFloats(n, 10));
  for (const RmsNormStyle style : {RmsNormStyle::kLlama, RmsNormStyle::kGemma}) {
    SCOPED_TRACE(style == RmsNormStyle::kLlama ? "llama" : "gemma");
    std::vector<float> want(n), want_rstd(heads);
    cpu::HeadRmsNormForward(want.data(), want_rstd.data(), inp.data(), qw.data(), kw.data(), N, NH,
                            NKV, hd, 1e-6f, type, style);
    DeviceArray d_inp(type, inp), d_qw(type, qw), d_kw(type, kw), d_out(type, n),
        d_rstd(DType::kFloat32, heads);
    d_out.Poison();
    d_rstd.Poison();
    HOIST_ASSERT_OK(HeadRmsNormForward(d_out.data(), d_rstd.as<float>(), d_inp.data(), d_qw.data(),
                                       d_kw.data(), N, NH, NKV, hd, 1e-6f, style, type, stream()));
    const std::vector<float> got = d_out.Download();
    ExpectAllClose(got, RoundTo(type, want), tol.atol, tol.rtol, "out");
    const Tolerance f32 = ToleranceFor(DType::kFloat32);
    ExpectAllClose(d_rstd.Download(), want_rstd, f32.atol, f32.rtol, "rstd");
    for (int i = 0; i < N; ++i) {
      const size_t v = size_t{1} * i * width + (NH + NKV) * hd;
      EXPECT_EQ(std::memcmp(&got[v], &inp[v], NKV * hd * sizeof(float)), 0) << "value heads " << i;
    }

    std::vector<float> want_dinp = dinp0, want_dq(hd, 0.5f), want_dk(hd, -0.5f);
    cpu::HeadRmsNormBackward(want_dinp.data(), want_dq.data(), want_dk.data(), dout.data(),
                             inp.data(), qw.data(), kw.data(), want_rstd.data(), N, NH, NKV, hd,
                             style);
    DeviceArray d_dinp(type, dinp0), d_frozen(type, dinp0), d_dout(type, dout),
        d_dq(DType::kFloat32, std::vector<float>(hd, 0.5f)),
        d_dk(DType::kFloat32, std::vector<float>(hd, -0.5f)),
        d_rstd_ref(DType::kFloat32, want_rstd);
    HOIST_ASSERT_OK(HeadRmsNormBackward(
        d_dinp.data(), d_dq.as<float>(), d_dk.as<float>(), d_dout.data(), d_inp.data(), d_qw.data(),
        d_kw.data(), d_rstd_ref.as<float>(), N, NH, NKV, hd, style, type, stream()));
    HOIST_ASSERT_OK(HeadRmsNormBackward(
        d_frozen.data(), nullptr, nullptr, d_dout.data(), d_inp.data(), d_qw.data(), d_kw.data(),
        d_rstd_ref.as<float>(), N, NH, NKV, hd, style, type, stream()));
    const std::vector<float> dinp = d_dinp.Download();
    ExpectAllClose(dinp, RoundTo(type, want_dinp), tol.atol, tol.rtol, "dinp");
    EXPECT_TRUE(SameBits(d_frozen.Download(), dinp)) << "frozen weights: the same dinp";
    for (int i = 0; i < N; ++i) {  // dout added to the value heads: the CPU's one rounding
      const size_t v = size_t{1} * i * width + (NH + NKV) * hd;
      const std::vector<float> got_v(dinp.begin() + v, dinp.begin() + v + NKV * hd);
      const std::vector<float> want_v(want_dinp.begin() + v, want_dinp.begin() + v + NKV * hd);
      EXPECT_TRUE(SameBits(got_v, RoundTo(type, want_v))) << "value heads " << i;
    }
    ExpectAllClose(d_dq.Download(), want_dq, 1e-4, 1e-4, "dq_weight");
    ExpectAllClose(d_dk.Download(), want_dk, 1e-4, 1e-4, "dk_weight");
  }
}

TEST_P(CudaFamilyOps, GeGluMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  constexpr int N = 45, I = 173;
  const auto inp = RoundTo(type, RandomFloats(size_t{N} * 2 * I, 11, -5.0f, 5.0f));
  const auto dout = RoundTo(type, RandomFloats(size_t{N} * I, 12));
  std::vector<float> want(size_t{N} * I), want_dinp = RoundTo(type, RandomFloats(inp.size(), 13));
  DeviceArray d_inp(type, inp), d_out(type, want.size()), d_dout(type, dout),
      d_dinp(type, want_dinp);
  d_out.Poison();
  cpu::GluForward(want.data(), inp.data(), N, I, GluActivation::kGeluTanh);
  cpu::GluBackward(want_dinp.data(), inp.data(), dout.data(), N, I, GluActivation::kGeluTanh);
  HOIST_ASSERT_OK(
      GluForward(d_out.data(), d_inp.data(), N, I, GluActivation::kGeluTanh, type, stream()));
  HOIST_ASSERT_OK(GluBackward(d_dinp.data(), d_inp.data(), d_dout.data(), N, I,
                              GluActivation::kGeluTanh, type, stream()));
  ExpectAllClose(d_out.Download(), RoundTo(type, want), tol.atol, tol.rtol, "out");
  ExpectAllClose(d_dinp.Download(), RoundTo(type, want_dinp), tol.atol, tol.rtol, "dinp");
}

std::vector<int32_t> RandomTargets(int N, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> targets(N);
  for (int32_t& t : targets) t = dist(rng);
  return targets;
}

// Gemma 2's cap (30) on logits beyond it, in both kernels (Vp a multiple of the 16-byte vector, and
// not), apart and in place.
TEST_P(CudaFamilyOps, CappedCrossEntropyMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  const Tolerance f32 = ToleranceFor(DType::kFloat32);
  constexpr float kCap = 30.0f, kDloss = 0.5f;
  struct Shape {
    int N, V, Vp;
  };
  for (const Shape& s : {Shape{37, 1001, 1024}, Shape{6, 29, 30}}) {
    SCOPED_TRACE(s.Vp);
    const size_t n = size_t{1} * s.N * s.Vp;
    const auto logits = RoundTo(type, RandomFloats(n, 14, -60.0f, 60.0f));
    const std::vector<int32_t> targets = RandomTargets(s.N, s.V, 15);
    std::vector<float> want_losses(s.N), want_d(n);
    cpu::SoftmaxCrossEntropy(want_losses.data(), want_d.data(), logits.data(), targets.data(),
                             kDloss, s.N, s.V, s.Vp, kCap);
    DeviceInts d_targets(targets);
    DeviceArray d_logits(type, logits), d_d(type, n), d_losses(DType::kFloat32, s.N),
        d_in_place(type, logits), d_losses_in_place(DType::kFloat32, s.N);
    d_d.Poison();
    HOIST_ASSERT_OK(SoftmaxCrossEntropy(d_losses.as<float>(), d_d.data(), d_logits.data(),
                                        d_targets.data(), kDloss, s.N, s.V, s.Vp, kCap, type,
                                        stream()));
    HOIST_ASSERT_OK(SoftmaxCrossEntropy(d_losses_in_place.as<float>(), d_in_place.data(),
                                        d_in_place.data(), d_targets.data(), kDloss, s.N, s.V, s.Vp,
                                        kCap, type, stream()));
    ExpectAllClose(d_losses.Download(), want_losses, f32.atol, f32.rtol, "losses");
    // Gradients about dloss / V off the target: one rounding of the type, fp16's subnormals.
    const double atol = type == DType::kFloat16 ? 6e-8 : 1e-8;
    ExpectAllClose(d_d.Download(), RoundTo(type, want_d), atol, tol.rtol, "dlogits");
    EXPECT_TRUE(SameBits(d_in_place.Download(), d_d.Download())) << "in place";
    EXPECT_TRUE(SameBits(d_losses_in_place.Download(), d_losses.Download())) << "in place";
  }
}

// The product in fp32 rounded once, as on the CPU: the same bits.
TEST_P(CudaFamilyOps, ScaleIsTheCpusBitForBit) {
  const DType type = GetParam();
  constexpr int64_t n = 100003;  // a tail after the 16-byte packs
  const auto x = RoundTo(type, RandomFloats(n, 16, -3.0f, 3.0f));
  const float scale = 45.25f;
  std::vector<float> want(n);
  cpu::Scale(want.data(), x.data(), n, scale);
  DeviceArray d_x(type, x), d_out(type, n), d_in_place(type, x);
  d_out.Poison();
  HOIST_ASSERT_OK(Scale(d_out.data(), d_x.data(), n, scale, type, stream()));
  HOIST_ASSERT_OK(Scale(d_in_place.data(), d_in_place.data(), n, scale, type, stream()));
  EXPECT_TRUE(SameBits(d_out.Download(), RoundTo(type, want)));
  EXPECT_TRUE(SameBits(d_in_place.Download(), RoundTo(type, want)));
}

TEST_P(CudaFamilyOps, SoftcapForwardMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  constexpr int64_t n = 100003;
  const auto x = RoundTo(type, RandomFloats(n, 17, -100.0f, 100.0f));
  std::vector<float> want = x;
  cpu::SoftcapForward(want.data(), n, 30.0f);
  DeviceArray d_x(type, x), d_same(type, x);
  HOIST_ASSERT_OK(SoftcapForward(d_x.data(), n, 30.0f, type, stream()));
  HOIST_ASSERT_OK(SoftcapForward(d_same.data(), n, 0.0f, type, stream()));  // cap 0: nothing
  ExpectAllClose(d_x.Download(), RoundTo(type, want), tol.atol, tol.rtol, "capped");
  EXPECT_TRUE(SameBits(d_same.Download(), x));
}

TEST_P(CudaFamilyOps, RefusesBadArguments) {
  const DType type = GetParam();
  DeviceArray a(type, 4096), f(DType::kFloat32, 4096);
  const auto invalid = [](const Status& status) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  };
  // out over inp: the model keeps inp for backward.
  invalid(HeadRmsNormForward(a.data(), f.as<float>(), a.data(), f.data(), f.data(), 2, 4, 2, 8,
                             1e-6f, RmsNormStyle::kLlama, type, stream()));
  invalid(HeadRmsNormForward(f.data(), f.as<float>(), a.data(), f.data(), nullptr, 2, 4, 2, 8,
                             1e-6f, RmsNormStyle::kLlama, type, stream()));
  invalid(HeadRmsNormBackward(a.data(), nullptr, nullptr, a.data(), a.data(), f.data(), f.data(),
                              f.as<float>(), 2, 4, 0, 8, RmsNormStyle::kLlama, type, stream()));
  invalid(HeadRmsNormForward(f.data(), f.as<float>(), a.data(), f.data(), f.data(), 1 << 30, 4, 2,
                             8, 1e-6f, RmsNormStyle::kLlama, type, stream()));  // rows past int
  for (const float cap :
       {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    invalid(SoftmaxCrossEntropy(f.as<float>(), a.data(), a.data(), f.as<int32_t>(), 1.0f, 2, 10, 16,
                                cap, type, stream()));
    invalid(SoftcapForward(a.data(), 16, cap, type, stream()));
  }
  invalid(Scale(a.data(), a.data(), 16, std::numeric_limits<float>::quiet_NaN(), type, stream()));
  invalid(Scale(a.data(), nullptr, 16, 2.0f, type, stream()));
  invalid(GluForward(a.data(), a.data(), 2, 0, GluActivation::kGeluTanh, type, stream()));
  invalid(RmsNormForward(a.data(), f.as<float>(), a.data(), a.data(), 2, 4, -1.0f,
                         RmsNormStyle::kGemma, type, stream()));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaFamilyOps,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         DTypeParamName);

}  // namespace
}  // namespace hoist::kernels::cuda
