// GELU and the residual add on the GPU against their CPU twins, in every dtype, at sizes that
// exercise the 16-byte vector path, its tail and the unaligned scalar path.
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/elementwise.h"
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

// 37: shorter than most packs plus a tail; 4099: many packs and a tail.
const int64_t kSizes[] = {1, 37, 4099};

class CudaElementwise : public CudaKernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaElementwise, GeluForwardMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  for (int64_t n : kSizes) {
    const std::vector<float> inp = RoundTo(type, RandomFloats(n, 11, -4.0f, 4.0f));
    std::vector<float> want(n);
    cpu::GeluForward(want.data(), inp.data(), n);

    DeviceArray d_inp(type, inp), d_out(type, n);
    d_out.Poison();
    HOIST_ASSERT_OK(GeluForward(d_out.data(), d_inp.data(), n, type, stream()));
    ExpectAllClose(d_out.Download(), want, tol.atol, tol.rtol, "gelu out");

    // In place: out aliases inp.
    HOIST_ASSERT_OK(GeluForward(d_inp.data(), d_inp.data(), n, type, stream()));
    ExpectAllClose(d_inp.Download(), want, tol.atol, tol.rtol, "gelu in place");
  }
}

TEST_P(CudaElementwise, GeluBackwardAccumulates) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  for (int64_t n : kSizes) {
    const std::vector<float> inp = RoundTo(type, RandomFloats(n, 12, -4.0f, 4.0f));
    const std::vector<float> dout = RoundTo(type, RandomFloats(n, 13));
    const std::vector<float> start = RoundTo(type, RandomFloats(n, 14));
    std::vector<float> want = start;
    cpu::GeluBackward(want.data(), inp.data(), dout.data(), n);

    DeviceArray d_inp(type, inp), d_dout(type, dout), d_dinp(type, start);
    HOIST_ASSERT_OK(GeluBackward(d_dinp.data(), d_inp.data(), d_dout.data(), n, type, stream()));
    ExpectAllClose(d_dinp.Download(), want, tol.atol, tol.rtol, "gelu dinp");
  }
}

TEST_P(CudaElementwise, ResidualForwardMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  for (int64_t n : kSizes) {
    const std::vector<float> a = RoundTo(type, RandomFloats(n, 21));
    const std::vector<float> b = RoundTo(type, RandomFloats(n, 22));
    std::vector<float> want(n);
    cpu::ResidualForward(want.data(), a.data(), b.data(), n);

    DeviceArray d_a(type, a), d_b(type, b), d_out(type, n);
    d_out.Poison();
    HOIST_ASSERT_OK(ResidualForward(d_out.data(), d_a.data(), d_b.data(), n, type, stream()));
    ExpectAllClose(d_out.Download(), want, tol.atol, tol.rtol, "residual out");
  }
}

TEST_P(CudaElementwise, ResidualBackwardAccumulatesIntoBoth) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  for (int64_t n : kSizes) {
    const std::vector<float> dout = RoundTo(type, RandomFloats(n, 31));
    std::vector<float> want_a = RoundTo(type, RandomFloats(n, 32));
    std::vector<float> want_b = RoundTo(type, RandomFloats(n, 33));
    DeviceArray d_dout(type, dout), d_da(type, want_a), d_db(type, want_b);
    cpu::ResidualBackward(want_a.data(), want_b.data(), dout.data(), n);

    HOIST_ASSERT_OK(ResidualBackward(d_da.data(), d_db.data(), d_dout.data(), n, type, stream()));
    ExpectAllClose(d_da.Download(), want_a, tol.atol, tol.rtol, "residual da");
    ExpectAllClose(d_db.Download(), want_b, tol.atol, tol.rtol, "residual db");
  }
}

// Pointers one element past a 16-byte boundary take the scalar path; the result is the same.
TEST_P(CudaElementwise, UnalignedPointersMatchCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  const int64_t n = 1001;
  const std::vector<float> a = RoundTo(type, RandomFloats(n + 1, 41));
  const std::vector<float> b = RoundTo(type, RandomFloats(n + 1, 42));
  std::vector<float> want(n + 1, 0.0f);
  cpu::ResidualForward(want.data() + 1, a.data() + 1, b.data() + 1, n);

  DeviceArray d_a(type, a), d_b(type, b), d_out(type, std::vector<float>(n + 1, 0.0f));
  const size_t size = DTypeSize(type);
  HOIST_ASSERT_OK(ResidualForward(d_out.as<char>() + size, d_a.as<char>() + size,
                                  d_b.as<char>() + size, n, type, stream()));
  ExpectAllClose(d_out.Download(), want, tol.atol, tol.rtol, "unaligned residual");
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaElementwise,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         testing::DTypeParamName);

}  // namespace
}  // namespace hoist::kernels::cuda
