#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/reduce.h"

namespace hoist::kernels::cuda {
namespace {

// A fixed grid, independent of the device and of the spans, is what fixes the summation order.
constexpr int kPartialBlocks = 512;
constexpr int kThreads = 256;
constexpr int kFinalThreads = 512;
// Elements a block takes at a time; a span's last chunk may be shorter.
constexpr int64_t kChunk = 16384;
// Spans per launch: the descriptors travel by value as the kernel's parameter (4 KiB at most).
constexpr int kMaxSpans = 64;

struct SpanBatch {
  const float* data[kMaxSpans];
  int64_t n[kMaxSpans];
  int64_t chunk_begin[kMaxSpans + 1];  // prefix sums of the spans' chunk counts
  int count;
  int accumulate;  // add to the partials of the previous batch instead of overwriting them
};
static_assert(sizeof(SpanBatch) <= 4096, "kernel parameters are limited to 4 KiB");

// Block b owns chunks b, b + kPartialBlocks, ... of the batch (in the order of the spans) and
// writes (or adds) its fp32 sum to partials[b].
__global__ void SumOfSquaresPartialKernel(const __grid_constant__ SpanBatch batch,
                                          float* __restrict__ partials) {
  __shared__ float scratch[32];
  const int64_t total_chunks = batch.chunk_begin[batch.count];
  float acc = 0.0f;
  int s = 0;
  for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    while (chunk >= batch.chunk_begin[s + 1]) ++s;
    const int64_t begin = (chunk - batch.chunk_begin[s]) * kChunk;
    const int64_t count = min(kChunk, batch.n[s] - begin);
    const float* x = batch.data[s] + begin;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += x[i] * x[i];
  }
  acc = detail::BlockSum(acc, scratch);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = (batch.accumulate ? partials[blockIdx.x] : 0.0f) + acc;
}

__device__ __forceinline__ double WarpSumDouble(double x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// One block adds the partials in fp64, in a fixed tree.
__global__ void SumOfSquaresFinalKernel(const float* __restrict__ partials, int count,
                                        double* __restrict__ out) {
  __shared__ double warp_sums[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += static_cast<double>(partials[i]);
  acc = WarpSumDouble(acc);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.0;
    acc = WarpSumDouble(acc);
    if (lane == 0) *out = acc;
  }
}

Status LaunchPartials(const SpanBatch& batch, float* partials, cudaStream_t stream) {
  SumOfSquaresPartialKernel<<<kPartialBlocks, kThreads, 0, stream>>>(batch, partials);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status LaunchFinal(const float* partials, double* out, cudaStream_t stream) {
  SumOfSquaresFinalKernel<<<1, kFinalThreads, 0, stream>>>(partials, kPartialBlocks, out);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace

int64_t SumOfSquaresWorkspaceFloats() { return kPartialBlocks; }

Status SumOfSquares(const std::vector<DeviceSpan>& spans, double* out, float* workspace,
                    cudaStream_t stream) {
  constexpr const char* kOp = "SumOfSquares";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "workspace", workspace));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  for (size_t i = 0; i < spans.size(); ++i) {
    const std::string name = "spans[" + std::to_string(i) + "]";
    if (spans[i].n < 0) {
      return InvalidArgumentError(std::string(kOp) + ": " + name + ".n is negative (" +
                                  std::to_string(spans[i].n) + ")");
    }
    if (spans[i].n > 0)
      HOIST_RETURN_IF_ERROR(CheckPointer(kOp, (name + ".data").c_str(), spans[i].data));
  }

  // Batches of non-empty spans; with none at all, one empty batch still zeroes the partials.
  SpanBatch batch{};
  bool launched = false;
  for (size_t i = 0; i <= spans.size(); ++i) {
    const bool last = i == spans.size();
    if (!last && spans[i].n == 0) continue;
    if (batch.count == kMaxSpans || (last && (batch.count > 0 || !launched))) {
      batch.accumulate = launched ? 1 : 0;
      HOIST_RETURN_IF_ERROR(LaunchPartials(batch, workspace, stream));
      launched = true;
      batch.count = 0;
      batch.chunk_begin[0] = 0;
    }
    if (last) break;
    const int k = batch.count++;
    batch.data[k] = spans[i].data;
    batch.n[k] = spans[i].n;
    batch.chunk_begin[k + 1] = batch.chunk_begin[k] + (spans[i].n + kChunk - 1) / kChunk;
  }
  return LaunchFinal(workspace, out, stream);
}

}  // namespace hoist::kernels::cuda
