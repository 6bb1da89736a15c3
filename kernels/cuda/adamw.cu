#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/device_math.cuh"

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 2048;
// Elements a block takes at a time; a tensor's last chunk may be shorter.
constexpr int64_t kChunk = 4096;
// Tensors per launch: the descriptors travel by value as the kernel's parameter (4 KiB at most,
// as in apex's multi_tensor_apply); longer lists take several launches.
constexpr int kMaxTensors = 48;

struct TensorSlot {
  float* param;
  float* m;
  float* v;
  const void* grad;
  void* copy;  // null: no copy for this tensor
  int64_t n;
  float decay_factor;  // 1 - lr * weight_decay, rounded as the CPU twin rounds it
};

struct TensorBatch {
  TensorSlot tensors[kMaxTensors];
  int64_t chunk_begin[kMaxTensors + 1];  // prefix sums of the tensors' chunk counts
  int count;
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size, inv_sqrt_bc2, eps, grad_scale;
  const float* device_grad_scale;
};
static_assert(sizeof(TensorBatch) <= 4096, "kernel parameters are limited to 4 KiB");

// The element update of cpu::AdamWFusedStep (adamw_kernels.inc), operation for operation, each
// an explicitly rounded intrinsic so that nvcc cannot contract a multiply and an add into an FMA:
// with the same constants (computed on the host as the CPU computes them) the bits agree.
template <typename GradT, typename CopyT>
__global__ void AdamWKernel(const __grid_constant__ TensorBatch batch) {
  const float grad_scale = batch.device_grad_scale == nullptr
                               ? batch.grad_scale
                               : __fmul_rn(batch.grad_scale, *batch.device_grad_scale);
  const int64_t total_chunks = batch.chunk_begin[batch.count];
  int t = 0;
  for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    while (chunk >= batch.chunk_begin[t + 1]) ++t;
    const TensorSlot& s = batch.tensors[t];
    const int64_t begin = (chunk - batch.chunk_begin[t]) * kChunk;
    const int64_t end = min(begin + kChunk, s.n);
    const GradT* grad = static_cast<const GradT*>(s.grad);
    CopyT* copy = static_cast<CopyT*>(s.copy);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float g = __fmul_rn(ToFloat(grad[i]), grad_scale);
      const float m =
          __fadd_rn(__fmul_rn(batch.beta1, s.m[i]), __fmul_rn(batch.one_minus_beta1, g));
      const float v = __fadd_rn(__fmul_rn(batch.beta2, s.v[i]),
                                __fmul_rn(batch.one_minus_beta2, __fmul_rn(g, g)));
      s.m[i] = m;
      s.v[i] = v;
      const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), batch.inv_sqrt_bc2), batch.eps);
      const float p = __fsub_rn(__fmul_rn(s.param[i], s.decay_factor),
                                __fdiv_rn(__fmul_rn(batch.step_size, m), denom));
      s.param[i] = p;
      if (copy != nullptr) copy[i] = FromFloat<CopyT>(p);
    }
  }
}

template <typename GradT, typename CopyT>
Status LaunchAdamW(const TensorBatch& batch, cudaStream_t stream) {
  const int64_t chunks = batch.chunk_begin[batch.count];
  if (chunks == 0) return Status::Ok();
  const int blocks = static_cast<int>(std::min(chunks, kMaxBlocks));
  AdamWKernel<GradT, CopyT><<<blocks, kThreads, 0, stream>>>(batch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status CheckTensor(const AdamWTensor& t, size_t index) {
  const std::string op = "AdamWMultiTensor";
  const std::string name = "tensors[" + std::to_string(index) + "]";
  if (t.n < 0) {
    return InvalidArgumentError(op + ": " + name + ".n is negative (" + std::to_string(t.n) + ")");
  }
  if (t.n == 0) return Status::Ok();
  HOIST_RETURN_IF_ERROR(CheckPointer(op.c_str(), (name + ".param").c_str(), t.param));
  HOIST_RETURN_IF_ERROR(CheckPointer(op.c_str(), (name + ".m").c_str(), t.m));
  HOIST_RETURN_IF_ERROR(CheckPointer(op.c_str(), (name + ".v").c_str(), t.v));
  return CheckPointer(op.c_str(), (name + ".grad").c_str(), t.grad);
}

}  // namespace

Status AdamWMultiTensor(const std::vector<AdamWTensor>& tensors, DType grad_type, DType copy_type,
                        const AdamWStepParams& params, cudaStream_t stream) {
  constexpr const char* kOp = "AdamWMultiTensor";
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "params.step", params.step));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  for (size_t i = 0; i < tensors.size(); ++i) HOIST_RETURN_IF_ERROR(CheckTensor(tensors[i], i));

  // The per-step constants exactly as cpu::AdamWFusedStep computes them (adamw_step.cc): bias
  // corrections in double, each constant rounded once to float.
  const double bc1 =
      1.0 - std::pow(static_cast<double>(params.beta1), static_cast<double>(params.step));
  const double bc2 =
      1.0 - std::pow(static_cast<double>(params.beta2), static_cast<double>(params.step));
  TensorBatch batch{};
  batch.beta1 = params.beta1;
  batch.beta2 = params.beta2;
  batch.one_minus_beta1 = 1.0f - params.beta1;
  batch.one_minus_beta2 = 1.0f - params.beta2;
  batch.step_size = static_cast<float>(params.lr / bc1);
  batch.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  batch.eps = params.eps;
  batch.grad_scale = params.grad_scale;
  batch.device_grad_scale = params.device_grad_scale;

  // Named lambdas: the macro would split the template argument list of LaunchAdamW<G, C>.
  const auto launch = [&]() -> Status {
    const auto with_grad = [&](auto grad_tag) {
      using G = decltype(grad_tag);
      const auto with_copy = [&](auto copy_tag) {
        using C = decltype(copy_tag);
        return LaunchAdamW<G, C>(batch, stream);
      };
      return HOIST_CUDA_DISPATCH(copy_type, with_copy);
    };
    return HOIST_CUDA_DISPATCH(grad_type, with_grad);
  };

  for (const AdamWTensor& t : tensors) {
    if (t.n == 0) continue;
    if (batch.count == kMaxTensors) {
      HOIST_RETURN_IF_ERROR(launch());
      batch.count = 0;
    }
    const int k = batch.count++;
    batch.tensors[k] =
        TensorSlot{t.param,
                   t.m,
                   t.v,
                   t.grad,
                   t.copy,
                   t.n,
                   static_cast<float>(1.0 - static_cast<double>(params.lr) * t.weight_decay)};
    batch.chunk_begin[k + 1] = batch.chunk_begin[k] + (t.n + kChunk - 1) / kChunk;
  }
  if (batch.count > 0) HOIST_RETURN_IF_ERROR(launch());
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda
