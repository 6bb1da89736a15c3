// Helpers shared by the CUDA kernel tests: a fixture that skips where no GPU is visible and gives
// each test a stream, device arrays that convert from and to the CPU's fp32 vectors, poisoning
// (every output is filled with NaN bits before the op runs, so an element the op forgets shows),
// and the tolerance each dtype allows. The CPU twin in kernels/cpu/ is every test's oracle.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "core/cuda/stream.h"
#include "kernels/cpu/cast.h"
#include "kernels/cuda/dtype.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cuda::testing {

using ::hoist::kernels::cpu::testing::ExpectAllClose;
using ::hoist::kernels::cpu::testing::RandomFloats;

#define HOIST_SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                             \
    if (::hoist::CudaDeviceCount() == 0) {                                                         \
      GTEST_SKIP() << "no CUDA GPU visible (driver " << ::hoist::CudaDriverVersionString() << ")"; \
    }                                                                                              \
  } while (0)

#define HOIST_ASSERT_OK(expr)                                    \
  do {                                                           \
    const ::hoist::Status hoist_status_ = (expr);                \
    ASSERT_TRUE(hoist_status_.ok()) << hoist_status_.ToString(); \
  } while (0)

// Rounds each value to `type` and back (what the GPU sees when it reads a `type` array).
inline std::vector<float> RoundTo(DType type, std::vector<float> x) {
  if (type == DType::kFloat32) return x;
  std::vector<uint16_t> bits(x.size());
  if (type == DType::kBFloat16) {
    cpu::CastFp32ToBf16(bits.data(), x.data(), static_cast<int64_t>(x.size()));
    cpu::CastBf16ToFp32(x.data(), bits.data(), static_cast<int64_t>(x.size()));
  } else {
    cpu::CastFp32ToFp16(bits.data(), x.data(), static_cast<int64_t>(x.size()));
    cpu::CastFp16ToFp32(x.data(), bits.data(), static_cast<int64_t>(x.size()));
  }
  return x;
}

// The |a - b| <= atol + rtol |ref| bounds for one op's outputs in `type`, where the op's result
// is rounded once to `type` (fp32: only the order of additions differs from the CPU).
struct Tolerance {
  double atol, rtol;
};
inline Tolerance ToleranceFor(DType type) {
  switch (type) {
    case DType::kFloat32: return {1e-5, 1e-4};
    case DType::kBFloat16:
      return {1e-2, 1.6e-2};  // 8 bits of mantissa: one rounding is 2^-8 relative
    case DType::kFloat16: return {1e-3, 2e-3};
  }
  return {0, 0};
}

// n elements of `type` in device memory, freed with the object. Not copyable.
class DeviceArray {
 public:
  DeviceArray(DType type, size_t n) : type_(type), n_(n) {
    EXPECT_EQ(cudaMalloc(&data_, bytes() > 0 ? bytes() : 1), cudaSuccess);
  }
  // fp32 values rounded into `type` (the array holds RoundTo(type, values)).
  DeviceArray(DType type, const std::vector<float>& values) : DeviceArray(type, values.size()) {
    Upload(values);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * DTypeSize(type_); }
  DType type() const { return type_; }

  void Upload(const std::vector<float>& values) {
    ASSERT_EQ(values.size(), n_);
    if (type_ == DType::kFloat32) {
      ASSERT_EQ(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
      Settle();
      return;
    }
    std::vector<uint16_t> bits(n_);
    if (type_ == DType::kBFloat16) {
      cpu::CastFp32ToBf16(bits.data(), values.data(), static_cast<int64_t>(n_));
    } else {
      cpu::CastFp32ToFp16(bits.data(), values.data(), static_cast<int64_t>(n_));
    }
    ASSERT_EQ(cudaMemcpy(data_, bits.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    Settle();
  }
  // Waits for the device, then widens every element to fp32.
  std::vector<float> Download() const {
    std::vector<float> out(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (type_ == DType::kFloat32) {
      EXPECT_EQ(cudaMemcpy(out.data(), data_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      return out;
    }
    std::vector<uint16_t> bits(n_);
    EXPECT_EQ(cudaMemcpy(bits.data(), data_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (type_ == DType::kBFloat16) {
      cpu::CastBf16ToFp32(out.data(), bits.data(), static_cast<int64_t>(n_));
    } else {
      cpu::CastFp16ToFp32(out.data(), bits.data(), static_cast<int64_t>(n_));
    }
    return out;
  }
  // All bits set: a NaN in every type, so an element the op does not write fails the compare.
  void Poison() {
    EXPECT_EQ(cudaMemset(data_, 0xFF, bytes()), cudaSuccess);
    Settle();
  }

 private:
  // Plain cudaMemcpy and cudaMemset go to the legacy default stream, which the tests' own
  // (non-blocking) streams do not wait for, and may return before the device has the bytes:
  // wait for them before any op reads or overwrites the array.
  static void Settle() { EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

  DType type_;
  size_t n_;
  void* data_ = nullptr;
};

// int32 tokens or targets on the device.
class DeviceInts {
 public:
  explicit DeviceInts(const std::vector<int32_t>& values) : n_(values.size()) {
    // cuda_runtime_api.h has only the void** overload of cudaMalloc.
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), n_ * sizeof(int32_t) + 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), n_ * sizeof(int32_t), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // see DeviceArray::Settle
  }
  ~DeviceInts() { cudaFree(data_); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  const int32_t* data() const { return data_; }

 private:
  size_t n_;
  int32_t* data_ = nullptr;
};

// Every CUDA kernel test: skips without a GPU, else runs on GPU 0 with a stream of its own.
class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HOIST_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    StatusOr<CudaStream> stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    stream_ = std::move(*stream);
  }
  cudaStream_t stream() const { return stream_.get(); }

  CudaStream stream_;
};

// The dtypes a parameterized test runs over, named for gtest.
inline std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) {
  return DTypeName(info.param);
}

}  // namespace hoist::kernels::cuda::testing
