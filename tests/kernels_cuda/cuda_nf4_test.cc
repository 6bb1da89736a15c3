// The CUDA backend's DequantizeNf4 against the CPU backend's on the same codes and absmaxes: the
// same bits in every dtype, for sizes that are odd, not multiples of the block, and larger than
// one grid's worth of threads; nothing written past out; the same argument refusals. Skipped where
// no GPU is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/nf4.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/nf4.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels {
namespace {

using cuda::testing::RandomFloats;

// Bytes in device memory, freed with the object.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&data_, bytes > 0 ? bytes : 1), cudaSuccess);
  }
  DeviceBytes(const void* host, size_t bytes) : DeviceBytes(bytes) {
    EXPECT_EQ(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // see DeviceArray::Settle
  }
  ~DeviceBytes() { cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void Fill(int value) {
    EXPECT_EQ(cudaMemset(data_, value, bytes_), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<char> Download() const {
    std::vector<char> out(bytes_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  size_t bytes_;
  void* data_ = nullptr;
};

class CudaNf4 : public ::testing::Test {
 protected:
  void SetUp() override {
    HOIST_SKIP_WITHOUT_GPU();
    auto backend = CudaBackend::Create(0, &tracker_);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    gpu_ = std::move(backend).value();
  }
  const Stream& cs() const { return cpu_.compute_stream(); }
  const Stream& gs() const { return gpu_->compute_stream(); }
  MemoryTracker tracker_;
  CpuDevice host_device_{Place::kHost, &tracker_};
  CpuBackend cpu_{&host_device_};
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(CudaNf4, DequantizeIsTheCpusBitForBit) {
  // kMaxBlocks * 256 threads cover 2^21 bytes: the largest size takes the grid-stride loop.
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{63}, int64_t{65}, int64_t{4097},
                    int64_t{1000003}, (int64_t{1} << 22) + 129}) {
    std::vector<float> src = RandomFloats(static_cast<size_t>(n), 5, -0.05f, 0.05f);
    if (n > 200) {
      for (int64_t i = 64; i < 128; ++i) src[i] = 0.0f;  // a block of absmax 0
    }
    std::vector<uint8_t> codes(static_cast<size_t>(nf4::CodeBytes(n)));
    std::vector<float> absmax(static_cast<size_t>(nf4::Blocks(n)));
    HOIST_ASSERT_OK(cpu::QuantizeNf4(src.data(), n, codes.data(), absmax.data()));
    DeviceBytes d_codes(codes.data(), codes.size()),
        d_absmax(absmax.data(), absmax.size() * sizeof(float));
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " n " + std::to_string(n));
      const size_t bytes = static_cast<size_t>(n) * DTypeSize(t);
      std::vector<char> want(bytes);
      HOIST_ASSERT_OK(cpu_.DequantizeNf4(want.data(), t, codes.data(), absmax.data(), n, cs()));
      ASSERT_TRUE(cs().Synchronize().ok());
      DeviceBytes d_out(bytes + 64);
      d_out.Fill(0xFF);  // NaN bits: an element not written fails the compare
      HOIST_ASSERT_OK(gpu_->DequantizeNf4(d_out.as<void>(), t, d_codes.as<uint8_t>(),
                                          d_absmax.as<float>(), n, gs()));
      ASSERT_TRUE(gs().Synchronize().ok());
      const std::vector<char> got = d_out.Download();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "GPU != CPU";
      for (size_t i = bytes; i < got.size(); ++i) {
        ASSERT_EQ(static_cast<unsigned char>(got[i]), 0xFF) << "written past out at " << i;
      }
    }
  }
}

TEST_F(CudaNf4, AbsmaxDequantizeIsTheCpusBitForBit) {
  // Double quantization's absmaxes: 8-bit codes, one scale per 256, an offset.
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{1000003}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> centred = RandomFloats(static_cast<size_t>(n), 7, -0.03f, 0.03f);
    std::vector<uint8_t> codes(static_cast<size_t>(n));
    std::vector<float> scales(static_cast<size_t>(cpu::QuantBlocks(n)));
    cpu::QuantizeBlockwise(cpu::SignedDynamicMap(), centred.data(), n, codes.data(), scales.data());
    const float offset = 0.0417f;
    std::vector<float> want(static_cast<size_t>(n));
    HOIST_ASSERT_OK(
        cpu_.DequantizeNf4Absmax(want.data(), codes.data(), scales.data(), offset, n, cs()));
    ASSERT_TRUE(cs().Synchronize().ok());
    DeviceBytes d_codes(codes.data(), codes.size()),
        d_scales(scales.data(), scales.size() * sizeof(float));
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    DeviceBytes d_out(bytes + 64);
    d_out.Fill(0xFF);
    HOIST_ASSERT_OK(gpu_->DequantizeNf4Absmax(d_out.as<float>(), d_codes.as<uint8_t>(),
                                              d_scales.as<float>(), offset, n, gs()));
    ASSERT_TRUE(gs().Synchronize().ok());
    const std::vector<char> got = d_out.Download();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "GPU != CPU";
    for (size_t i = bytes; i < got.size(); ++i) {
      ASSERT_EQ(static_cast<unsigned char>(got[i]), 0xFF) << "written past out at " << i;
    }
  }
}

TEST_F(CudaNf4, DequantizeRefusesWhatTheCpuRefuses) {
  DeviceBytes out(64), codes(64), absmax(64);
  const auto same = [](const Status& gpu, const Status& cpu) {
    EXPECT_EQ(gpu.code(), StatusCode::kInvalidArgument) << gpu.ToString();
    EXPECT_EQ(gpu.ToString(), cpu.ToString());
  };
  void* o = out.as<void>();
  const uint8_t* c = codes.as<uint8_t>();
  const float* a = absmax.as<float>();
  same(gpu_->DequantizeNf4(o, DType::kFloat32, c, a, -1, gs()),
       cpu_.DequantizeNf4(o, DType::kFloat32, c, a, -1, cs()));
  same(gpu_->DequantizeNf4(nullptr, DType::kBFloat16, c, a, 3, gs()),
       cpu_.DequantizeNf4(nullptr, DType::kBFloat16, c, a, 3, cs()));
  same(gpu_->DequantizeNf4(o, DType::kFloat16, nullptr, a, 3, gs()),
       cpu_.DequantizeNf4(o, DType::kFloat16, nullptr, a, 3, cs()));
  same(gpu_->DequantizeNf4(o, DType::kFloat32, c, nullptr, 3, gs()),
       cpu_.DequantizeNf4(o, DType::kFloat32, c, nullptr, 3, cs()));
  HOIST_ASSERT_OK(gpu_->DequantizeNf4(nullptr, DType::kFloat32, nullptr, nullptr, 0, gs()));
}

}  // namespace
}  // namespace hoist::kernels
