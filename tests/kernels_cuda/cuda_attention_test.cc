#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/blas.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::DeviceArray;
using testing::DTypeParamName;
using testing::RandomFloats;
using testing::RoundTo;
using testing::Tolerance;
using testing::ToleranceFor;

struct Shape {
  int B, T, C, NH;
  size_t qkv() const { return static_cast<size_t>(B) * T * 3 * C; }
  size_t out() const { return static_cast<size_t>(B) * T * C; }
  size_t att() const { return static_cast<size_t>(B) * NH * T * T; }
  size_t lse() const { return static_cast<size_t>(B) * NH * T; }
};

// hs = 16; T = 67 is not a multiple of the 32-row tiles, so every kernel sees a partial tile.
constexpr Shape kShape = {2, 67, 64, 4};

// |got - ref| <= atol + rtol |ref| + order_eps * max|ref| (+ rtol * magnitude[i] where given).
// The atol + rtol part is the dtype's one rounding of each output (ToleranceFor); the order_eps
// term is the fp32 arithmetic done in another order than the CPU's (sums over T and hs, exp and
// log evaluated differently), a few units of fp32 rounding times the sizes summed, so it scales
// with the largest magnitude in the output. `magnitude` is for the direct path's 16-bit operands,
// see AttentionMagnitudes.
void ExpectCloseToScale(const std::vector<float>& got, const std::vector<float>& ref, Tolerance tol,
                        const std::string& what, double order_eps = 1e-5,
                        const std::vector<double>& magnitude = {}) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_TRUE(magnitude.empty() || magnitude.size() == ref.size()) << what;
  double scale = 0.0;
  for (float r : ref) scale = std::max(scale, static_cast<double>(std::fabs(r)));
  int reported = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double bound = tol.atol + tol.rtol * std::fabs(ref[i]) + order_eps * scale +
                         (magnitude.empty() ? 0.0 : tol.rtol * magnitude[i]);
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i] << " (bound "
                    << bound << ")";
    }
  }
}

// In bf16/fp16 the direct path multiplies the probabilities P and dS = dL/dscores rounded once to
// the 16-bit type (the tensor cores take 16-bit operands), where the CPU twin multiplies them in
// fp32. Rounding x to 16 bits changes it by at most u|x| (u = 2^-8 for bf16, 2^-11 for fp16), so
// a sum of products with one rounded factor moves by at most u times the same sum over absolute
// values:
//   out[t,d]  by u sum_s P[t,s] |v[s,d]|        dv[s,d] by u sum_t P[t,s] |dout[t,d]|
//   dq[t,d]   by u sum_s |dS[t,s]| |k[s,d]|     dk[s,d] by u sum_t |dS[t,s]| |q[t,d]|
// These sums, computed here in double (B,T,C) for out and (B,T,3C) for dqkv, bound the extra
// error as rtol * sum with ToleranceFor's rtol (about 4u). The sums do not shrink with
// cancellation, which a relative bound on the result would need.
struct Magnitudes {
  std::vector<double> out, dqkv;
};

Magnitudes AttentionMagnitudes(const std::vector<float>& qkv, const std::vector<float>& dout,
                               const Shape& s) {
  const int T = s.T, C = s.C, C3 = 3 * s.C, hs = s.C / s.NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Magnitudes m{std::vector<double>(s.out(), 0.0), std::vector<double>(s.qkv(), 0.0)};
  std::vector<double> p(static_cast<size_t>(T) * T), ds(static_cast<size_t>(T) * T);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const auto q = [&](int t, int d) {
        return double{qkv[(static_cast<size_t>(b) * T + t) * C3 + h * hs + d]};
      };
      const auto k = [&](int t, int d) { return q(t, d + C); };
      const auto v = [&](int t, int d) { return q(t, d + 2 * C); };
      const auto g = [&](int t, int d) {
        return double{dout[(static_cast<size_t>(b) * T + t) * C + h * hs + d]};
      };
      for (int t = 0; t < T; ++t) {
        double* pt = &p[static_cast<size_t>(t) * T];
        double row_max = -INFINITY, sum = 0.0, dot = 0.0;
        for (int u = 0; u <= t; ++u) {
          double score = 0.0;
          for (int d = 0; d < hs; ++d) score += q(t, d) * k(u, d);
          pt[u] = score * scale;
          row_max = std::max(row_max, pt[u]);
        }
        for (int u = 0; u <= t; ++u) sum += (pt[u] = std::exp(pt[u] - row_max));
        for (int u = 0; u <= t; ++u) pt[u] /= sum;
        double* dst = &ds[static_cast<size_t>(t) * T];
        for (int u = 0; u <= t; ++u) {
          double dp = 0.0;
          for (int d = 0; d < hs; ++d) dp += g(t, d) * v(u, d);
          dst[u] = dp;
          dot += pt[u] * dp;
        }
        for (int u = 0; u <= t; ++u) dst[u] = std::fabs(scale * pt[u] * (dst[u] - dot));
      }
      for (int t = 0; t < T; ++t) {
        for (int u = 0; u <= t; ++u) {
          const double pu = p[static_cast<size_t>(t) * T + u],
                       du = ds[static_cast<size_t>(t) * T + u];
          for (int d = 0; d < hs; ++d) {
            m.out[(static_cast<size_t>(b) * T + t) * C + h * hs + d] += pu * std::fabs(v(u, d));
            double* dq = &m.dqkv[(static_cast<size_t>(b) * T + t) * C3 + h * hs + d];
            double* dk = &m.dqkv[(static_cast<size_t>(b) * T + u) * C3 + C + h * hs + d];
            double* dv = dk + C;
            *dq += du * std::fabs(k(u, d));
            *dk += du * std::fabs(q(t, d));
            *dv += pu * std::fabs(g(t, d));
          }
        }
      }
    }
  }
  return m;
}

class CudaAttention : public CudaKernelTest, public ::testing::WithParamInterface<DType> {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    StatusOr<std::unique_ptr<BlasHandle>> blas = BlasHandle::Create();
    ASSERT_TRUE(blas.ok()) << blas.status().ToString();
    blas_ = std::move(*blas);
  }

  void CheckDirect(const Shape& s) {
    const DType type = GetParam();
    const auto qkv = RoundTo(type, RandomFloats(s.qkv(), 41));
    const auto dout = RoundTo(type, RandomFloats(s.out(), 42));
    const auto dqkv0 = RoundTo(type, RandomFloats(s.qkv(), 43));
    DeviceArray d_qkv(type, qkv), d_out(type, s.out()), d_att(DType::kFloat32, s.att());
    const int64_t workspace_bytes = AttentionWorkspaceBytes(s.B, s.T, s.C, s.NH, type);
    DeviceArray workspace(DType::kFloat32, static_cast<size_t>(workspace_bytes) / sizeof(float));
    d_out.Poison();
    d_att.Poison();
    HOIST_ASSERT_OK(AttentionForward(*blas_, d_out.data(), d_att.as<float>(), d_qkv.data(),
                                     workspace.data(), s.B, s.T, s.C, s.NH, type, stream()));
    std::vector<float> out(s.out()), att(s.att());
    cpu::AttentionForward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    const Magnitudes magnitudes =
        type == DType::kFloat32 ? Magnitudes{} : AttentionMagnitudes(qkv, dout, s);
    ExpectCloseToScale(d_out.Download(), out, ToleranceFor(type), "out", 1e-5, magnitudes.out);
    // att stays fp32 for every type and is computed from the same (rounded) inputs.
    ExpectCloseToScale(d_att.Download(), att, ToleranceFor(DType::kFloat32), "att");

    // The backward from the CPU's att, so that it is checked on its own.
    DeviceArray d_dout(type, dout), d_dqkv(type, dqkv0), d_att_ref(DType::kFloat32, att);
    HOIST_ASSERT_OK(AttentionBackward(*blas_, d_dqkv.data(), d_dout.data(), d_qkv.data(),
                                      d_att_ref.as<float>(), workspace.data(), s.B, s.T, s.C, s.NH,
                                      type, stream()));
    std::vector<float> dqkv = dqkv0;
    cpu::AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
    ExpectCloseToScale(d_dqkv.Download(), dqkv, ToleranceFor(type), "dqkv", 1e-5, magnitudes.dqkv);
  }

  void CheckTiled(const Shape& s) {
    const DType type = GetParam();
    const auto qkv = RoundTo(type, RandomFloats(s.qkv(), 51));
    const auto dout = RoundTo(type, RandomFloats(s.out(), 52));
    const auto dqkv0 = RoundTo(type, RandomFloats(s.qkv(), 53));
    DeviceArray d_qkv(type, qkv), d_out(type, s.out()), d_lse(DType::kFloat32, s.lse());
    d_out.Poison();
    d_lse.Poison();
    HOIST_ASSERT_OK(AttentionForwardTiled(d_out.data(), d_lse.as<float>(), d_qkv.data(), s.B, s.T,
                                          s.C, s.NH, type, stream()));
    std::vector<float> out(s.out()), lse(s.lse());
    cpu::AttentionForwardTiled(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    ExpectCloseToScale(d_out.Download(), out, ToleranceFor(type), "out");
    ExpectCloseToScale(d_lse.Download(), lse, ToleranceFor(DType::kFloat32), "lse");

    // The backward from the CPU's lse and out (out rounded to `type`, as a GPU forward stores it).
    const auto out_rounded = RoundTo(type, out);
    DeviceArray d_dout(type, dout), d_dqkv(type, dqkv0), d_out_ref(type, out_rounded);
    DeviceArray d_lse_ref(DType::kFloat32, lse);
    DeviceArray workspace(
        DType::kFloat32,
        static_cast<size_t>(TiledAttentionBackwardWorkspaceBytes(s.B, s.T, s.NH)) / sizeof(float));
    HOIST_ASSERT_OK(AttentionBackwardTiled(d_dqkv.data(), d_dout.data(), d_qkv.data(),
                                           d_out_ref.data(), d_lse_ref.as<float>(),
                                           workspace.data(), s.B, s.T, s.C, s.NH, type, stream()));
    std::vector<float> dqkv = dqkv0;
    cpu::AttentionBackwardTiled(dqkv.data(), dout.data(), qkv.data(), out_rounded.data(),
                                lse.data(), s.B, s.T, s.C, s.NH);
    ExpectCloseToScale(d_dqkv.Download(), dqkv, ToleranceFor(type), "dqkv");
  }

  std::unique_ptr<BlasHandle> blas_;
};

TEST_P(CudaAttention, DirectMatchesCpu) { CheckDirect(kShape); }

TEST_P(CudaAttention, TiledMatchesCpu) { CheckTiled(kShape); }

// hs = 72 (a partial last 32-wide chunk of the accumulators) and hs = 128 (the largest, whose
// tiles need more than the default 48 KiB of shared memory); T spans several tiles.
TEST_P(CudaAttention, TiledWideHeadsMatchCpu) {
  CheckTiled({1, 70, 144, 2});
  CheckTiled({1, 45, 256, 2});
}

TEST_P(CudaAttention, DirectWideHeadsMatchCpu) { CheckDirect({1, 45, 256, 2}); }

// Both GPU paths on the same inputs: the same out, and the same += gradient from the same start.
TEST_P(CudaAttention, TiledAgreesWithDirect) {
  const DType type = GetParam();
  const Shape s = kShape;
  const auto qkv = RandomFloats(s.qkv(), 61);
  const auto dout = RandomFloats(s.out(), 62);
  const auto dqkv0 = RandomFloats(s.qkv(), 63);
  DeviceArray d_qkv(type, qkv), d_dout(type, dout);
  DeviceArray direct_out(type, s.out()), tiled_out(type, s.out());
  DeviceArray direct_dqkv(type, dqkv0), tiled_dqkv(type, dqkv0);
  DeviceArray att(DType::kFloat32, s.att()), lse(DType::kFloat32, s.lse());
  DeviceArray workspace(
      DType::kFloat32,
      static_cast<size_t>(std::max(AttentionWorkspaceBytes(s.B, s.T, s.C, s.NH, type),
                                   TiledAttentionBackwardWorkspaceBytes(s.B, s.T, s.NH))) /
          sizeof(float));
  HOIST_ASSERT_OK(AttentionForward(*blas_, direct_out.data(), att.as<float>(), d_qkv.data(),
                                   workspace.data(), s.B, s.T, s.C, s.NH, type, stream()));
  HOIST_ASSERT_OK(AttentionBackward(*blas_, direct_dqkv.data(), d_dout.data(), d_qkv.data(),
                                    att.as<float>(), workspace.data(), s.B, s.T, s.C, s.NH, type,
                                    stream()));
  HOIST_ASSERT_OK(AttentionForwardTiled(tiled_out.data(), lse.as<float>(), d_qkv.data(), s.B, s.T,
                                        s.C, s.NH, type, stream()));
  HOIST_ASSERT_OK(AttentionBackwardTiled(tiled_dqkv.data(), d_dout.data(), d_qkv.data(),
                                         tiled_out.data(), lse.as<float>(), workspace.data(), s.B,
                                         s.T, s.C, s.NH, type, stream()));
  // Each side rounds once to `type`: two roundings apart at most, within ToleranceFor's rtol. The
  // tiled path keeps P and dS in fp32, the direct one rounds them in 16-bit types (see
  // AttentionMagnitudes), from the inputs as the device holds them.
  const Magnitudes magnitudes =
      type == DType::kFloat32 ? Magnitudes{}
                              : AttentionMagnitudes(RoundTo(type, qkv), RoundTo(type, dout), s);
  ExpectCloseToScale(tiled_out.Download(), direct_out.Download(), ToleranceFor(type), "out", 1e-5,
                     magnitudes.out);
  ExpectCloseToScale(tiled_dqkv.Download(), direct_dqkv.Download(), ToleranceFor(type), "dqkv",
                     1e-5, magnitudes.dqkv);
}

TEST_P(CudaAttention, DirectRefusesBadArguments) {
  const DType type = GetParam();
  DeviceArray a(type, 64), b(type, 64), w(DType::kFloat32, 64);
  EXPECT_EQ(
      AttentionForward(*blas_, a.data(), nullptr, b.data(), w.data(), 1, 2, 4, 2, type, stream())
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionForward(*blas_, a.data(), w.as<float>(), b.data(), w.data(), 1, 2, 5, 2, type,
                             stream())
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionBackward(*blas_, a.data(), b.data(), b.data(), w.as<float>(), w.data(), 1, 2,
                              4, 2, type, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaAttention,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         DTypeParamName);

// The tiled entries validate before touching the device, so these run without a GPU. The
// pointers and the stream are never dereferenced: every call is refused first.
void* const kFake = reinterpret_cast<void*>(256);
float* const kFakeFloats = reinterpret_cast<float*>(256);
const cudaStream_t kFakeStream = reinterpret_cast<cudaStream_t>(256);

TEST(CudaAttentionTiledValidation, RefusesHeadsLargerThan128) {
  const Status forward =
      AttentionForwardTiled(kFake, kFakeFloats, kFake, 1, 8, 260, 2, DType::kFloat32, kFakeStream);
  EXPECT_EQ(forward.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(forward.ToString().find("AttentionForwardTiled"), std::string::npos)
      << forward.ToString();
  EXPECT_EQ(AttentionBackwardTiled(kFake, kFake, kFake, kFake, kFakeFloats, kFake, 1, 8, 260, 2,
                                   DType::kBFloat16, kFakeStream)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(CudaAttentionTiledValidation, RefusesNullPointersSizesAndStream) {
  const DType type = DType::kFloat16;
  EXPECT_EQ(
      AttentionForwardTiled(nullptr, kFakeFloats, kFake, 1, 8, 64, 2, type, kFakeStream).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionForwardTiled(kFake, nullptr, kFake, 1, 8, 64, 2, type, kFakeStream).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionForwardTiled(kFake, kFakeFloats, kFake, 1, 0, 64, 2, type, kFakeStream).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionForwardTiled(kFake, kFakeFloats, kFake, 1, 8, 64, 3, type, kFakeStream).code(),
            StatusCode::kInvalidArgument);
  // One grid row per (b, h): B*NH = 65536 is one past what grid.y takes.
  const Status too_many_rows =
      AttentionForwardTiled(kFake, kFakeFloats, kFake, 32768, 8, 64, 2, type, kFakeStream);
  EXPECT_EQ(too_many_rows.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many_rows.message().find("B*NH = 65536"), std::string::npos)
      << too_many_rows.message();
  EXPECT_EQ(AttentionBackwardTiled(kFake, kFake, kFake, kFake, kFakeFloats, kFake, 32768, 8, 64, 2,
                                   type, kFakeStream)
                .code(),
            StatusCode::kInvalidArgument);
  const Status null_stream =
      AttentionForwardTiled(kFake, kFakeFloats, kFake, 1, 8, 64, 2, type, nullptr);
  EXPECT_EQ(null_stream.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionBackwardTiled(kFake, kFake, kFake, kFake, kFakeFloats, nullptr, 1, 8, 64, 2,
                                   type, kFakeStream)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionBackwardTiled(kFake, kFake, kFake, kFake, kFakeFloats, kFake, 1, 8, 64, 2,
                                   type, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(CudaAttentionTiledValidation, WorkspaceSizes) {
  EXPECT_EQ(TiledAttentionBackwardWorkspaceBytes(2, 67, 4), int64_t{2} * 4 * 67 * 4);
  // q, k, v and dout heads in `type`, dq, dk, dv in fp32, plus one fp32 T x T block per head.
  const int64_t btc = int64_t{2} * 67 * 64, bhtt = int64_t{2} * 4 * 67 * 67;
  EXPECT_EQ(AttentionWorkspaceBytes(2, 67, 64, 4, DType::kFloat32), (7 * btc + bhtt) * 4);
  EXPECT_EQ(AttentionWorkspaceBytes(2, 67, 64, 4, DType::kBFloat16), 20 * btc + 4 * bhtt);
  EXPECT_EQ(AttentionWorkspaceBytes(2, 67, 64, 4, DType::kFloat16), 20 * btc + 4 * bhtt);
}

}  // namespace
}  // namespace hoist::kernels::cuda
