// The multi-span sum of squares on the GPU against cpu::SumOfSquares (fp64 throughout).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/reduce.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::DeviceArray;
using testing::RandomFloats;

// The GPU sums fp32 partials (fp64 only across blocks), the CPU sums in fp64: the relative
// difference stays near a few fp32 ulps of the (positive) sum, far below 1e-5.
constexpr double kRtol = 1e-5;

class CudaSumOfSquares : public CudaKernelTest {
 protected:
  // Uploads every host array, runs the op twice and returns the result, checking both runs
  // agree to the bit (the op's determinism).
  double Run(const std::vector<std::vector<float>>& host) {
    std::vector<std::unique_ptr<DeviceArray>> arrays;
    std::vector<DeviceSpan> spans;
    for (const std::vector<float>& h : host) {
      arrays.push_back(std::make_unique<DeviceArray>(DType::kFloat32, h.empty() ? 1 : h.size()));
      if (!h.empty()) arrays.back()->Upload(h);
      spans.push_back(
          {h.empty() ? nullptr : arrays.back()->as<float>(), static_cast<int64_t>(h.size())});
    }
    DeviceArray workspace(DType::kFloat32, SumOfSquaresWorkspaceFloats());
    DeviceArray out(DType::kFloat32, 2);  // one double
    double results[2] = {-1.0, -1.0};
    for (double& result : results) {
      workspace.Poison();
      out.Poison();
      const Status status = SumOfSquares(spans, reinterpret_cast<double*>(out.data()),
                                         workspace.as<float>(), stream());
      EXPECT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(&result, out.data(), sizeof(double), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    EXPECT_EQ(std::memcmp(&results[0], &results[1], sizeof(double)), 0) << "not deterministic";
    return results[0];
  }

  static double CpuSum(const std::vector<std::vector<float>>& host) {
    double sum = 0.0;
    for (const std::vector<float>& h : host) sum += cpu::SumOfSquares(h.data(), h.size());
    return sum;
  }
};

TEST_F(CudaSumOfSquares, OddSpansWithAnEmptyOne) {
  const std::vector<std::vector<float>> host = {
      RandomFloats(37, 1), {}, RandomFloats(16385, 2), RandomFloats(1, 3), RandomFloats(100003, 4)};
  const double want = CpuSum(host);
  EXPECT_NEAR(Run(host), want, kRtol * want);
}

// More spans than one launch holds: the partials of later launches add to the earlier ones.
TEST_F(CudaSumOfSquares, ManySpansTakeSeveralLaunches) {
  std::vector<std::vector<float>> host;
  for (int i = 0; i < 150; ++i) host.push_back(RandomFloats(1 + 97 * i, 10 + i, -3.0f, 3.0f));
  const double want = CpuSum(host);
  EXPECT_NEAR(Run(host), want, kRtol * want);
}

// More chunks than the fixed grid has blocks, so some blocks take two.
TEST_F(CudaSumOfSquares, LargeSpanWrapsAroundTheGrid) {
  const std::vector<std::vector<float>> host = {RandomFloats(9000001, 5)};
  const double want = CpuSum(host);
  EXPECT_NEAR(Run(host), want, kRtol * want);
}

TEST_F(CudaSumOfSquares, NoSpansGivesZero) {
  EXPECT_EQ(Run({}), 0.0);
  EXPECT_EQ(Run(std::vector<std::vector<float>>(2)), 0.0);
}

}  // namespace
}  // namespace hoist::kernels::cuda
