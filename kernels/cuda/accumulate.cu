#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/accumulate.h"
#include "kernels/cuda/device_math.cuh"

namespace hoist::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;
// The sum of squares' fixed grid: its partials are the workspace.
constexpr int kSumBlocks = static_cast<int>(kSumOfSquaresBlocks);

int GridFor(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

template <typename Acc, typename Add>
__global__ void AccumulateKernel(Acc* __restrict__ acc, const Add* __restrict__ add, float scale,
                                 int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    // Two correctly rounded fp32 operations, no fused multiply-add: the CPU twin's arithmetic.
    const float product = __fmul_rn(scale, ToFloat(add[i]));
    acc[i] = FromFloat<Acc>(__fadd_rn(ToFloat(acc[i]), product));
  }
}

// Block b sums elements b*T + t, b*T + t + stride, ... in double, then reduces its threads in a
// fixed tree: the partial of every block depends on n and the data alone.
template <typename T>
__global__ void SumOfSquaresPartials(const T* __restrict__ x, float scale, int64_t n,
                                     double* __restrict__ partials) {
  __shared__ double shared[kThreads];
  double local = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double v = static_cast<double>(__fmul_rn(ToFloat(x[i]), scale));
    local += v * v;
  }
  shared[threadIdx.x] = local;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

__global__ void AddPartials(const double* __restrict__ partials, int count,
                            double* __restrict__ sum) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double total = 0.0;
  for (int b = 0; b < count; ++b) total += partials[b];
  *sum += total;
}

}  // namespace

Status Accumulate(void* acc, DType acc_type, const void* add, DType add_type, float scale,
                  int64_t n, cudaStream_t stream) {
  constexpr const char* kOp = "Accumulate";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "acc", acc));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "add", add));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "n", n));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const auto with_acc = [&](auto acc_tag) {
    using Acc = decltype(acc_tag);
    const auto with_add = [&](auto add_tag) -> Status {
      using Add = decltype(add_tag);
      AccumulateKernel<Acc, Add><<<GridFor(n), kThreads, 0, stream>>>(
          static_cast<Acc*>(acc), static_cast<const Add*>(add), scale, n);
      HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
      return Status::Ok();
    };
    return HOIST_CUDA_DISPATCH(add_type, with_add);
  };
  return HOIST_CUDA_DISPATCH(acc_type, with_acc);
}

Status ScaledSumOfSquares(const void* x, DType type, float scale, int64_t n, double* sum,
                          double* workspace, cudaStream_t stream) {
  constexpr const char* kOp = "ScaledSumOfSquares";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "sum", sum));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  if (n < 0) return InvalidArgumentError("ScaledSumOfSquares: n is negative");
  if (n == 0) return Status::Ok();
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "x", x));
  const auto launch = [&](auto tag) -> Status {
    using T = decltype(tag);
    SumOfSquaresPartials<T>
        <<<kSumBlocks, kThreads, 0, stream>>>(static_cast<const T*>(x), scale, n, workspace);
    HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
    return Status::Ok();
  };
  HOIST_RETURN_IF_ERROR(HOIST_CUDA_DISPATCH(type, launch));
  AddPartials<<<1, 32, 0, stream>>>(workspace, kSumBlocks, sum);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda
