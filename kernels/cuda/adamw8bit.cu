#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "core/dtype.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cuda/adamw8bit.h"
#include "kernels/cuda/device_math.cuh"

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 256;  // one element per thread: a thread block is a quantization block
static_assert(kThreads == cpu::kQuantBlockSize, "one thread per element of a block");
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 4096;
constexpr int kMaxTensors = 40;

// The maps, uploaded (stream-ordered) before each launch from cpu::SignedDynamicMap and
// cpu::UnsignedDynamicMap, and copied into shared memory by every block.
struct Maps {
  float m_code[256], m_threshold[256], v_code[256], v_threshold[256];
};
__constant__ Maps c_maps;

struct TensorSlot {
  float* param;
  uint8_t* m;
  uint8_t* v;
  float* absmax_m;
  float* absmax_v;
  const void* grad;
  void* copy;
  int64_t n;
  float decay_factor;
};

struct TensorBatch {
  TensorSlot tensors[kMaxTensors];
  int64_t block_begin[kMaxTensors + 1];  // prefix sums of the tensors' quantization blocks
  int count;
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size, inv_sqrt_bc2, eps, grad_scale;
};
static_assert(sizeof(TensorBatch) <= 4096, "kernel parameters are limited to 4 KiB");

__device__ __forceinline__ unsigned QuantizeNearest(const float* threshold, float y) {
  unsigned q = 0;
#pragma unroll
  for (unsigned step = 128; step > 0; step >>= 1) q += y > threshold[q + step - 1] ? step : 0u;
  return q;
}

// The maximum over the thread block (every thread gets it). fmaxf is exact, so the order of the
// reduction cannot change the result.
__device__ __forceinline__ float BlockMax(float x, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = x;
  __syncthreads();
  float y = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) y = fmaxf(y, scratch[w]);
  __syncthreads();  // scratch is free again
  return y;
}

template <typename GradT, typename CopyT>
__global__ void __launch_bounds__(kThreads)
    AdamW8bitKernel(const __grid_constant__ TensorBatch batch) {
  __shared__ Maps maps;
  __shared__ float scratch[kWarps];
  const int t = threadIdx.x;
  maps.m_code[t] = c_maps.m_code[t];
  maps.v_code[t] = c_maps.v_code[t];
  maps.m_threshold[t] = c_maps.m_threshold[t];
  maps.v_threshold[t] = c_maps.v_threshold[t];
  __syncthreads();
  const int64_t total = batch.block_begin[batch.count];
  int k = 0;
  for (int64_t block = blockIdx.x; block < total; block += gridDim.x) {
    while (block >= batch.block_begin[k + 1]) ++k;
    const TensorSlot& s = batch.tensors[k];
    const int64_t b = block - batch.block_begin[k];
    const int64_t i = b * kThreads + t;
    const bool valid = i < s.n;
    const float absmax_m = s.absmax_m[b];
    const float absmax_v = s.absmax_v[b];
    float mi = 0.0f, vi = 0.0f;
    if (valid) {
      // cpu::AdamW8bitStep's element, operation for operation.
      const float g = __fmul_rn(ToFloat(static_cast<const GradT*>(s.grad)[i]), batch.grad_scale);
      const float m0 = __fmul_rn(maps.m_code[s.m[i]], absmax_m);
      const float v0 = __fmul_rn(maps.v_code[s.v[i]], absmax_v);
      mi = __fadd_rn(__fmul_rn(batch.beta1, m0), __fmul_rn(batch.one_minus_beta1, g));
      vi = __fadd_rn(__fmul_rn(batch.beta2, v0), __fmul_rn(batch.one_minus_beta2, __fmul_rn(g, g)));
      const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), batch.inv_sqrt_bc2), batch.eps);
      const float p = __fsub_rn(__fmul_rn(s.param[i], s.decay_factor),
                                __fdiv_rn(__fmul_rn(batch.step_size, mi), denom));
      s.param[i] = p;
      if (s.copy != nullptr) static_cast<CopyT*>(s.copy)[i] = FromFloat<CopyT>(p);
    }
    // Every thread has read the old absmaxes before the reductions' barriers; thread 0 then
    // overwrites them.
    const float max_m = BlockMax(fabsf(mi), scratch);
    const float max_v = BlockMax(vi, scratch);
    if (t == 0) {
      s.absmax_m[b] = max_m;
      s.absmax_v[b] = max_v;
    }
    if (valid) {
      const float inv_m = max_m > 0.0f ? __fdiv_rn(1.0f, max_m) : 0.0f;
      const float inv_v = max_v > 0.0f ? __fdiv_rn(1.0f, max_v) : 0.0f;
      s.m[i] = static_cast<uint8_t>(QuantizeNearest(maps.m_threshold, __fmul_rn(mi, inv_m)));
      s.v[i] = static_cast<uint8_t>(QuantizeNearest(maps.v_threshold, __fmul_rn(vi, inv_v)));
    }
  }
}

template <typename GradT, typename CopyT>
Status Launch(const TensorBatch& batch, cudaStream_t stream) {
  const int64_t blocks = batch.block_begin[batch.count];
  if (blocks == 0) return Status::Ok();
  AdamW8bitKernel<GradT, CopyT>
      <<<static_cast<int>(std::min(blocks, kMaxBlocks)), kThreads, 0, stream>>>(batch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status CheckTensor(const AdamW8bitTensor& t, size_t index) {
  const std::string op = "AdamW8bitMultiTensor";
  const std::string name = "tensors[" + std::to_string(index) + "]";
  if (t.n < 0) {
    return InvalidArgumentError(op + ": " + name + ".n is negative (" + std::to_string(t.n) + ")");
  }
  if (t.n == 0) return Status::Ok();
  HOIST_RETURN_IF_ERROR(CheckPointer(op.c_str(), (name + ".param").c_str(), t.param));
  HOIST_RETURN_IF_ERROR(CheckPointer(op.c_str(), (name + ".m").c_str(), t.m));
  HOIST_RETURN_IF_ERROR(CheckPointer(op.c_str(), (name + ".v").c_str(), t.v));
  HOIST_RETURN_IF_ERROR(CheckPointer(op.c_str(), (name + ".absmax_m").c_str(), t.absmax_m));
  HOIST_RETURN_IF_ERROR(CheckPointer(op.c_str(), (name + ".absmax_v").c_str(), t.absmax_v));
  return CheckPointer(op.c_str(), (name + ".grad").c_str(), t.grad);
}

}  // namespace

Status AdamW8bitMultiTensor(const std::vector<AdamW8bitTensor>& tensors, DType grad_type,
                            DType copy_type, const AdamWStepParams& params, cudaStream_t stream) {
  constexpr const char* kOp = "AdamW8bitMultiTensor";
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "params.step", params.step));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (params.device_grad_scale != nullptr) {
    return InvalidArgumentError(std::string(kOp) + ": a device grad scale is not supported");
  }
  for (size_t i = 0; i < tensors.size(); ++i) HOIST_RETURN_IF_ERROR(CheckTensor(tensors[i], i));

  static const Maps host_maps = [] {
    Maps maps{};
    const cpu::DynamicMap& m = cpu::SignedDynamicMap();
    const cpu::DynamicMap& v = cpu::UnsignedDynamicMap();
    for (int c = 0; c < 256; ++c) {
      maps.m_code[c] = m.code[c];
      maps.v_code[c] = v.code[c];
      // The 256th midpoint (infinity) is never read: QuantizeNearest reads indices 0..254.
      maps.m_threshold[c] = m.threshold[c];
      maps.v_threshold[c] = v.threshold[c];
    }
    return maps;
  }();
  HOIST_CUDA_RETURN_IF_ERROR(
      cudaMemcpyToSymbolAsync(c_maps, &host_maps, sizeof(Maps), 0, cudaMemcpyHostToDevice, stream));

  // cpu::AdamW8bitStepAt's constants, computed the same way.
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

  const auto launch = [&]() -> Status {
    const auto with_grad = [&](auto grad_tag) {
      using G = decltype(grad_tag);
      const auto with_copy = [&](auto copy_tag) {
        using C = decltype(copy_tag);
        return Launch<G, C>(batch, stream);
      };
      return HOIST_CUDA_DISPATCH(copy_type, with_copy);
    };
    return HOIST_CUDA_DISPATCH(grad_type, with_grad);
  };
  for (const AdamW8bitTensor& t : tensors) {
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
                   t.absmax_m,
                   t.absmax_v,
                   t.grad,
                   t.copy,
                   t.n,
                   static_cast<float>(1.0 - static_cast<double>(params.lr) * t.weight_decay)};
    batch.block_begin[k + 1] = batch.block_begin[k] + cpu::QuantBlocks(t.n);
  }
  if (batch.count > 0) HOIST_RETURN_IF_ERROR(launch());
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda
