// The 8-bit AdamW on the GPU against cpu::AdamW8bitStep, its oracle: the same operations on both
// sides (look-ups, correctly rounded fp32 arithmetic without FMA, exact maxima, comparisons with
// the same midpoints), so parameters, codes, absmaxes and copies agree to the bit.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/adamw8bit_step.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/cast.h"
#include "kernels/cuda/adamw8bit.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::RandomFloats;

// Device bytes, uploaded from and downloaded to host vectors.
class Bytes {
 public:
  explicit Bytes(size_t n) : n_(n) { EXPECT_EQ(cudaMalloc(&data_, n > 0 ? n : 1), cudaSuccess); }
  ~Bytes() { cudaFree(data_); }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  template <typename T>
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(cudaMemcpy(data_, host.data(), n_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> out(n_ / sizeof(T));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), data_, n_, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t n_;
};

struct Tensor {
  Tensor(size_t n, float wd, DType grad_type, uint32_t seed)
      : n(n),
        weight_decay(wd),
        param(RandomFloats(n, seed)),
        grad16(n),
        copy(n, 0xffff),
        m(n),
        v(n),
        absmax_m(static_cast<size_t>(cpu::QuantBlocks(static_cast<int64_t>(n)))),
        absmax_v(absmax_m.size()),
        d_param(n * 4),
        d_grad(n * 4),
        d_copy(n * 2),
        d_m(n),
        d_v(n),
        d_absmax_m(absmax_m.size() * 4),
        d_absmax_v(absmax_m.size() * 4) {
    grad = RandomFloats(n, seed + 1);
    std::vector<float> m32 = RandomFloats(n, seed + 2, -1e-2f, 1e-2f);
    std::vector<float> v32 = RandomFloats(n, seed + 3, 0.0f, 1e-3f);
    const auto sn = static_cast<int64_t>(n);
    cpu::QuantizeBlockwise(cpu::SignedDynamicMap(), m32.data(), sn, m.data(), absmax_m.data());
    cpu::QuantizeBlockwise(cpu::UnsignedDynamicMap(), v32.data(), sn, v.data(), absmax_v.data());
    if (grad_type == DType::kBFloat16) cpu::CastFp32ToBf16(grad16.data(), grad.data(), sn);
    if (grad_type == DType::kFloat16) cpu::CastFp32ToFp16(grad16.data(), grad.data(), sn);
    d_param.Upload(param);
    if (grad_type == DType::kFloat32) {
      d_grad.Upload(grad);
    } else {
      grad16.resize(2 * n);  // the device array's size in uint16_t
      d_grad.Upload(grad16);
      grad16.resize(n);
    }
    d_copy.Upload(copy);
    d_m.Upload(m);
    d_v.Upload(v);
    d_absmax_m.Upload(absmax_m);
    d_absmax_v.Upload(absmax_v);
  }

  size_t n;
  float weight_decay;
  std::vector<float> param, grad;
  std::vector<uint16_t> grad16, copy;
  std::vector<uint8_t> m, v;
  std::vector<float> absmax_m, absmax_v;
  Bytes d_param, d_grad, d_copy, d_m, d_v, d_absmax_m, d_absmax_v;
};

class CudaAdamW8bitTest : public CudaKernelTest {};

TEST_F(CudaAdamW8bitTest, MatchesTheCpuStepBitForBit) {
  const struct {
    DType grad, copy;
  } formats[] = {{DType::kFloat32, DType::kFloat32},
                 {DType::kBFloat16, DType::kBFloat16},
                 {DType::kFloat16, DType::kFloat16}};
  const size_t sizes[] = {1, 255, 256, 1000, 70000, 300};
  for (const auto& f : formats) {
    std::vector<std::unique_ptr<Tensor>> tensors;
    std::vector<AdamW8bitTensor> device;
    for (size_t k = 0; k < std::size(sizes); ++k) {
      tensors.push_back(std::make_unique<Tensor>(sizes[k], k % 2 ? 0.1f : 0.0f, f.grad,
                                                 static_cast<uint32_t>(10 * k)));
      Tensor& t = *tensors.back();
      device.push_back({t.d_param.as<float>(), t.d_m.as<uint8_t>(), t.d_v.as<uint8_t>(),
                        t.d_absmax_m.as<float>(), t.d_absmax_v.as<float>(), t.d_grad.as<void>(),
                        IsHalf(f.copy) ? t.d_copy.as<void>() : nullptr, static_cast<int64_t>(t.n),
                        t.weight_decay});
    }
    AdamWStepParams params;
    params.lr = 1e-2f;
    params.beta1 = 0.9f;
    params.beta2 = 0.95f;
    params.grad_scale = 0.5f;
    params.step = 3;
    HOIST_ASSERT_OK(AdamW8bitMultiTensor(device, f.grad, f.copy, params, stream()));
    for (auto& tp : tensors) {
      Tensor& t = *tp;
      cpu::AdamW8bitShard s;
      s.param = t.param.data();
      s.m = t.m.data();
      s.v = t.v.data();
      s.absmax_m = t.absmax_m.data();
      s.absmax_v = t.absmax_v.data();
      s.grad = f.grad == DType::kFloat32 ? static_cast<const void*>(t.grad.data())
                                         : static_cast<const void*>(t.grad16.data());
      s.grad_format = f.grad;
      s.param_copy = IsHalf(f.copy) ? t.copy.data() : nullptr;
      s.copy_format = f.copy == DType::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
      s.n = t.n;
      cpu::AdamWHyperparams h;
      h.lr = params.lr;
      h.beta1 = params.beta1;
      h.beta2 = params.beta2;
      h.eps = params.eps;
      h.weight_decay = t.weight_decay;
      h.grad_scale = params.grad_scale;
      h.step = params.step;
      cpu::AdamW8bitStep(s, h);
      SCOPED_TRACE("n=" + std::to_string(t.n) + " grad " + DTypeName(f.grad));
      const std::vector<float> param = t.d_param.Download<float>();
      EXPECT_EQ(std::memcmp(param.data(), t.param.data(), t.n * sizeof(float)), 0);
      EXPECT_EQ(t.d_m.Download<uint8_t>(), t.m);
      EXPECT_EQ(t.d_v.Download<uint8_t>(), t.v);
      EXPECT_EQ(t.d_absmax_m.Download<float>(), t.absmax_m);
      EXPECT_EQ(t.d_absmax_v.Download<float>(), t.absmax_v);
      if (IsHalf(f.copy)) {
        EXPECT_EQ(t.d_copy.Download<uint16_t>(), t.copy);
      }
    }
  }
}

TEST_F(CudaAdamW8bitTest, RefusesADeviceGradScale) {
  float scale = 1.0f;
  AdamWStepParams params;
  params.device_grad_scale = &scale;
  EXPECT_FALSE(AdamW8bitMultiTensor({}, DType::kFloat32, DType::kFloat32, params, stream()).ok());
}

}  // namespace
}  // namespace hoist::kernels::cuda
