#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/matmul.h"
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

// Shapes with tails: no dimension is a multiple of a tile, N and C are not multiples of 8.
constexpr int kN = 37, kC = 72, kOC = 200;

std::vector<float> Abs(std::vector<float> x) {
  for (float& v : x) v = std::fabs(v);
  return x;
}

// |got - ref| <= atol + rtol |ref| + order_eps * magnitude, elementwise. The GPU and the CPU add
// the same fp32 products in different orders; the difference is bounded by about K u times the
// sum of the terms' magnitudes (K terms, u = 2^-24 per addition, for each side), so `magnitude`
// is that sum, computed as the same product over absolute values, and order_eps = 2 K 2^-24. The
// atol + rtol |ref| part is the dtype's one rounding of the result (ToleranceFor).
void ExpectCloseScaled(const std::vector<float>& got, const std::vector<float>& ref,
                       const std::vector<float>& magnitude, Tolerance tol, double order_eps,
                       const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_EQ(magnitude.size(), ref.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double bound =
        tol.atol + tol.rtol * std::fabs(ref[i]) + order_eps * static_cast<double>(magnitude[i]);
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i] << " (bound "
                    << bound << ")";
    }
  }
}

double OrderEps(int terms) { return 2.0 * terms * std::ldexp(1.0, -24); }

class CudaMatmul : public CudaKernelTest, public ::testing::WithParamInterface<DType> {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    StatusOr<std::unique_ptr<BlasHandle>> blas = BlasHandle::Create();
    ASSERT_TRUE(blas.ok()) << blas.status().ToString();
    blas_ = std::move(*blas);
  }

  // The forward on the GPU against cpu::MatmulForward on the same (rounded) inputs.
  // With `misaligned_bias` the bias starts one element past an aligned address, where cuBLASLt's
  // bias epilogue is not used and the bias is added after the product (rounded twice).
  void CheckForward(int OC, bool with_bias, bool with_gelu, bool misaligned_bias = false) {
    const DType type = GetParam();
    const auto inp = RoundTo(type, RandomFloats(kN * kC, 11));
    const auto weight = RoundTo(type, RandomFloats(OC * kC, 12, -0.2f, 0.2f));
    const auto bias = RoundTo(type, RandomFloats(OC, 13));
    std::vector<float> stored_bias = bias;
    if (misaligned_bias) stored_bias.insert(stored_bias.begin(), 0.0f);
    DeviceArray d_inp(type, inp), d_weight(type, weight), d_bias(type, stored_bias);
    const void* bias_ptr =
        static_cast<const char*>(d_bias.data()) + (misaligned_bias ? DTypeSize(type) : 0);
    DeviceArray d_out(type, static_cast<size_t>(kN) * OC);
    DeviceArray d_gelu(type, static_cast<size_t>(kN) * OC);
    d_out.Poison();
    d_gelu.Poison();
    HOIST_ASSERT_OK(MatmulForward(*blas_, d_out.data(), d_inp.data(), d_weight.data(),
                                  with_bias ? bias_ptr : nullptr, kN, kC, OC, type, stream(),
                                  with_gelu ? d_gelu.data() : nullptr));

    std::vector<float> ref(static_cast<size_t>(kN) * OC), magnitude(ref.size());
    cpu::MatmulForward(ref.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, kN,
                       kC, OC);
    const auto abs_bias = Abs(bias);
    cpu::MatmulForward(magnitude.data(), Abs(inp).data(), Abs(weight).data(),
                       with_bias ? abs_bias.data() : nullptr, kN, kC, OC);
    const std::vector<float> out = d_out.Download();
    Tolerance out_tol = ToleranceFor(type);
    if (misaligned_bias) out_tol.rtol *= 2;  // the product and the sum are each rounded
    ExpectCloseScaled(out, ref, magnitude, out_tol, OrderEps(kC), "out");
    if (!with_gelu) return;
    // GELU of the GPU's own pre-activation (fused: of its fp32 value before rounding; unfused:
    // of the stored one), so only GELU's evaluation and one rounding remain; GELU's slope is
    // below 1.13, which the magnitude term absorbs.
    std::vector<float> gelu_ref(ref.size());
    cpu::GeluForward(gelu_ref.data(), out.data(), out.size());
    std::vector<float> gelu_magnitude = Abs(out);
    const Tolerance tol = ToleranceFor(type);
    ExpectCloseScaled(d_gelu.Download(), gelu_ref, gelu_magnitude, tol, 2 * tol.rtol, "gelu_out");
  }

  std::unique_ptr<BlasHandle> blas_;
};

TEST_P(CudaMatmul, ForwardMatchesCpu) { CheckForward(kOC, /*with_bias=*/true, false); }

TEST_P(CudaMatmul, ForwardWithoutBias) { CheckForward(kOC, /*with_bias=*/false, false); }

TEST_P(CudaMatmul, ForwardWithAMisalignedBiasAddsItAfterTheProduct) {
  CheckForward(kOC, /*with_bias=*/true, /*with_gelu=*/true, /*misaligned_bias=*/true);
}

// OC = 200 is a multiple of 8, where cuBLASLt's GELU_AUX epilogue may run fused.
TEST_P(CudaMatmul, GeluEpilogueKeepsPreActivation) {
  CheckForward(kOC, /*with_bias=*/true, /*with_gelu=*/true);
}

TEST_P(CudaMatmul, GeluEpilogueWithoutBias) {
  CheckForward(kOC, /*with_bias=*/false, /*with_gelu=*/true);
}

// OC = 100 is not a multiple of 8: the aux matrix cannot take it, so the unfused path runs.
TEST_P(CudaMatmul, GeluOddWidthTakesUnfusedPath) {
  CheckForward(100, /*with_bias=*/true, /*with_gelu=*/true);
}

// The second product of a shape runs the plan the first one made (the handle keeps no more), with
// its own bias, aux (pre-activation) and output pointers: both calls' arrays stay alive, so a
// pointer left over from the first call would show as the first call's values.
TEST_P(CudaMatmul, RepeatedShapeReusesItsPlanWithEachCallsPointers) {
  const DType type = GetParam();
  const auto inp = RoundTo(type, RandomFloats(kN * kC, 21));
  const auto weight = RoundTo(type, RandomFloats(kOC * kC, 22, -0.2f, 0.2f));
  const std::vector<float> biases[2] = {RoundTo(type, RandomFloats(kOC, 23)),
                                        RoundTo(type, RandomFloats(kOC, 24))};
  const size_t n = static_cast<size_t>(kN) * kOC;
  DeviceArray d_inp(type, inp), d_weight(type, weight);
  DeviceArray d_bias0(type, biases[0]), d_bias1(type, biases[1]);
  DeviceArray d_out0(type, n), d_out1(type, n), d_gelu0(type, n), d_gelu1(type, n);
  const DeviceArray* d_bias[2] = {&d_bias0, &d_bias1};
  DeviceArray* d_out[2] = {&d_out0, &d_out1};
  DeviceArray* d_gelu[2] = {&d_gelu0, &d_gelu1};
  size_t plans_after_first = 0;
  for (int i = 0; i < 2; ++i) {
    d_out[i]->Poison();
    d_gelu[i]->Poison();
    HOIST_ASSERT_OK(MatmulForward(*blas_, d_out[i]->data(), d_inp.data(), d_weight.data(),
                                  d_bias[i]->data(), kN, kC, kOC, type, stream(),
                                  d_gelu[i]->data()));
    if (i == 0) plans_after_first = blas_->lt_plans().size();
  }
  EXPECT_GT(plans_after_first, 0u);
  EXPECT_EQ(blas_->lt_plans().size(), plans_after_first);

  const Tolerance tol = ToleranceFor(type);
  for (int i = 0; i < 2; ++i) {
    const std::string what = "call " + std::to_string(i) + " ";
    std::vector<float> ref(n), magnitude(n), gelu_ref(n);
    cpu::MatmulForward(ref.data(), inp.data(), weight.data(), biases[i].data(), kN, kC, kOC);
    const auto abs_bias = Abs(biases[i]);
    cpu::MatmulForward(magnitude.data(), Abs(inp).data(), Abs(weight).data(), abs_bias.data(), kN,
                       kC, kOC);
    const std::vector<float> out = d_out[i]->Download();
    ExpectCloseScaled(out, ref, magnitude, tol, OrderEps(kC), what + "out");
    cpu::GeluForward(gelu_ref.data(), out.data(), out.size());
    ExpectCloseScaled(d_gelu[i]->Download(), gelu_ref, Abs(out), tol, 2 * tol.rtol,
                      what + "gelu_out");
  }
}

