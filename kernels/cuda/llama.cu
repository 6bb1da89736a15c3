// RMSNorm (plain and per head), rotary embeddings and the gated activations (kernels/cuda/llama.h):
// a warp per row for the norm (as layernorm.cu), a thread per element or rotated pair for the
// others.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/cuda/cuda_status.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/llama.h"

namespace hoist::kernels::cuda {
namespace {

using detail::CeilDiv;
using detail::FromFloat;
using detail::ToFloat;
using detail::WarpSum;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 256;

// RMSNorm's parameter gradient: a block is 32 columns by kParamRows threads over a row chunk.
constexpr int kParamRows = 8;
constexpr int kMinRowsPerChunk = 128;
constexpr int kMaxGridY = 65535;

int ElementwiseBlocks(int64_t n) {
  constexpr int64_t kMaxBlocks = 65536;
  return static_cast<int>(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

// Where the rows of a norm lie, so that RMSNorm and its per-head form share the kernels: row
// r = g * per_group + j (g a token, j a head of it) starts at element first + g * group_stride +
// j * C, and its rstd is rstd[g * rstd_group + rstd_first + j]. A plain norm is one row per group
// (no division then). Rows are counted in int: the entries check that they fit.
struct NormRows {
  int rows;
  int per_group;
  int64_t group_stride;
  int64_t first;
  int rstd_group;
  int rstd_first;

  __device__ __forceinline__ int64_t At(int r, int C) const {
    if (per_group == 1) return first + static_cast<int64_t>(r) * group_stride;
    const int g = r / per_group, j = r - g * per_group;
    return first + static_cast<int64_t>(g) * group_stride + static_cast<int64_t>(j) * C;
  }
  __device__ __forceinline__ int64_t Rstd(int r) const {
    if (per_group == 1) return static_cast<int64_t>(r) * rstd_group + rstd_first;
    const int g = r / per_group, j = r - g * per_group;
    return static_cast<int64_t>(g) * rstd_group + rstd_first + j;
  }
};

NormRows PlainRows(int N, int C) { return {N, 1, C, 0, 1, 0}; }
// The query heads and the key heads of the fused qkv rows.
NormRows QueryHeads(int N, int NH, int NKV, int hd) {
  return {N * NH, NH, static_cast<int64_t>(NH + 2 * NKV) * hd, 0, NH + NKV, 0};
}
NormRows KeyHeads(int N, int NH, int NKV, int hd) {
  return {N * NKV,  NKV, static_cast<int64_t>(NH + 2 * NKV) * hd, static_cast<int64_t>(NH) * hd,
          NH + NKV, NH};
}

// The weight as the norm multiplies by it: Gemma's offset 1 + w in fp32, or w.
template <RmsNormStyle kStyle, typename T>
__device__ __forceinline__ float StyledWeight(T w) {
  if constexpr (kStyle == RmsNormStyle::kGemma) {
    return __fadd_rn(1.0f, ToFloat(w));
  } else {
    return ToFloat(w);
  }
}

template <typename T, RmsNormStyle kStyle>
__global__ void RmsNormForwardKernel(T* __restrict__ out, float* __restrict__ rstd_out,
                                     const T* __restrict__ inp, const T* __restrict__ weight,
                                     NormRows rows, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows.rows) return;  // whole warps leave together
  const int64_t at = rows.At(row, C);
  const T* x = inp + at;
  T* y = out + at;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = ToFloat(x[c]);
    sq += v * v;
  }
  const float rstd = 1.0f / sqrtf(WarpSum(sq) / static_cast<float>(C) + eps);
  for (int c = lane; c < C; c += 32) {
    if constexpr (kStyle == RmsNormStyle::kGemma) {
      // Everything in fp32, rounded once: (x * rstd) * (1 + w), HF's order.
      y[c] =
          FromFloat<T>(__fmul_rn(__fmul_rn(ToFloat(x[c]), rstd), StyledWeight<kStyle>(weight[c])));
    } else {
      // The normalised value in `type` (exact for fp32), then the weight: HF's order.
      const float norm = ToFloat(FromFloat<T>(__fmul_rn(ToFloat(x[c]), rstd)));
      y[c] = FromFloat<T>(__fmul_rn(ToFloat(weight[c]), norm));
    }
  }
  if (lane == 0) rstd_out[rows.Rstd(row)] = rstd;
}

template <typename T, RmsNormStyle kStyle>
__global__ void RmsNormBackwardInputKernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                           const T* __restrict__ inp, const T* __restrict__ weight,
                                           const float* __restrict__ rstd, NormRows rows, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows.rows) return;
  const int64_t offset = rows.At(row, C);
  const T* x = inp + offset;
  const T* dy = dout + offset;
  T* dx = dinp + offset;
  const float r = rstd[rows.Rstd(row)];
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) {
    dot += StyledWeight<kStyle>(weight[c]) * ToFloat(dy[c]) * (ToFloat(x[c]) * r);
  }
  const float mean_dot = WarpSum(dot) / static_cast<float>(C);
  for (int c = lane; c < C; c += 32) {
    const float norm = ToFloat(x[c]) * r;
    const float grad = r * (StyledWeight<kStyle>(weight[c]) * ToFloat(dy[c]) - norm * mean_dot);
    dx[c] = FromFloat<T>(ToFloat(dx[c]) + grad);
  }
}

