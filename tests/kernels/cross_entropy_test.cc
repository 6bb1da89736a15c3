#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using testing::ExpectAllClose;
using testing::FiniteDifferenceGrad;
using testing::RandomFloats;
using testing::SimdLevelTest;
using testing::ToDouble;

// losses in double by log-sum-exp over the first V columns.
std::vector<double> XentRef(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                            int N, int V, int Vp) {
  std::vector<double> losses(N);
  for (int n = 0; n < N; ++n) {
    double max = -INFINITY;
    for (int i = 0; i < V; ++i) max = std::fmax(max, logits[n * Vp + i]);
    double sum = 0.0;
    for (int i = 0; i < V; ++i) sum += std::exp(logits[n * Vp + i] - max);
    losses[n] = std::log(sum) + max - logits[n * Vp + targets[n]];
  }
  return losses;
}

using SoftmaxCrossEntropyTest = SimdLevelTest;

TEST_P(SoftmaxCrossEntropyTest, LossesMatchFloat64LogSumExpOnLargeVocabulary) {
  const int N = 3, V = 5000, Vp = 5056;
  // Logits spread over +-40 exercise the exp polynomial's full reduced range.
  auto logits = RandomFloats(N * Vp, 1, -40.0f, 40.0f);
  const std::vector<int32_t> targets = {0, 4999, 1234};
  std::vector<float> losses(N);
  SoftmaxCrossEntropyAt(level(), losses.data(), nullptr, logits.data(), targets.data(), 1.0f, N, V,
                        Vp);
  // Losses are O(10-80); the float logits' differences are exact to ~4e-6 absolute.
  ExpectAllClose(losses, XentRef(ToDouble(logits), targets, N, V, Vp), 1e-5, 1e-6, "loss");
}

TEST_P(SoftmaxCrossEntropyTest, GradientMatchesFiniteDifferencesAndPaddingIsZero) {
  const int N = 3, V = 11, Vp = 16;
  const auto logits = RandomFloats(N * Vp, 2, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {3, 0, 10};
  const float dloss = 0.37f;
  std::vector<float> losses(N), dlogits(N * Vp, 7.0f);
  SoftmaxCrossEntropyAt(level(), losses.data(), dlogits.data(), logits.data(), targets.data(),
                        dloss, N, V, Vp);
  const auto fd = FiniteDifferenceGrad(ToDouble(logits), [&](const std::vector<double>& x) {
    double total = 0.0;
    for (double l : XentRef(x, targets, N, V, Vp)) total += dloss * l;
    return total;
  });
  // Probabilities <= 1 from a 2e-7-accurate exp, times dloss: absolute error ~1e-7.
  ExpectAllClose(dlogits, fd, 1e-6, 1e-5, "dlogits");
  for (int n = 0; n < N; ++n)
    for (int i = V; i < Vp; ++i) EXPECT_EQ(dlogits[n * Vp + i], 0.0f) << n << "," << i;
  ExpectAllClose(losses, XentRef(ToDouble(logits), targets, N, V, Vp), 1e-6, 1e-6, "loss");
}

TEST_P(SoftmaxCrossEntropyTest, InPlaceGradientOverLogitsMatchesSeparateBuffer) {
  const int N = 4, V = 300, Vp = 320;
  const auto logits = RandomFloats(N * Vp, 3, -5.0f, 5.0f);
  const std::vector<int32_t> targets = {0, 299, 17, 150};
  std::vector<float> losses(N), dlogits(N * Vp);
  SoftmaxCrossEntropyAt(level(), losses.data(), dlogits.data(), logits.data(), targets.data(), 1.0f,
                        N, V, Vp);
  auto inplace = logits;
  std::vector<float> losses_inplace(N);
  SoftmaxCrossEntropyAt(level(), losses_inplace.data(), inplace.data(), inplace.data(),
                        targets.data(), 1.0f, N, V, Vp);
  EXPECT_EQ(losses_inplace, losses);
  EXPECT_EQ(inplace, dlogits);
}

TEST_P(SoftmaxCrossEntropyTest, GradientScalesLinearlyWithDloss) {
  const int N = 2, V = 100, Vp = 128;
  const auto logits = RandomFloats(N * Vp, 4, -2.0f, 2.0f);
  const std::vector<int32_t> targets = {5, 50};
  std::vector<float> losses(N), unit(N * Vp), quarter(N * Vp);
  SoftmaxCrossEntropyAt(level(), losses.data(), unit.data(), logits.data(), targets.data(), 1.0f, N,
                        V, Vp);
  const auto unit_losses = losses;
  SoftmaxCrossEntropyAt(level(), losses.data(), quarter.data(), logits.data(), targets.data(),
                        0.25f, N, V, Vp);
  EXPECT_EQ(losses, unit_losses) << "losses do not depend on dloss";
  std::vector<double> want;
  for (float g : unit) want.push_back(0.25 * g);
  ExpectAllClose(quarter, want, 1e-9, 1e-6, "dlogits");
}

TEST_P(SoftmaxCrossEntropyTest, GradientRowsSumToZero) {
  const int N = 2, V = 1000, Vp = 1024;
  const auto logits = RandomFloats(N * Vp, 5, -8.0f, 8.0f);
  const std::vector<int32_t> targets = {1, 998};
  std::vector<float> losses(N), dlogits(N * Vp);
  SoftmaxCrossEntropyAt(level(), losses.data(), dlogits.data(), logits.data(), targets.data(), 1.0f,
                        N, V, Vp);
  for (int n = 0; n < N; ++n) {
    double sum = 0.0;
    for (int i = 0; i < Vp; ++i) sum += dlogits[n * Vp + i];
    EXPECT_NEAR(sum, 0.0, 1e-5) << "row " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(AllSimdLevels, SoftmaxCrossEntropyTest,
                         ::testing::ValuesIn(testing::kAllLevels), testing::LevelName);

// A negative target (a position the loss is masked off) gives a loss of 0 and a zero gradient row,
// and leaves every other row's loss and gradient bit for bit as without it: fp32 at every SIMD
// level, with the soft cap, and the 16-bit form.
TEST_P(SoftmaxCrossEntropyTest, NegativeTargetsAreIgnoredPositions) {
  const int N = 5, V = 300, Vp = 320;
  const auto logits = RandomFloats(N * Vp, 4, -5.0f, 5.0f);
  const std::vector<int32_t> all = {7, 299, 0, 150, 42};
  const std::vector<int32_t> masked = {7, -1, 0, -100, 42};
  std::vector<float> want_losses(N), want_d(N * Vp), losses(N), d(N * Vp, 3.0f);
  SoftmaxCrossEntropyAt(level(), want_losses.data(), want_d.data(), logits.data(), all.data(), 0.5f,
                        N, V, Vp);
  SoftmaxCrossEntropyAt(level(), losses.data(), d.data(), logits.data(), masked.data(), 0.5f, N, V,
                        Vp);
  for (int n = 0; n < N; ++n) {
    const bool ignored = masked[n] < 0;
    EXPECT_EQ(losses[n], ignored ? 0.0f : want_losses[n]) << n;
    for (int i = 0; i < Vp; ++i) {
      ASSERT_EQ(d[n * Vp + i], ignored ? 0.0f : want_d[n * Vp + i]) << n << "," << i;
    }
  }
}

TEST(SoftmaxCrossEntropy, NegativeTargetsAreIgnoredWhenCappedAndIn16Bits) {
  constexpr int N = 4, V = 1000, Vp = 1024;
  const std::vector<int32_t> all = {0, 999, 5, 17};
  const std::vector<int32_t> masked = {0, -1, 5, -1};
  const auto logits = RandomFloats(N * Vp, 61, -30.0f, 30.0f);
  std::vector<float> want_losses(N), want_d(N * Vp), losses(N), d(N * Vp, 3.0f);
  SoftmaxCrossEntropy(want_losses.data(), want_d.data(), logits.data(), all.data(), 0.25f, N, V, Vp,
                      /*softcap=*/30.0f);
  SoftmaxCrossEntropy(losses.data(), d.data(), logits.data(), masked.data(), 0.25f, N, V, Vp,
                      /*softcap=*/30.0f);
  for (int n = 0; n < N; ++n) {
    const bool ignored = masked[n] < 0;
    EXPECT_EQ(losses[n], ignored ? 0.0f : want_losses[n]) << n;
    for (int i = 0; i < Vp; ++i) {
      ASSERT_EQ(d[n * Vp + i], ignored ? 0.0f : want_d[n * Vp + i]) << n << "," << i;
    }
  }
  for (const DType type : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    std::vector<uint16_t> low(N * Vp), want16(N * Vp), got16(N * Vp, 0x3c00);
    FromFloat(logits.data(), low.data(), type, N * Vp);
    SoftmaxCrossEntropy16(want_losses.data(), want16.data(), low.data(), all.data(), 0.25f, N, V,
                          Vp, type);
    SoftmaxCrossEntropy16(losses.data(), got16.data(), low.data(), masked.data(), 0.25f, N, V, Vp,
                          type);
    for (int n = 0; n < N; ++n) {
      const bool ignored = masked[n] < 0;
      EXPECT_EQ(losses[n], ignored ? 0.0f : want_losses[n]) << n;
      for (int i = 0; i < Vp; ++i) {
        ASSERT_EQ(got16[n * Vp + i], ignored ? uint16_t{0} : want16[n * Vp + i]) << n << "," << i;
      }
    }
  }
}

TEST(SoftmaxCrossEntropy, UniformLogitsGiveLogV) {
  const int N = 2, V = 50257, Vp = 50304;
  std::vector<float> logits(N * Vp, 0.5f), losses(N);
  const std::vector<int32_t> targets = {0, 50256};
  SoftmaxCrossEntropy(losses.data(), nullptr, logits.data(), targets.data(), 1.0f, N, V, Vp);
  for (float l : losses) EXPECT_NEAR(l, std::log(50257.0), 1e-5);
}

// The 16-bit form widens a row at a time: bit for bit the whole array widened, the fp32 kernel,
// and the gradient rounded once; in place too.
TEST(SoftmaxCrossEntropy16, IsTheFp32KernelOnWidenedRowsRoundedOnce) {
  constexpr int N = 9, V = 1000, Vp = 1024;
  const std::vector<int32_t> targets = {0, 999, 5, 17, 500, 3, 998, 250, 1};
  for (const DType type : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(type));
    std::vector<uint16_t> logits(N * Vp);
    FromFloat(RandomFloats(N * Vp, 60, -4.0f, 4.0f).data(), logits.data(), type, N * Vp);
    std::vector<float> wide(N * Vp), want_d(N * Vp), want_losses(N);
    ToFloat(logits.data(), type, wide.data(), N * Vp);
    SoftmaxCrossEntropy(want_losses.data(), want_d.data(), wide.data(), targets.data(), 0.25f, N, V,
                        Vp);
    std::vector<uint16_t> want(N * Vp), got(N * Vp), in_place = logits;
    FromFloat(want_d.data(), want.data(), type, N * Vp);
    std::vector<float> losses(N), losses_in_place(N);
    SoftmaxCrossEntropy16(losses.data(), got.data(), logits.data(), targets.data(), 0.25f, N, V, Vp,
                          type);
    SoftmaxCrossEntropy16(losses_in_place.data(), in_place.data(), in_place.data(), targets.data(),
                          0.25f, N, V, Vp, type);
    EXPECT_EQ(losses, want_losses);
    EXPECT_EQ(losses_in_place, want_losses);
    EXPECT_EQ(got, want);
    EXPECT_EQ(in_place, want);
  }
}

}  // namespace
}  // namespace hoist::kernels::cpu