// The backward accumulates: every gradient starts from the same random values on both sides.
void CheckBackward(BlasHandle& blas, cudaStream_t stream, DType type, bool with_dinp,
                   bool with_dbias) {
  const auto dout = RoundTo(type, RandomFloats(kN * kOC, 21));
  const auto inp = RoundTo(type, RandomFloats(kN * kC, 22));
  const auto weight = RoundTo(type, RandomFloats(kOC * kC, 23, -0.2f, 0.2f));
  const auto dinp0 = RoundTo(type, RandomFloats(kN * kC, 24));
  const auto dweight0 = RandomFloats(kOC * kC, 25);
  const auto dbias0 = RandomFloats(kOC, 26);
  DeviceArray d_dout(type, dout), d_inp(type, inp), d_weight(type, weight), d_dinp(type, dinp0);
  DeviceArray d_dweight(DType::kFloat32, dweight0), d_dbias(DType::kFloat32, dbias0);
  HOIST_ASSERT_OK(MatmulBackward(blas, with_dinp ? d_dinp.data() : nullptr, d_dweight.as<float>(),
                                 with_dbias ? d_dbias.as<float>() : nullptr, d_dout.data(),
                                 d_inp.data(), d_weight.data(), kN, kC, kOC, type, stream));

  std::vector<float> dinp = dinp0, dweight = dweight0, dbias = dbias0;
  cpu::MatmulBackward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                      weight.data(), kN, kC, kOC);
  std::vector<float> dinp_mag = Abs(dinp0), dweight_mag = Abs(dweight0), dbias_mag = Abs(dbias0);
  cpu::MatmulBackward(dinp_mag.data(), dweight_mag.data(), dbias_mag.data(), Abs(dout).data(),
                      Abs(inp).data(), Abs(weight).data(), kN, kC, kOC);

  const Tolerance fp32 = ToleranceFor(DType::kFloat32);
  if (with_dinp) {
    ExpectCloseScaled(d_dinp.Download(), dinp, dinp_mag, ToleranceFor(type), OrderEps(kOC + 1),
                      "dinp");
  } else {
    ExpectCloseScaled(d_dinp.Download(), dinp0, Abs(dinp0), fp32, 0.0, "untouched dinp");
  }
  // Parameter gradients are fp32: only the order of the additions differs.
  ExpectCloseScaled(d_dweight.Download(), dweight, dweight_mag, fp32, OrderEps(kN + 1), "dweight");
  if (with_dbias) {
    ExpectCloseScaled(d_dbias.Download(), dbias, dbias_mag, fp32, OrderEps(kN + 1), "dbias");
  } else {
    ExpectCloseScaled(d_dbias.Download(), dbias0, Abs(dbias0), fp32, 0.0, "untouched dbias");
  }
}

TEST_P(CudaMatmul, BackwardAccumulatesLikeCpu) {
  CheckBackward(*blas_, stream(), GetParam(), /*with_dinp=*/true, /*with_dbias=*/true);
}