// Block (32, kParamRows): column threadIdx.x, row phase threadIdx.y; partials added in shared
// memory, one atomic per column and block.
template <typename T>
__global__ void RmsNormBackwardParamKernel(float* __restrict__ dweight, const T* __restrict__ dout,
                                           const T* __restrict__ inp,
                                           const float* __restrict__ rstd, NormRows rows, int C,
                                           int rows_per_chunk) {
  __shared__ float part[kParamRows][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int row_begin = blockIdx.y * rows_per_chunk;
  const int row_end = min(rows.rows, row_begin + rows_per_chunk);
  float dw = 0.0f;
  if (c < C) {
    for (int row = row_begin + threadIdx.y; row < row_end; row += kParamRows) {
      const int64_t at = rows.At(row, C) + c;
      dw += ToFloat(dout[at]) * (ToFloat(inp[at]) * rstd[rows.Rstd(row)]);
    }
  }
  part[threadIdx.y][threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kParamRows; ++k) dw += part[k][threadIdx.x];
    atomicAdd(dweight + c, dw);
  }
}

// dinp += dout on the value heads of the fused rows: a thread per element.
template <typename T>
__global__ void ValueHeadsBackwardKernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                         int64_t N, int width, int v0, int v_width) {
  const int64_t total = N * v_width;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / v_width;
    const int64_t at = row * width + v0 + (e - row * v_width);
    dinp[at] = FromFloat<T>(ToFloat(dinp[at]) + ToFloat(dout[at]));
  }
}

// One thread per rotated pair (row, head, i): heads [0, NH+NKV) of each row, i < hd/2.
template <typename T>
__global__ void RopeKernel(T* qkv, const float* __restrict__ cos, const float* __restrict__ sin,
                           int64_t rows, int T_, int rotated_heads, int width, int hd, float sign) {
  const int half = hd / 2;
  const int64_t pairs_per_row = static_cast<int64_t>(rotated_heads) * half;
  const int64_t total = rows * pairs_per_row;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = p / pairs_per_row;
    const int rest = static_cast<int>(p - row * pairs_per_row);
    const int h = rest / half, i = rest % half;
    const int t = static_cast<int>(row % T_);
    const float c = cos[static_cast<int64_t>(t) * half + i];
    const float s = sign * sin[static_cast<int64_t>(t) * half + i];
    T* x = qkv + row * width + static_cast<int64_t>(h) * hd;
    const float lo = ToFloat(x[i]), hi = ToFloat(x[i + half]);
    // Separate roundings (no FMA), as the CPU twin computes.
    x[i] = FromFloat<T>(__fsub_rn(__fmul_rn(lo, c), __fmul_rn(hi, s)));
    x[i + half] = FromFloat<T>(__fadd_rn(__fmul_rn(hi, c), __fmul_rn(lo, s)));
  }
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

template <typename T, GluActivation kActivation>
__global__ void GluForwardKernel(T* out, const T* inp, int64_t N, int I) {
  const int64_t total = N * I;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / I;
    const int j = static_cast<int>(e - row * I);
    const T* gate = inp + row * 2 * I;
    const float g = ToFloat(gate[j]), u = ToFloat(gate[I + j]);
    if constexpr (kActivation == GluActivation::kSilu) {
      out[e] = FromFloat<T>(g / (1.0f + expf(-g)) * u);
    } else {
      const float th = tanhf(kGeluScale * (g + kGeluCubic * g * g * g));
      out[e] = FromFloat<T>(0.5f * g * (1.0f + th) * u);
    }
  }
}

template <typename T, GluActivation kActivation>
__global__ void GluBackwardKernel(T* dinp, const T* inp, const T* dout, int64_t N, int I) {
  const int64_t total = N * I;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / I;
    const int j = static_cast<int>(e - row * I);
    const int64_t at = row * 2 * I + j;
    const float g = ToFloat(inp[at]), u = ToFloat(inp[at + I]), dy = ToFloat(dout[e]);
    if constexpr (kActivation == GluActivation::kSilu) {
      const float sig = 1.0f / (1.0f + expf(-g));
      dinp[at] = FromFloat<T>(ToFloat(dinp[at]) + dy * u * sig * (1.0f + g * (1.0f - sig)));
      dinp[at + I] = FromFloat<T>(ToFloat(dinp[at + I]) + dy * g * sig);
    } else {
      const float g2 = g * g;
      const float th = tanhf(kGeluScale * (g + kGeluCubic * g2 * g));
      const float gelu = 0.5f * g * (1.0f + th);
      const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * g2);
      const float dgelu = 0.5f * (1.0f + th) + 0.5f * g * (1.0f - th * th) * du;
      dinp[at] = FromFloat<T>(ToFloat(dinp[at]) + dy * u * dgelu);
      dinp[at + I] = FromFloat<T>(ToFloat(dinp[at + I]) + dy * gelu);
    }
  }
}

Status LaunchNormForward(void* out, float* rstd, const void* inp, const void* weight,
                         const NormRows& rows, int C, float eps, RmsNormStyle style, DType type,
                         cudaStream_t stream) {
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    const int blocks = CeilDiv(rows.rows, kWarpsPerBlock);
    if (style == RmsNormStyle::kGemma) {
      RmsNormForwardKernel<E, RmsNormStyle::kGemma><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
          static_cast<E*>(out), rstd, static_cast<const E*>(inp), static_cast<const E*>(weight),
          rows, C, eps);
    } else {
      RmsNormForwardKernel<E, RmsNormStyle::kLlama><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
          static_cast<E*>(out), rstd, static_cast<const E*>(inp), static_cast<const E*>(weight),
          rows, C, eps);
    }
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

template <typename T>
Status LaunchNormBackward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                          const float* rstd, const NormRows& rows, int C, RmsNormStyle style,
                          cudaStream_t stream) {
  const int blocks = CeilDiv(rows.rows, kWarpsPerBlock);
  if (style == RmsNormStyle::kGemma) {
    RmsNormBackwardInputKernel<T, RmsNormStyle::kGemma>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(dinp, dout, inp, weight, rstd, rows, C);
  } else {
    RmsNormBackwardInputKernel<T, RmsNormStyle::kLlama>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(dinp, dout, inp, weight, rstd, rows, C);
  }
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  if (dweight == nullptr) return Status::Ok();  // a frozen weight
  const int rows_per_chunk = std::max(kMinRowsPerChunk, CeilDiv(rows.rows, kMaxGridY));
  const dim3 grid(CeilDiv(C, 32), CeilDiv(rows.rows, rows_per_chunk));
  RmsNormBackwardParamKernel<T><<<grid, dim3(32, kParamRows), 0, stream>>>(dweight, dout, inp, rstd,
                                                                           rows, C, rows_per_chunk);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status CheckEps(const char* op, float eps) {
  if (eps >= 0.0f) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": eps must be >= 0, got " + std::to_string(eps));
}

// The head norm's sizes: positive, and its rows (N * (NH + NKV) heads, N * (NH + 2 * NKV) * hd
// elements per array) countable in the kernels' int rows.
Status CheckHeadNormShape(const char* op, int N, int NH, int NKV, int hd) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NH", NH));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NKV", NKV));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "hd", hd));
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (int64_t{N} * (int64_t{NH} + 2 * int64_t{NKV}) > kMax ||
      (int64_t{NH} + 2 * int64_t{NKV}) * hd > kMax) {
    return InvalidArgumentError(std::string(op) + ": " + std::to_string(N) + " rows of " +
                                std::to_string(NH) + " + 2 x " + std::to_string(NKV) +
                                " heads of " + std::to_string(hd) + " are too many");
  }
  return Status::Ok();
}

Status CheckRopeShape(const char* op, int B, int T, int NH, int NKV, int hd) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "B", B));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "T", T));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NH", NH));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "NKV", NKV));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "hd", hd));
  if (hd % 2 != 0) {
    return InvalidArgumentError(std::string(op) + ": hd (" + std::to_string(hd) +
                                ") must be even (rotary pairs (i, i + hd/2))");
  }
  return Status::Ok();
}

Status LaunchRope(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int hd, DType type, float sign, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(B) * T;
  const int width = (NH + 2 * NKV) * hd;
  const int blocks = ElementwiseBlocks(rows * (NH + NKV) * (hd / 2));
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    RopeKernel<E><<<blocks, kThreads, 0, stream>>>(static_cast<E*>(qkv), cos, sin, rows, T,
                                                   NH + NKV, width, hd, sign);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace

Status RmsNormForward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                      float eps, RmsNormStyle style, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "RmsNormForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "rstd", rstd));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "weight", weight));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "C", C));
  HOIST_RETURN_IF_ERROR(CheckEps(kOp, eps));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return LaunchNormForward(out, rstd, inp, weight, PlainRows(N, C), C, eps, style, type, stream);
}

Status RmsNormBackward(void* dinp, float* dweight, const void* dout, const void* inp,
                       const void* weight, const float* rstd, int N, int C, RmsNormStyle style,
                       DType type, cudaStream_t stream) {
  constexpr const char* kOp = "RmsNormBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dinp", dinp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "weight", weight));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "rstd", rstd));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "C", C));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return HOIST_CUDA_DISPATCH(type, [&](auto tag) {
    using E = decltype(tag);
    return LaunchNormBackward<E>(static_cast<E*>(dinp), dweight, static_cast<const E*>(dout),
                                 static_cast<const E*>(inp), static_cast<const E*>(weight), rstd,
                                 PlainRows(N, C), C, style, stream);
  });
}

Status HeadRmsNormForward(void* out, float* rstd, const void* inp, const void* q_weight,
                          const void* k_weight, int N, int NH, int NKV, int hd, float eps,
                          RmsNormStyle style, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "HeadRmsNormForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "rstd", rstd));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "q_weight", q_weight));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "k_weight", k_weight));
  HOIST_RETURN_IF_ERROR(CheckHeadNormShape(kOp, N, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckEps(kOp, eps));
  const size_t e = DTypeSize(type);
  const size_t width_bytes = static_cast<size_t>(NH + 2 * NKV) * hd * e;
  const auto o = reinterpret_cast<uintptr_t>(out), i = reinterpret_cast<uintptr_t>(inp);
  const uintptr_t bytes = width_bytes * static_cast<size_t>(N);
  if (!(o + bytes <= i || i + bytes <= o)) {
    return InvalidArgumentError(std::string(kOp) +
                                ": out overlaps inp (it must be a separate array)");
  }
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  HOIST_RETURN_IF_ERROR(LaunchNormForward(out, rstd, inp, q_weight, QueryHeads(N, NH, NKV, hd), hd,
                                          eps, style, type, stream));
  HOIST_RETURN_IF_ERROR(LaunchNormForward(out, rstd, inp, k_weight, KeyHeads(N, NH, NKV, hd), hd,
                                          eps, style, type, stream));
  // The value heads: one strided copy, N rows of NKV * hd elements.
  const size_t v0 = static_cast<size_t>(NH + NKV) * hd * e;
  HOIST_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
      static_cast<char*>(out) + v0, width_bytes, static_cast<const char*>(inp) + v0, width_bytes,
      static_cast<size_t>(NKV) * hd * e, static_cast<size_t>(N), cudaMemcpyDeviceToDevice, stream));
  return Status::Ok();
}

