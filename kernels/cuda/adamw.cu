#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "core/dtype.h"
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
  bool vectorized;     // every array aligned for four elements at a time
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

// Four consecutive elements, loaded or stored as one access (16 bytes of fp32, 8 of 16-bit).
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T x[4];
};
constexpr int kVectorsPerThread = kChunk / 4 / kThreads;  // a full chunk's quads per thread
static_assert(kChunk % (4 * kThreads) == 0, "a full chunk is whole quads for every thread");

// The element update of cpu::AdamWFusedStep (adamw_kernels.inc), operation for operation, each
// an explicitly rounded intrinsic so that nvcc cannot contract a multiply and an add into an FMA:
// with the same constants (computed on the host as the CPU computes them) the bits agree.
__device__ __forceinline__ void UpdateElement(const TensorBatch& batch, float decay_factor,
                                              float grad_scale, float grad, float& param, float& m,
                                              float& v) {
  const float g = __fmul_rn(grad, grad_scale);
  m = __fadd_rn(__fmul_rn(batch.beta1, m), __fmul_rn(batch.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(batch.beta2, v), __fmul_rn(batch.one_minus_beta2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), batch.inv_sqrt_bc2), batch.eps);
  param =
      __fsub_rn(__fmul_rn(param, decay_factor), __fdiv_rn(__fmul_rn(batch.step_size, m), denom));
}

template <typename GradT, typename CopyT>
__device__ __forceinline__ void UpdateScalar(const TensorBatch& batch, const TensorSlot& s,
                                             float grad_scale, int64_t i) {
  const GradT* grad = static_cast<const GradT*>(s.grad);
  float p = s.param[i], m = s.m[i], v = s.v[i];
  UpdateElement(batch, s.decay_factor, grad_scale, ToFloat(grad[i]), p, m, v);
  s.m[i] = m;
  s.v[i] = v;
  s.param[i] = p;
  if (s.copy != nullptr) static_cast<CopyT*>(s.copy)[i] = FromFloat<CopyT>(p);
}

// Quads [first, first + count * stride) by `stride`: every load of the group is issued before
// the first update, so each thread keeps count x 56 bytes in flight (16-bit gradients: 48).
template <typename GradT, typename CopyT, int kCount>
__device__ __forceinline__ void UpdateQuads(const TensorBatch& batch, const TensorSlot& s,
                                            float grad_scale, int64_t first, int64_t stride) {
  const auto* __restrict__ grad = static_cast<const Quad<GradT>*>(s.grad);
  auto* __restrict__ param = reinterpret_cast<Quad<float>*>(s.param);
  auto* __restrict__ m = reinterpret_cast<Quad<float>*>(s.m);
  auto* __restrict__ v = reinterpret_cast<Quad<float>*>(s.v);
  Quad<float> p[kCount], mm[kCount], vv[kCount];
  Quad<GradT> g[kCount];
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    const int64_t q = first + k * stride;
    g[k] = grad[q];
    p[k] = param[q];
    mm[k] = m[q];
    vv[k] = v[q];
  }
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    const int64_t q = first + k * stride;
    Quad<CopyT> c;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      UpdateElement(batch, s.decay_factor, grad_scale, ToFloat(g[k].x[e]), p[k].x[e], mm[k].x[e],
                    vv[k].x[e]);
      c.x[e] = FromFloat<CopyT>(p[k].x[e]);
    }
    m[q] = mm[k];
    v[q] = vv[k];
    param[q] = p[k];
    if (s.copy != nullptr) static_cast<Quad<CopyT>*>(s.copy)[q] = c;
  }
}

template <typename GradT, typename CopyT>
__global__ void __launch_bounds__(kThreads) AdamWKernel(const __grid_constant__ TensorBatch batch) {
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
    if (!s.vectorized) {
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        UpdateScalar<GradT, CopyT>(batch, s, grad_scale, i);
      }
      continue;
    }
    // Chunks start at multiples of kChunk, so an aligned tensor's chunk is aligned too.
    const int64_t first_quad = begin / 4;
    if (end - begin == kChunk) {
      UpdateQuads<GradT, CopyT, kVectorsPerThread>(batch, s, grad_scale, first_quad + threadIdx.x,
                                                   kThreads);
      continue;
    }
    const int64_t end_quad = end / 4;  // the tensor's last chunk: quads, then the odd tail
    for (int64_t q = first_quad + threadIdx.x; q < end_quad; q += blockDim.x) {
      UpdateQuads<GradT, CopyT, 1>(batch, s, grad_scale, q, 0);
    }
    for (int64_t i = end_quad * 4 + threadIdx.x; i < end; i += blockDim.x) {
      UpdateScalar<GradT, CopyT>(batch, s, grad_scale, i);
    }
  }
}

bool Aligned(const void* p, size_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
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

  const auto add = [&](const AdamWTensor& t, bool vectorized) -> Status {
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
                   static_cast<float>(1.0 - static_cast<double>(params.lr) * t.weight_decay),
                   vectorized};
    batch.chunk_begin[k + 1] = batch.chunk_begin[k] + (t.n + kChunk - 1) / kChunk;
    return Status::Ok();
  };
  const size_t grad_size = DTypeSize(grad_type), copy_size = DTypeSize(copy_type);
  for (const AdamWTensor& t : tensors) {
    if (t.n == 0) continue;
    // A slice of flat buffers (a ZeRO shard, say) may start between quads. Its first elements,
    // up to the parameter's next 16-byte boundary, go element by element as a slot of their
    // own; the rest goes four at a time where every array is then aligned.
    const int64_t head = std::min<int64_t>(
        t.n, static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(t.param) % 16) % 16 / 4));
    AdamWTensor rest = t;
    rest.param += head;
    rest.m += head;
    rest.v += head;
    rest.grad = static_cast<const char*>(t.grad) + head * static_cast<int64_t>(grad_size);
    if (t.copy != nullptr) {
      rest.copy = static_cast<char*>(t.copy) + head * static_cast<int64_t>(copy_size);
    }
    rest.n = t.n - head;
    const bool aligned = Aligned(rest.param, 16) && Aligned(rest.m, 16) && Aligned(rest.v, 16) &&
                         Aligned(rest.grad, 4 * grad_size) && Aligned(rest.copy, 4 * copy_size);
    if (!aligned) {
      HOIST_RETURN_IF_ERROR(add(t, false));
      continue;
    }
    if (head > 0) {
      AdamWTensor first = t;
      first.n = head;
      HOIST_RETURN_IF_ERROR(add(first, false));
    }
    if (rest.n > 0) HOIST_RETURN_IF_ERROR(add(rest, true));
  }
  if (batch.count > 0) HOIST_RETURN_IF_ERROR(launch());
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda
