// Casts and the loss-scale unscale on the GPU against cpu::Cast* and cpu::UnscaleInPlace: both
// round to nearest even, so finite values must agree to the bit.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cast.h"
#include "kernels/cuda/cast.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::DeviceArray;

// Finite values over a wide exponent range, with the edge cases of narrowing: fp16 overflow and
// the largest value that still rounds down, subnormals of both 16-bit types, signed zeros and
// exact ties of both formats.
std::vector<float> CastInputs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::vector<float> x(n);
  for (float& v : x) v = std::ldexp(mantissa(rng), exponent(rng));
  const float edges[] = {0.0f,  -0.0f,  65504.0f, 65519.0f,          65520.0f,           -70000.0f,
                         1e-6f, -3e-8f, 1e-40f,   1.0f + 1.0f / 256, 1.0f + 1.0f / 2048, 3.4e38f};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]) && i < n; ++i) x[i] = edges[i];
  return x;
}

std::vector<uint16_t> HalfBits(DType type, const std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  if (type == DType::kBFloat16) {
    cpu::CastFp32ToBf16(bits.data(), x.data(), static_cast<int64_t>(x.size()));
  } else {
    cpu::CastFp32ToFp16(bits.data(), x.data(), static_cast<int64_t>(x.size()));
  }
  return bits;
}

template <typename T>
std::vector<T> DownloadRaw(const void* p, size_t n) {
  std::vector<T> out(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

class CudaCast : public CudaKernelTest {};

// n = 4099: vector path plus a tail; offset 1: the scalar path (pointers off 16-byte alignment).
TEST_F(CudaCast, NarrowingMatchesCpuBits) {
  for (const DType type : {DType::kBFloat16, DType::kFloat16}) {
    for (const size_t offset : {size_t{0}, size_t{1}}) {
      const size_t n = 4099;
      const std::vector<float> in = CastInputs(n + offset, 1);
      const std::vector<uint16_t> want = HalfBits(type, in);
      DeviceArray d_in(DType::kFloat32, in), d_out(type, n + offset);
      d_out.Poison();
      HOIST_ASSERT_OK(Cast(d_out.as<uint16_t>() + offset, type, d_in.as<float>() + offset,
                           DType::kFloat32, static_cast<int64_t>(n), stream()));
      const std::vector<uint16_t> got = DownloadRaw<uint16_t>(d_out.as<uint16_t>(), n + offset);
      for (size_t i = offset; i < n + offset; ++i) {
        ASSERT_EQ(got[i], want[i]) << DTypeName(type) << " element " << i << " of " << in[i];
      }
    }
  }
}

TEST_F(CudaCast, WideningIsExact) {
  for (const DType type : {DType::kBFloat16, DType::kFloat16}) {
    const size_t n = 1003;
    const std::vector<float> in = testing::RoundTo(type, CastInputs(n, 2));
    DeviceArray d_in(type, in), d_out(DType::kFloat32, n);
    d_out.Poison();
    HOIST_ASSERT_OK(
        Cast(d_out.data(), DType::kFloat32, d_in.data(), type, static_cast<int64_t>(n), stream()));
    const std::vector<float> got = d_out.Download();
    ASSERT_EQ(std::memcmp(got.data(), in.data(), n * sizeof(float)), 0) << DTypeName(type);
  }
}

// Between the 16-bit types through fp32: one rounding, as the CPU's widen-then-narrow.
TEST_F(CudaCast, SixteenBitToSixteenBitRoundsOnce) {
  const size_t n = 517;
  const DType pairs[][2] = {{DType::kBFloat16, DType::kFloat16},
                            {DType::kFloat16, DType::kBFloat16}};
  for (const auto& pair : pairs) {
    const DType from = pair[0], to = pair[1];
    const std::vector<float> in = testing::RoundTo(from, CastInputs(n, 3));
    const std::vector<uint16_t> want = HalfBits(to, in);
    DeviceArray d_in(from, in), d_out(to, n);
    d_out.Poison();
    HOIST_ASSERT_OK(Cast(d_out.data(), to, d_in.data(), from, static_cast<int64_t>(n), stream()));
    const std::vector<uint16_t> got = DownloadRaw<uint16_t>(d_out.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << DTypeName(from) << "->" << DTypeName(to) << " " << in[i];
    }
  }
}

TEST_F(CudaCast, SameTypeCopies) {
  const size_t n = 77;
  const std::vector<float> in = testing::RoundTo(DType::kFloat16, CastInputs(n, 4));
  DeviceArray d_in(DType::kFloat16, in), d_out(DType::kFloat16, n);
  d_out.Poison();
  HOIST_ASSERT_OK(Cast(d_out.data(), DType::kFloat16, d_in.data(), DType::kFloat16,
                       static_cast<int64_t>(n), stream()));
  EXPECT_EQ(DownloadRaw<uint16_t>(d_out.data(), n), DownloadRaw<uint16_t>(d_in.data(), n));
}

TEST_F(CudaCast, NanStaysNan) {
  const std::vector<float> in = {std::numeric_limits<float>::quiet_NaN(),
                                 -std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::infinity()};
  for (const DType type : {DType::kBFloat16, DType::kFloat16}) {
    DeviceArray d_in(DType::kFloat32, in), d_half(type, in.size()), d_back(DType::kFloat32, 3);
    HOIST_ASSERT_OK(Cast(d_half.data(), type, d_in.data(), DType::kFloat32, 3, stream()));
    HOIST_ASSERT_OK(Cast(d_back.data(), DType::kFloat32, d_half.data(), type, 3, stream()));
    const std::vector<float> got = d_back.Download();
    EXPECT_TRUE(std::isnan(got[0])) << DTypeName(type);
    EXPECT_TRUE(std::isnan(got[1])) << DTypeName(type);
    EXPECT_EQ(got[2], std::numeric_limits<float>::infinity()) << DTypeName(type);
  }
}

class CudaUnscale : public CudaKernelTest {
 protected:
  // Runs the GPU unscale on x with the flag starting at `flag_start`; returns the flag.
  int Run(std::vector<float>* x, float scale, int flag_start) {
    DeviceArray d_x(DType::kFloat32, *x);
    int* d_flag = nullptr;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_flag), sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d_flag, &flag_start, sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // before the op's stream reads it
    const Status status =
        UnscaleAndCheck(d_x.as<float>(), static_cast<int64_t>(x->size()), scale, d_flag, stream());
    EXPECT_TRUE(status.ok()) << status.ToString();
    *x = d_x.Download();
    int flag = -1;
    EXPECT_EQ(cudaMemcpy(&flag, d_flag, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d_flag);
    return flag;
  }
};

TEST_F(CudaUnscale, MatchesCpuBitsAndLeavesFlagClear) {
  for (const float scale : {1024.0f, 3.0f, 0.75f}) {
    std::vector<float> want = testing::RandomFloats(4099, 5, -100.0f, 100.0f);
    std::vector<float> got = want;
    ASSERT_TRUE(cpu::UnscaleInPlace(want.data(), static_cast<int64_t>(want.size()), scale));
    EXPECT_EQ(Run(&got, scale, 0), 0) << scale;
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << scale;
  }
}

TEST_F(CudaUnscale, FlagsNonFiniteInputsAndOverflow) {
  std::vector<float> x = testing::RandomFloats(1000, 6);
  x[997] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Run(&x, 1024.0f, 0), 1);

  x = testing::RandomFloats(1000, 7);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Run(&x, 1024.0f, 0), 1);

  x = testing::RandomFloats(37, 8);
  x[36] = 3e38f;  // finite, but 3e38 / 0.5 leaves the fp32 range
  EXPECT_EQ(Run(&x, 0.5f, 0), 1);
}

TEST_F(CudaUnscale, NeverClearsTheFlag) {
  std::vector<float> x = testing::RandomFloats(100, 9);
  EXPECT_EQ(Run(&x, 2.0f, 1), 1);
}

}  // namespace
}  // namespace hoist::kernels::cuda