Status HeadRmsNormBackward(void* dinp, float* dq_weight, float* dk_weight, const void* dout,
                           const void* inp, const void* q_weight, const void* k_weight,
                           const float* rstd, int N, int NH, int NKV, int hd, RmsNormStyle style,
                           DType type, cudaStream_t stream) {
  constexpr const char* kOp = "HeadRmsNormBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dinp", dinp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "q_weight", q_weight));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "k_weight", k_weight));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "rstd", rstd));
  HOIST_RETURN_IF_ERROR(CheckHeadNormShape(kOp, N, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const auto launch = [&](auto tag) -> Status {
    using E = decltype(tag);
    E* dx = static_cast<E*>(dinp);
    const E* dy = static_cast<const E*>(dout);
    const E* x = static_cast<const E*>(inp);
    HOIST_RETURN_IF_ERROR(LaunchNormBackward<E>(dx, dq_weight, dy, x,
                                                static_cast<const E*>(q_weight), rstd,
                                                QueryHeads(N, NH, NKV, hd), hd, style, stream));
    HOIST_RETURN_IF_ERROR(LaunchNormBackward<E>(dx, dk_weight, dy, x,
                                                static_cast<const E*>(k_weight), rstd,
                                                KeyHeads(N, NH, NKV, hd), hd, style, stream));
    const int width = (NH + 2 * NKV) * hd, v_width = NKV * hd;
    ValueHeadsBackwardKernel<E>
        <<<ElementwiseBlocks(static_cast<int64_t>(N) * v_width), kThreads, 0, stream>>>(
            dx, dy, N, width, (NH + NKV) * hd, v_width);
    HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
    return Status::Ok();
  };
  return HOIST_CUDA_DISPATCH(type, launch);
}

Status RopeForward(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int hd, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "RopeForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "qkv", qkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "cos", cos));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "sin", sin));
  HOIST_RETURN_IF_ERROR(CheckRopeShape(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return LaunchRope(qkv, cos, sin, B, T, NH, NKV, hd, type, 1.0f, stream);
}

Status RopeBackward(void* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                    int hd, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "RopeBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dqkv", dqkv));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "cos", cos));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "sin", sin));
  HOIST_RETURN_IF_ERROR(CheckRopeShape(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  return LaunchRope(dqkv, cos, sin, B, T, NH, NKV, hd, type, -1.0f, stream);
}

Status GluForward(void* out, const void* inp, int N, int I, GluActivation activation, DType type,
                  cudaStream_t stream) {
  constexpr const char* kOp = "GluForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "I", I));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const int blocks = ElementwiseBlocks(static_cast<int64_t>(N) * I);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    if (activation == GluActivation::kGeluTanh) {
      GluForwardKernel<E, GluActivation::kGeluTanh>
          <<<blocks, kThreads, 0, stream>>>(static_cast<E*>(out), static_cast<const E*>(inp), N, I);
    } else {
      GluForwardKernel<E, GluActivation::kSilu>
          <<<blocks, kThreads, 0, stream>>>(static_cast<E*>(out), static_cast<const E*>(inp), N, I);
    }
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status GluBackward(void* dinp, const void* inp, const void* dout, int N, int I,
                   GluActivation activation, DType type, cudaStream_t stream) {
  constexpr const char* kOp = "GluBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dinp", dinp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(kOp, "I", I));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const int blocks = ElementwiseBlocks(static_cast<int64_t>(N) * I);
  const auto launch = [&](auto tag) {
    using E = decltype(tag);
    if (activation == GluActivation::kGeluTanh) {
      GluBackwardKernel<E, GluActivation::kGeluTanh><<<blocks, kThreads, 0, stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout), N, I);
    } else {
      GluBackwardKernel<E, GluActivation::kSilu><<<blocks, kThreads, 0, stream>>>(
          static_cast<E*>(dinp), static_cast<const E*>(inp), static_cast<const E*>(dout), N, I);
    }
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda
