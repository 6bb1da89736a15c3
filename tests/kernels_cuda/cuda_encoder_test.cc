// The token + position embedding on the GPU against cpu::EncoderForward / EncoderBackward.
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/encoder.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::DeviceArray;
using testing::DeviceInts;
using testing::ExpectAllClose;
using testing::RandomFloats;
using testing::RoundTo;
using testing::Tolerance;
using testing::ToleranceFor;

struct Shape {
  int B, T, C, Vp, maxT;
};
// C = 72 and 37 are no multiple of a vector width; T < maxT as in training.
const Shape kShapes[] = {{2, 5, 72, 101, 8}, {3, 7, 37, 128, 7}};

// Tokens with repeats, so rows of dwte collide in the backward.
std::vector<int32_t> RandomTokens(int n, int Vp, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, Vp / 4);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = dist(rng);
  tokens.back() = Vp - 1;
  return tokens;
}

class CudaEncoder : public CudaKernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaEncoder, ForwardMatchesCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  for (const Shape& s : kShapes) {
    const int N = s.B * s.T;
    const std::vector<int32_t> tokens = RandomTokens(N, s.Vp, 1);
    const std::vector<float> wte = RoundTo(type, RandomFloats(size_t{1} * s.Vp * s.C, 2));
    const std::vector<float> wpe = RoundTo(type, RandomFloats(size_t{1} * s.maxT * s.C, 3));
    std::vector<float> want(size_t{1} * N * s.C);
    cpu::EncoderForward(want.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);

    DeviceInts d_tokens(tokens);
    DeviceArray d_wte(type, wte), d_wpe(type, wpe), d_out(type, want.size());
    d_out.Poison();
    HOIST_ASSERT_OK(EncoderForward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), s.B,
                                   s.T, s.C, type, stream()));
    ExpectAllClose(d_out.Download(), want, tol.atol, tol.rtol, "encoder out");
  }
}

TEST_P(CudaEncoder, BackwardAccumulatesFp32Gradients) {
  const DType type = GetParam();
  // dwte and dwpe are fp32 sums of the same (already rounded) dout values the CPU adds: only the
  // order of the dwte atomics differs, so fp32's bound holds for every dout type.
  const Tolerance tol = ToleranceFor(DType::kFloat32);
  for (const Shape& s : kShapes) {
    const int N = s.B * s.T;
    const std::vector<int32_t> tokens = RandomTokens(N, s.Vp, 4);
    const std::vector<float> dout = RoundTo(type, RandomFloats(size_t{1} * N * s.C, 5));
    std::vector<float> want_wte = RandomFloats(size_t{1} * s.Vp * s.C, 6);
    std::vector<float> want_wpe = RandomFloats(size_t{1} * s.maxT * s.C, 7);
    DeviceArray d_dwte(DType::kFloat32, want_wte), d_dwpe(DType::kFloat32, want_wpe);
    cpu::EncoderBackward(want_wte.data(), want_wpe.data(), dout.data(), tokens.data(), s.B, s.T,
                         s.C);

    DeviceInts d_tokens(tokens);
    DeviceArray d_dout(type, dout);
    HOIST_ASSERT_OK(EncoderBackward(d_dwte.as<float>(), d_dwpe.as<float>(), d_dout.data(),
                                    d_tokens.data(), s.B, s.T, s.C, type, stream()));
    ExpectAllClose(d_dwte.Download(), want_wte, tol.atol, tol.rtol, "dwte");
    // dwpe adds over b in the CPU's order: the same bits.
    const std::vector<float> got_wpe = d_dwpe.Download();
    ExpectAllClose(got_wpe, want_wpe, 0.0, 0.0, "dwpe");
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaEncoder,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         testing::DTypeParamName);

}  // namespace
}  // namespace hoist::kernels::cuda
