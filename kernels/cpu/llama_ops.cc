// The CPU ops of the Llama family and its relatives (ops.h): RMSNorm in Llama's and Gemma's styles
// and per head (Qwen3), rotary position embeddings, SwiGLU and GeGLU. Plain loops (the compiler
// vectorises the inner ones); threads take whole rows, so every result is computed in one fixed
// order whatever the thread count, except where noted.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/ops.h"

namespace hoist::kernels::cpu {

namespace {

// Where the rows of a norm lie, so that RMSNorm and its per-head form share one arithmetic: row
// r = g * per_group + j (g a token, j a head of it) starts at element first + g * group_stride +
// j * C, and its rstd is rstd[g * rstd_group + rstd_first + j]. A plain norm is one row per group.
struct NormRows {
  int64_t rows;
  int per_group;
  int64_t group_stride;
  int64_t first;
  int rstd_group;
  int rstd_first;

  static NormRows Plain(int N, int C) { return {N, 1, C, 0, 1, 0}; }
  int64_t At(int64_t r, int C) const {
    return first + r / per_group * group_stride + r % per_group * int64_t{C};
  }
  int64_t Rstd(int64_t r) const { return r / per_group * rstd_group + rstd_first + r % per_group; }
};

// The query heads and the key heads of the fused qkv rows, as NormRows.
NormRows QueryHeads(int N, int NH, int NKV, int hd) {
  return {int64_t{N} * NH, NH, int64_t{NH + 2 * NKV} * hd, 0, NH + NKV, 0};
}
NormRows KeyHeads(int N, int NH, int NKV, int hd) {
  return {int64_t{N} * NKV, NKV, int64_t{NH + 2 * NKV} * hd, int64_t{NH} * hd, NH + NKV, NH};
}

// The weight the rows' arithmetic multiplies by: Gemma's 1 + w in fp32 (kept in `offset`), or
// the weight itself. Gemma's style is then Llama's arithmetic with nothing rounded.
const float* StyledWeight(const float* weight, int C, RmsNormStyle style,
                          std::vector<float>& offset) {
  if (style != RmsNormStyle::kGemma) return weight;
  offset.resize(static_cast<size_t>(C));
  for (int c = 0; c < C; ++c) offset[c] = 1.0f + weight[c];
  return offset.data();
}

void NormForward(float* out, float* rstd, const float* inp, const float* weight,
                 const NormRows& rows, int C, float eps, DType normalized_type,
                 RmsNormStyle style) {
  std::vector<float> offset;
  weight = StyledWeight(weight, C, style, offset);
  if (style == RmsNormStyle::kGemma) normalized_type = DType::kFloat32;
#pragma omp parallel
  {
    // The normalised row rounded through normalized_type (16-bit only).
    std::vector<uint16_t> rounded(normalized_type == DType::kFloat32 ? 0 : static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows.rows; ++i) {
      const int64_t row = rows.At(i, C);
      const float* x = inp + row;
      float* y = out + row;
      double sum = 0.0;
      for (int c = 0; c < C; ++c) sum += static_cast<double>(x[c]) * x[c];
      const float r = 1.0f / std::sqrt(static_cast<float>(sum / C) + eps);
      rstd[rows.Rstd(i)] = r;
      for (int c = 0; c < C; ++c) y[c] = x[c] * r;
      if (normalized_type != DType::kFloat32) {
        FromFloat(y, rounded.data(), normalized_type, C);
        ToFloat(rounded.data(), normalized_type, y, C);
      }
      for (int c = 0; c < C; ++c) y[c] = weight[c] * y[c];
    }
  }
}

void NormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                  const float* weight, const float* rstd, const NormRows& rows, int C,
                  RmsNormStyle style) {
  std::vector<float> offset;
  weight = StyledWeight(weight, C, style, offset);
  // dweight sums over rows: threads own column blocks and walk the rows in order (no race, fixed
  // order), as LayerNormBackward does. dinp is per row.
  constexpr int kBlock = 64;
  const int num_blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < rows.rows; ++i) {
      const int64_t row = rows.At(i, C);
      const float* x = inp + row;
      const float* dy = dout + row;
      float* dx = dinp + row;
      const float r = rstd[rows.Rstd(i)];
      float dot = 0.0f;  // sum of (w dy) * n
      for (int c = 0; c < C; ++c) dot += weight[c] * dy[c] * (x[c] * r);
      const float mean_dot = dot / static_cast<float>(C);
      for (int c = 0; c < C; ++c) {
        const float n = x[c] * r;
        dx[c] += r * (weight[c] * dy[c] - n * mean_dot);
      }
    }
#pragma omp for schedule(static)
    for (int blk = 0; blk < (dweight != nullptr ? num_blocks : 0); ++blk) {
      const int c0 = blk * kBlock;
      const int c1 = C - c0 < kBlock ? C : c0 + kBlock;
      for (int64_t i = 0; i < rows.rows; ++i) {
        const int64_t row = rows.At(i, C);
        const float r = rstd[rows.Rstd(i)];
        for (int c = c0; c < c1; ++c) dweight[c] += dout[row + c] * (inp[row + c] * r);
      }
    }
  }
}

}  // namespace

void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                    float eps, DType normalized_type, RmsNormStyle style) {
  NormForward(out, rstd, inp, weight, NormRows::Plain(N, C), C, eps, normalized_type, style);
}

void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int N, int C, RmsNormStyle style) {
  NormBackward(dinp, dweight, dout, inp, weight, rstd, NormRows::Plain(N, C), C, style);
}

