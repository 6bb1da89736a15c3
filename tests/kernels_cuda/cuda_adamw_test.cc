// The multi-tensor AdamW on the GPU against cpu::AdamWFusedStep: the same sequence of correctly
// rounded fp32 operations on both sides, so parameters, moments and copies agree to the bit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/adamw_step.h"
#include "kernels/cpu/cast.h"
#include "kernels/cuda/adamw.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels::cuda {
namespace {

using testing::CudaKernelTest;
using testing::DeviceArray;
using testing::RandomFloats;

struct TensorSpec {
  int64_t n;
  float weight_decay;
  bool has_copy;
  int64_t skew = 0;        // elements before the tensor in each array: 0 keeps the arrays aligned
  int64_t grad_skew = -1;  // the gradient's, where it differs (-1: skew)
  int64_t GradSkew() const { return grad_skew < 0 ? skew : grad_skew; }
};

// One tensor's state on the host (the CPU twin's) and on the device.
struct Tensor {
  Tensor(const TensorSpec& spec, DType grad_type, DType copy_type, uint32_t seed)
      : spec(spec),
        param(RandomFloats(spec.n + spec.skew, seed)),
        m(RandomFloats(spec.n + spec.skew, seed + 1, -0.1f, 0.1f)),
        v(RandomFloats(spec.n + spec.skew, seed + 2, 0.0f, 0.01f)),
        grad(testing::RoundTo(grad_type, RandomFloats(spec.n + spec.GradSkew(), seed + 3))),
        copy(spec.n + spec.skew),
        d_param(DType::kFloat32, param),
        d_m(DType::kFloat32, m),
        d_v(DType::kFloat32, v),
        d_grad(grad_type, grad),
        d_copy(copy_type, spec.n + spec.skew) {
    d_copy.Poison();
    if (grad_type != DType::kFloat32) {
      grad_bits.resize(grad.size());
      if (grad_type == DType::kBFloat16) {
        cpu::CastFp32ToBf16(grad_bits.data(), grad.data(), static_cast<int64_t>(grad.size()));
      } else {
        cpu::CastFp32ToFp16(grad_bits.data(), grad.data(), static_cast<int64_t>(grad.size()));
      }
    }
  }

  AdamWTensor Device() const {
    const auto at = [&](const DeviceArray& a, int64_t skew) {
      return static_cast<char*>(a.data()) + skew * static_cast<int64_t>(DTypeSize(a.type()));
    };
    return {reinterpret_cast<float*>(at(d_param, spec.skew)),
            reinterpret_cast<float*>(at(d_m, spec.skew)),
            reinterpret_cast<float*>(at(d_v, spec.skew)),
            at(d_grad, spec.GradSkew()),
            spec.has_copy ? at(d_copy, spec.skew) : nullptr,
            spec.n,
            spec.weight_decay};
  }

  TensorSpec spec;
  std::vector<float> param, m, v, grad;
  std::vector<uint16_t> grad_bits, copy;
  DeviceArray d_param, d_m, d_v, d_grad, d_copy;
};

// One step on both sides, then compares every array bit for bit. cpu_grad_scale is the factor the
// GPU ends up multiplying by (host grad_scale times the device scale, rounded once in fp32).
void StepAndCompare(std::vector<std::unique_ptr<Tensor>>& tensors, DType grad_type, DType copy_type,
                    const AdamWStepParams& params, float cpu_grad_scale, cudaStream_t stream) {
  std::vector<AdamWTensor> device;
  for (const auto& t : tensors) device.push_back(t->Device());
  HOIST_ASSERT_OK(AdamWMultiTensor(device, grad_type, copy_type, params, stream));

  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor& t = *tensors[i];
    if (t.spec.n == 0) continue;
    cpu::AdamWShard shard;
    const size_t skew = static_cast<size_t>(t.spec.skew);
    shard.param = t.param.data() + skew;
    shard.m = t.m.data() + skew;
    shard.v = t.v.data() + skew;
    const size_t grad_skew = static_cast<size_t>(t.spec.GradSkew());
    shard.grad = grad_type == DType::kFloat32
                     ? static_cast<const void*>(t.grad.data() + grad_skew)
                     : static_cast<const void*>(t.grad_bits.data() + grad_skew);
    shard.grad_format = grad_type;
    // The CPU writes only 16-bit copies; an fp32 copy is compared with the parameter itself.
    const bool half_copy = t.spec.has_copy && copy_type != DType::kFloat32;
    shard.param_copy = half_copy ? t.copy.data() + skew : nullptr;
    shard.copy_format = copy_type == DType::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
    shard.n = static_cast<size_t>(t.spec.n);
    cpu::AdamWHyperparams h;
    h.lr = params.lr;
    h.beta1 = params.beta1;
    h.beta2 = params.beta2;
    h.eps = params.eps;
    h.weight_decay = t.spec.weight_decay;
    h.grad_scale = cpu_grad_scale;
    h.step = params.step;
    cpu::AdamWFusedStep(shard, h);

    const size_t bytes = t.param.size() * sizeof(float);
    ASSERT_EQ(std::memcmp(t.d_param.Download().data(), t.param.data(), bytes), 0)
        << "param of tensor " << i << " (n " << t.spec.n << ")";
    ASSERT_EQ(std::memcmp(t.d_m.Download().data(), t.m.data(), bytes), 0) << "m of tensor " << i;
    ASSERT_EQ(std::memcmp(t.d_v.Download().data(), t.v.data(), bytes), 0) << "v of tensor " << i;
    if (!t.spec.has_copy) continue;
    // The copy's elements before the tensor stay poisoned: compared from the tensor on.
    if (copy_type == DType::kFloat32) {
      ASSERT_EQ(std::memcmp(t.d_copy.Download().data() + skew, t.param.data() + skew,
                            bytes - skew * sizeof(float)),
                0)
          << "fp32 copy of tensor " << i;
    } else {
      std::vector<uint16_t> got(t.copy.size());
      ASSERT_EQ(cudaMemcpy(got.data(), t.d_copy.data(), got.size() * sizeof(uint16_t),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_TRUE(std::equal(got.begin() + static_cast<std::ptrdiff_t>(skew), got.end(),
                             t.copy.begin() + static_cast<std::ptrdiff_t>(skew)))
          << "copy of tensor " << i;
    }
  }
}

AdamWStepParams TestParams() {
  AdamWStepParams params;
  params.lr = 1e-2f;  // large enough that decay and update both reach the low bits
  params.beta1 = 0.9f;
  params.beta2 = 0.95f;
  params.eps = 1e-8f;
  params.grad_scale = 0.7f;
  return params;
}

class CudaAdamW : public CudaKernelTest, public ::testing::WithParamInterface<DType> {};

// Odd sizes (tails of every chunk), decayed and undecayed tensors, some without a copy, in one
// call; two steps, so the bias corrections change between them.
TEST_P(CudaAdamW, MatchesCpuStepBitForBit) {
  const DType grad_type = GetParam();
  const TensorSpec specs[] = {{1, 0.1f, true},       {37, 0.0f, false},    {4097, 0.1f, true},
                              {10000, 0.01f, false}, {100003, 0.0f, true}, {0, 0.1f, true}};
  for (const DType copy_type : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    std::vector<std::unique_ptr<Tensor>> tensors;
    uint32_t seed = 100;
    for (const TensorSpec& spec : specs) {
      tensors.push_back(std::make_unique<Tensor>(spec, grad_type, copy_type, seed += 10));
    }
    AdamWStepParams params = TestParams();
    for (int64_t step : {1, 2}) {
      params.step = step;
      StepAndCompare(tensors, grad_type, copy_type, params, params.grad_scale, stream());
      if (HasFatalFailure()) return;
    }
  }
}

// Aligned tensors go four elements at a time; one that starts one to three elements past a
// 16-byte boundary in every array goes element by element up to the boundary, then four at a
// time; one whose gradient is skewed against its parameter goes element by element throughout.
// Full chunks (4096), a last chunk with whole quads and an odd tail, and tensors shorter than a
// quad, in one call. Same bits every way.
TEST_P(CudaAdamW, MisalignedTensorsMatchTheCpuStepToo) {
  const DType grad_type = GetParam();
  const TensorSpec specs[] = {
      {3 * 4096 + 7, 0.1f, true, 1}, {8195, 0.0f, true, 2},           {3, 0.1f, true, 3},
      {2 * 4096 + 5, 0.1f, true, 0}, {4 * 4096, 0.01f, false, 0},     {2, 0.1f, true, 0},
      {4096 + 9, 0.1f, true, 0, 1},  {2 * 4096 + 1, 0.0f, true, 2, 0}};
  for (const DType copy_type : {DType::kBFloat16, DType::kFloat32}) {
    std::vector<std::unique_ptr<Tensor>> tensors;
    uint32_t seed = 300;
    for (const TensorSpec& spec : specs) {
      tensors.push_back(std::make_unique<Tensor>(spec, grad_type, copy_type, seed += 10));
    }
    AdamWStepParams params = TestParams();
    params.step = 3;
    StepAndCompare(tensors, grad_type, copy_type, params, params.grad_scale, stream());
    if (HasFatalFailure()) return;
  }
}

// 110 tensors: more than one launch's descriptors, so the list is split.
TEST_P(CudaAdamW, MoreTensorsThanOneLaunchHolds) {
  const DType grad_type = GetParam();
  std::vector<std::unique_ptr<Tensor>> tensors;
  for (int i = 0; i < 110; ++i) {
    const TensorSpec spec = {1 + (i * 37) % 500, i % 2 == 0 ? 0.1f : 0.0f, i % 3 != 0};
    tensors.push_back(std::make_unique<Tensor>(spec, grad_type, DType::kBFloat16, 1000 + 7 * i));
  }
  AdamWStepParams params = TestParams();
  params.step = 5;
  StepAndCompare(tensors, grad_type, DType::kBFloat16, params, params.grad_scale, stream());
}

// A scale the GPU computed (say, the clipping factor) multiplies the host's grad_scale.
TEST_P(CudaAdamW, DeviceGradScaleMultipliesHostScale) {
  const DType grad_type = GetParam();
  std::vector<std::unique_ptr<Tensor>> tensors;
  tensors.push_back(
      std::make_unique<Tensor>(TensorSpec{5000, 0.1f, true}, grad_type, DType::kFloat16, 7));
  const float device_scale = 0.3f;
  DeviceArray d_scale(DType::kFloat32, std::vector<float>{device_scale});
  AdamWStepParams params = TestParams();
  params.device_grad_scale = d_scale.as<float>();
  const float combined = params.grad_scale * device_scale;  // one fp32 rounding, as on the GPU
  StepAndCompare(tensors, grad_type, DType::kFloat16, params, combined, stream());
}

INSTANTIATE_TEST_SUITE_P(AllGradTypes, CudaAdamW,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         testing::DTypeParamName);

}  // namespace
}  // namespace hoist::kernels::cuda
