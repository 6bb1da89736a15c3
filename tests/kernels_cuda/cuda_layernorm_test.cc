// LayerNorm on the GPU against cpu::LayerNormForward / LayerNormBackward.
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/layernorm.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::DeviceArray;
using testing::ExpectAllClose;
using testing::RandomFloats;
using testing::RoundTo;
using testing::Tolerance;
using testing::ToleranceFor;

struct Shape {
  int N, C;
};
// Tails everywhere: C not a multiple of 32, N not a multiple of the 8 rows of a block; 300 rows
// span several row chunks of the parameter gradients.
const Shape kShapes[] = {{37, 72}, {5, 13}, {300, 200}};

class CudaLayerNorm : public CudaKernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaLayerNorm, ForwardMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  const Tolerance stats_tol = ToleranceFor(DType::kFloat32);  // fp32 outputs of the same inputs
  for (const Shape& s : kShapes) {
    const size_t n = size_t{1} * s.N * s.C;
    // An offset mean, so the two-pass variance matters.
    const std::vector<float> inp = RoundTo(type, RandomFloats(n, 1, 2.0f, 4.0f));
    const std::vector<float> weight = RoundTo(type, RandomFloats(s.C, 2));
    const std::vector<float> bias = RoundTo(type, RandomFloats(s.C, 3));
    std::vector<float> want(n), want_mean(s.N), want_rstd(s.N);
    cpu::LayerNormForward(want.data(), want_mean.data(), want_rstd.data(), inp.data(),
                          weight.data(), bias.data(), s.N, s.C);

    DeviceArray d_inp(type, inp), d_weight(type, weight), d_bias(type, bias), d_out(type, n);
    DeviceArray d_mean(DType::kFloat32, s.N), d_rstd(DType::kFloat32, s.N);
    d_out.Poison();
    d_mean.Poison();
    d_rstd.Poison();
    HOIST_ASSERT_OK(LayerNormForward(d_out.data(), d_mean.as<float>(), d_rstd.as<float>(),
                                     d_inp.data(), d_weight.data(), d_bias.data(), s.N, s.C, type,
                                     stream()));
    ExpectAllClose(d_out.Download(), want, tol.atol, tol.rtol, "out");
    ExpectAllClose(d_mean.Download(), want_mean, stats_tol.atol, stats_tol.rtol, "mean");
    ExpectAllClose(d_rstd.Download(), want_rstd, stats_tol.atol, stats_tol.rtol, "rstd");
  }
}

TEST_P(CudaLayerNorm, BackwardAccumulatesAllGradients) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  // dweight and dbias are fp32 sums over N rows in another order (per-thread partials, then
  // atomics): the error grows with the number of terms, so atol is fp32's times 10.
  const Tolerance param_tol = {1e-4, 1e-4};
  for (const Shape& s : kShapes) {
    const size_t n = size_t{1} * s.N * s.C;
    const std::vector<float> inp = RoundTo(type, RandomFloats(n, 4));
    const std::vector<float> weight = RoundTo(type, RandomFloats(s.C, 5));
    const std::vector<float> bias = RoundTo(type, RandomFloats(s.C, 6));
    const std::vector<float> dout = RoundTo(type, RandomFloats(n, 7));
    // Statistics from the CPU forward, given to both backward ops.
    std::vector<float> out(n), mean(s.N), rstd(s.N);
    cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                          bias.data(), s.N, s.C);
    std::vector<float> want_dinp = RoundTo(type, RandomFloats(n, 8));
    std::vector<float> want_dweight = RandomFloats(s.C, 9);
    std::vector<float> want_dbias = RandomFloats(s.C, 10);
    DeviceArray d_dinp(type, want_dinp), d_dweight(DType::kFloat32, want_dweight),
        d_dbias(DType::kFloat32, want_dbias);
    cpu::LayerNormBackward(want_dinp.data(), want_dweight.data(), want_dbias.data(), dout.data(),
                           inp.data(), weight.data(), mean.data(), rstd.data(), s.N, s.C);

    DeviceArray d_dout(type, dout), d_inp(type, inp), d_weight(type, weight);
    DeviceArray d_mean(DType::kFloat32, mean), d_rstd(DType::kFloat32, rstd);
    HOIST_ASSERT_OK(LayerNormBackward(
        d_dinp.data(), d_dweight.as<float>(), d_dbias.as<float>(), d_dout.data(), d_inp.data(),
        d_weight.data(), d_mean.as<float>(), d_rstd.as<float>(), s.N, s.C, type, stream()));
    ExpectAllClose(d_dinp.Download(), want_dinp, tol.atol, tol.rtol, "dinp");
    ExpectAllClose(d_dweight.Download(), want_dweight, param_tol.atol, param_tol.rtol, "dweight");
    ExpectAllClose(d_dbias.Download(), want_dbias, param_tol.atol, param_tol.rtol, "dbias");
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaLayerNorm,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         testing::DTypeParamName);

}  // namespace
}  // namespace hoist::kernels::cuda