void HeadRmsNormForward(float* out, float* rstd, const float* inp, const float* q_weight,
                        const float* k_weight, int N, int NH, int NKV, int hd, float eps,
                        DType normalized_type, RmsNormStyle style) {
  NormForward(out, rstd, inp, q_weight, QueryHeads(N, NH, NKV, hd), hd, eps, normalized_type,
              style);
  NormForward(out, rstd, inp, k_weight, KeyHeads(N, NH, NKV, hd), hd, eps, normalized_type, style);
  const size_t width = static_cast<size_t>(NH + 2 * NKV) * hd;
  const size_t v0 = static_cast<size_t>(NH + NKV) * hd, v_width = static_cast<size_t>(NKV) * hd;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* src = inp + i * width + v0;
    std::copy(src, src + v_width, out + i * width + v0);
  }
}

void HeadRmsNormBackward(float* dinp, float* dq_weight, float* dk_weight, const float* dout,
                         const float* inp, const float* q_weight, const float* k_weight,
                         const float* rstd, int N, int NH, int NKV, int hd, RmsNormStyle style) {
  NormBackward(dinp, dq_weight, dout, inp, q_weight, rstd, QueryHeads(N, NH, NKV, hd), hd, style);
  NormBackward(dinp, dk_weight, dout, inp, k_weight, rstd, KeyHeads(N, NH, NKV, hd), hd, style);
  const size_t width = static_cast<size_t>(NH + 2 * NKV) * hd;
  const size_t v0 = static_cast<size_t>(NH + NKV) * hd, v_width = static_cast<size_t>(NKV) * hd;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = i * width + v0;
    for (size_t c = 0; c < v_width; ++c) dinp[row + c] += dout[row + c];
  }
}

namespace {

// Rotates the first NH + NKV heads of every row by +angle (sign 1) or -angle (sign -1).
void Rotate(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV, int hd,
            float sign) {
  const int half = hd / 2;
  const int rotated = NH + NKV;
  const size_t width = static_cast<size_t>(NH + 2 * NKV) * hd;
  const long long rows = static_cast<long long>(B) * T;
#pragma omp parallel for schedule(static)
  for (long long bt = 0; bt < rows; ++bt) {
    const int t = static_cast<int>(bt % T);
    const float* c_row = cos + static_cast<size_t>(t) * half;
    const float* s_row = sin + static_cast<size_t>(t) * half;
    float* row = qkv + static_cast<size_t>(bt) * width;
    for (int h = 0; h < rotated; ++h) {
      float* x = row + static_cast<size_t>(h) * hd;
      for (int i = 0; i < half; ++i) {
        const float c = c_row[i], s = sign * s_row[i];
        const float lo = x[i], hi = x[i + half];
        x[i] = lo * c - hi * s;
        x[i + half] = hi * c + lo * s;
      }
    }
  }
}

}  // namespace

void RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                 int hd) {
  Rotate(qkv, cos, sin, B, T, NH, NKV, hd, 1.0f);
}

void RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int hd) {
  Rotate(dqkv, cos, sin, B, T, NH, NKV, hd, -1.0f);
}

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

template <GluActivation kActivation>
void GluForwardRows(float* out, const float* inp, int N, int I) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* gate = inp + static_cast<size_t>(i) * 2 * I;
    const float* up = gate + I;
    float* y = out + static_cast<size_t>(i) * I;
    for (int j = 0; j < I; ++j) {
      const float g = gate[j];
      if constexpr (kActivation == GluActivation::kSilu) {
        y[j] = g / (1.0f + std::exp(-g)) * up[j];
      } else {
        const float th = std::tanh(kGeluScale * (g + kGeluCubic * g * g * g));
        y[j] = 0.5f * g * (1.0f + th) * up[j];
      }
    }
  }
}

template <GluActivation kActivation>
void GluBackwardRows(float* dinp, const float* inp, const float* dout, int N, int I) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = static_cast<size_t>(i) * 2 * I;
    const float* gate = inp + row;
    const float* up = gate + I;
    float* dgate = dinp + row;
    float* dup = dgate + I;
    const float* dy = dout + static_cast<size_t>(i) * I;
    for (int j = 0; j < I; ++j) {
      const float g = gate[j];
      if constexpr (kActivation == GluActivation::kSilu) {
        const float sig = 1.0f / (1.0f + std::exp(-g));
        const float silu = g * sig;
        // silu'(g) = sig + g sig (1 - sig) = sig (1 + g (1 - sig))
        dgate[j] += dy[j] * up[j] * sig * (1.0f + g * (1.0f - sig));
        dup[j] += dy[j] * silu;
      } else {
        const float g2 = g * g;
        const float th = std::tanh(kGeluScale * (g + kGeluCubic * g2 * g));
        const float gelu = 0.5f * g * (1.0f + th);
        // d/dg of 0.5 g (1 + tanh(u)): 0.5 (1 + th) + 0.5 g (1 - th^2) du/dg
        const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * g2);
        const float dgelu = 0.5f * (1.0f + th) + 0.5f * g * (1.0f - th * th) * du;
        dgate[j] += dy[j] * up[j] * dgelu;
        dup[j] += dy[j] * gelu;
      }
    }
  }
}

}  // namespace

void GluForward(float* out, const float* inp, int N, int I, GluActivation activation) {
  if (activation == GluActivation::kSilu) {
    GluForwardRows<GluActivation::kSilu>(out, inp, N, I);
  } else {
    GluForwardRows<GluActivation::kGeluTanh>(out, inp, N, I);
  }
}

void GluBackward(float* dinp, const float* inp, const float* dout, int N, int I,
                 GluActivation activation) {
  if (activation == GluActivation::kSilu) {
    GluBackwardRows<GluActivation::kSilu>(dinp, inp, dout, N, I);
  } else {
    GluBackwardRows<GluActivation::kGeluTanh>(dinp, inp, dout, N, I);
  }
}

}  // namespace hoist::kernels::cpu