TEST_P(CudaMatmul, BackwardWithoutDinp) {
  CheckBackward(*blas_, stream(), GetParam(), /*with_dinp=*/false, /*with_dbias=*/true);
}

TEST_P(CudaMatmul, BackwardWithoutBias) {
  CheckBackward(*blas_, stream(), GetParam(), /*with_dinp=*/true, /*with_dbias=*/false);
}

// Many rows: the bias reduction splits them into chunks that meet through atomics.
TEST_P(CudaMatmul, BiasGradientOverManyRowChunks) {
  const DType type = GetParam();
  constexpr int N = 1000, C = 8, OC = 40;
  const auto dout = RoundTo(type, RandomFloats(N * OC, 31));
  const auto inp = RoundTo(type, RandomFloats(N * C, 32));
  const auto weight = RoundTo(type, RandomFloats(OC * C, 33));
  const auto dbias0 = RandomFloats(OC, 34);
  DeviceArray d_dout(type, dout), d_inp(type, inp), d_weight(type, weight);
  DeviceArray d_dweight(DType::kFloat32, std::vector<float>(OC * C, 0.0f));
  DeviceArray d_dbias(DType::kFloat32, dbias0);
  HOIST_ASSERT_OK(MatmulBackward(*blas_, nullptr, d_dweight.as<float>(), d_dbias.as<float>(),
                                 d_dout.data(), d_inp.data(), d_weight.data(), N, C, OC, type,
                                 stream()));
  std::vector<float> dweight(OC * C, 0.0f), dbias = dbias0;
  cpu::MatmulBackward(nullptr, dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                      N, C, OC);
  std::vector<float> dweight_mag(OC * C, 0.0f), dbias_mag = Abs(dbias0);
  cpu::MatmulBackward(nullptr, dweight_mag.data(), dbias_mag.data(), Abs(dout).data(),
                      Abs(inp).data(), Abs(weight).data(), N, C, OC);
  ExpectCloseScaled(d_dbias.Download(), dbias, dbias_mag, ToleranceFor(DType::kFloat32),
                    OrderEps(N + 1), "dbias");
}

TEST_P(CudaMatmul, RefusesBadArguments) {
  const DType type = GetParam();
  DeviceArray a(type, 64), b(type, 64), c(type, 64);
  DeviceArray g(DType::kFloat32, 64);
  EXPECT_EQ(
      MatmulForward(*blas_, nullptr, a.data(), b.data(), nullptr, 4, 4, 4, type, stream()).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MatmulForward(*blas_, c.data(), a.data(), b.data(), nullptr, 0, 4, 4, type, stream()).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MatmulForward(*blas_, c.data(), a.data(), b.data(), nullptr, 4, 4, 4, type, nullptr).code(),
      StatusCode::kInvalidArgument);
  // A null dweight is a frozen weight (allowed); a null dout is not.
  EXPECT_EQ(MatmulBackward(*blas_, nullptr, g.as<float>(), nullptr, nullptr, b.data(), c.data(), 4,
                           4, 4, type, stream())
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MatmulBackward(*blas_, nullptr, g.as<float>(), nullptr, a.data(), b.data(), c.data(), 4,
                           -1, 4, type, stream())
                .code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaMatmul,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         DTypeParamName);

TEST(CudaBlasError, MapsStatusesToCodes) {
  const Status alloc = CublasError(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate(&h)", "f.cc", 7);
  EXPECT_EQ(alloc.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(alloc.ToString().find("cublasCreate(&h)"), std::string::npos) << alloc.ToString();
  EXPECT_NE(alloc.ToString().find("f.cc:7"), std::string::npos) << alloc.ToString();
  EXPECT_EQ(CublasError(CUBLAS_STATUS_NOT_INITIALIZED, "x", "f.cc", 1).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(CublasError(CUBLAS_STATUS_EXECUTION_FAILED, "x", "f.cc", 1).code(),
            StatusCode::kInternal);
}

}  // namespace
}  // namespace hoist::kernels::cuda
