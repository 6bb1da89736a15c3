// The fused softmax + cross-entropy on the GPU against cpu::SoftmaxCrossEntropy.
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/cross_entropy.h"
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
  int N, V, Vp;
};
// Padding in both (101 of 128; GPT-2's 50257 of 50304, longer than a block's threads).
// Vp a multiple of the 16-byte vector (fp32: 4, 16-bit: 8) takes the two-pass vector kernel,
// with a last vector partly past V in the first two; {6, 29, 30} the three-pass one.
const Shape kShapes[] = {{37, 101, 128}, {3, 50257, 50304}, {4, 64, 64}, {6, 29, 30}};
constexpr float kDloss = 0.5f;

std::vector<int32_t> RandomTargets(int N, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> targets(N);
  for (int32_t& t : targets) t = dist(rng);
  targets[0] = V - 1;
  return targets;
}

// The absolute part of dlogits' bound. The gradients are small (about dloss / V off the
// target), so the dtype's usual atol would accept a kernel that wrote 0 there: only one rounding
// of an fp32 value to the type, and fp16's subnormal spacing (6e-8), are allowed.
double DlogitsAtol(DType type) { return type == DType::kFloat16 ? 6e-8 : 1e-9; }

class CudaCrossEntropy : public CudaKernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaCrossEntropy, LossesAndGradientsMatchCpu) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  // Losses are fp32 from the same (rounded) logits; the CPU's e^x is a polynomial (~2e-7
  // relative), the GPU's expf, so fp32's bound holds for every logits type.
  const Tolerance loss_tol = ToleranceFor(DType::kFloat32);
  for (const Shape& s : kShapes) {
    const size_t n = size_t{1} * s.N * s.Vp;
    const std::vector<float> logits = RoundTo(type, RandomFloats(n, 1, -4.0f, 4.0f));
    const std::vector<int32_t> targets = RandomTargets(s.N, s.V, 2);
    std::vector<float> want_losses(s.N), want_dlogits(n);
    cpu::SoftmaxCrossEntropy(want_losses.data(), want_dlogits.data(), logits.data(), targets.data(),
                             kDloss, s.N, s.V, s.Vp);

    DeviceInts d_targets(targets);
    DeviceArray d_logits(type, logits), d_dlogits(type, n), d_losses(DType::kFloat32, s.N);
    d_dlogits.Poison();
    d_losses.Poison();
    HOIST_ASSERT_OK(SoftmaxCrossEntropy(d_losses.as<float>(), d_dlogits.data(), d_logits.data(),
                                        d_targets.data(), kDloss, s.N, s.V, s.Vp, 0.0f, type,
                                        stream()));
    ExpectAllClose(d_losses.Download(), want_losses, loss_tol.atol, loss_tol.rtol, "losses");
    // Padding columns are exactly 0 on both sides, so they pass only if the op wrote them.
    ExpectAllClose(d_dlogits.Download(), want_dlogits, DlogitsAtol(type), tol.rtol, "dlogits");
  }
}

TEST_P(CudaCrossEntropy, GradientMayOverwriteLogits) {
  const DType type = GetParam();
  const Tolerance tol = ToleranceFor(type);
  const Tolerance loss_tol = ToleranceFor(DType::kFloat32);
  const Shape s = {37, 101, 128};
  const size_t n = size_t{1} * s.N * s.Vp;
  const std::vector<float> logits = RoundTo(type, RandomFloats(n, 3, -4.0f, 4.0f));
  const std::vector<int32_t> targets = RandomTargets(s.N, s.V, 4);
  std::vector<float> want_losses(s.N), want_dlogits = logits;
  cpu::SoftmaxCrossEntropy(want_losses.data(), want_dlogits.data(), want_dlogits.data(),
                           targets.data(), kDloss, s.N, s.V, s.Vp);

  DeviceInts d_targets(targets);
  DeviceArray d_logits(type, logits), d_losses(DType::kFloat32, s.N);
  d_losses.Poison();
  HOIST_ASSERT_OK(SoftmaxCrossEntropy(d_losses.as<float>(), d_logits.data(), d_logits.data(),
                                      d_targets.data(), kDloss, s.N, s.V, s.Vp, 0.0f, type,
                                      stream()));
  ExpectAllClose(d_losses.Download(), want_losses, loss_tol.atol, loss_tol.rtol, "losses");
  ExpectAllClose(d_logits.Download(), want_dlogits, DlogitsAtol(type), tol.rtol,
                 "dlogits in place");
}

TEST_P(CudaCrossEntropy, LossesOnlyWithoutGradient) {
  const DType type = GetParam();
  const Tolerance loss_tol = ToleranceFor(DType::kFloat32);
  const Shape s = {5, 101, 128};
  const size_t n = size_t{1} * s.N * s.Vp;
  const std::vector<float> logits = RoundTo(type, RandomFloats(n, 5, -4.0f, 4.0f));
  const std::vector<int32_t> targets = RandomTargets(s.N, s.V, 6);
  std::vector<float> want_losses(s.N);
  cpu::SoftmaxCrossEntropy(want_losses.data(), nullptr, logits.data(), targets.data(), kDloss, s.N,
                           s.V, s.Vp);

  DeviceInts d_targets(targets);
  DeviceArray d_logits(type, logits), d_losses(DType::kFloat32, s.N);
  d_losses.Poison();
  HOIST_ASSERT_OK(SoftmaxCrossEntropy(d_losses.as<float>(), nullptr, d_logits.data(),
                                      d_targets.data(), kDloss, s.N, s.V, s.Vp, 0.0f, type,
                                      stream()));
  ExpectAllClose(d_losses.Download(), want_losses, loss_tol.atol, loss_tol.rtol, "losses");
  ExpectAllClose(d_logits.Download(), logits, 0.0, 0.0, "logits untouched");
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaCrossEntropy,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         testing::DTypeParamName);

}  // namespace
}  // namespace hoist::kernels::cuda
