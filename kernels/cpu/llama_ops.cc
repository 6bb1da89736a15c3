// The CPU ops of the Llama family (ops.h): RMSNorm, rotary position embeddings and SwiGLU. Plain
// loops (the compiler vectorises the inner ones); threads take whole rows, so every result is
// computed in one fixed order whatever the thread count, except where noted.
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/ops.h"

namespace hoist::kernels::cpu {

void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                    float eps, DType normalized_type) {
#pragma omp parallel
  {
    // The normalised row rounded through normalized_type (16-bit only).
    std::vector<uint16_t> rounded(normalized_type == DType::kFloat32 ? 0 : static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const size_t row = static_cast<size_t>(i) * C;
      const float* x = inp + row;
      float* y = out + row;
      double sum = 0.0;
      for (int c = 0; c < C; ++c) sum += static_cast<double>(x[c]) * x[c];
      const float r = 1.0f / std::sqrt(static_cast<float>(sum / C) + eps);
      rstd[i] = r;
      for (int c = 0; c < C; ++c) y[c] = x[c] * r;
      if (normalized_type != DType::kFloat32) {
        FromFloat(y, rounded.data(), normalized_type, C);
        ToFloat(rounded.data(), normalized_type, y, C);
      }
      for (int c = 0; c < C; ++c) y[c] = weight[c] * y[c];
    }
  }
}

void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int N, int C) {
  // dweight sums over rows: threads own column blocks and walk the rows in order (no race, fixed
  // order), as LayerNormBackward does. dinp is per row.
  constexpr int kBlock = 64;
  const int num_blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int i = 0; i < N; ++i) {
      const size_t row = static_cast<size_t>(i) * C;
      const float* x = inp + row;
      const float* dy = dout + row;
      float* dx = dinp + row;
      const float r = rstd[i];
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
      for (int i = 0; i < N; ++i) {
        const size_t row = static_cast<size_t>(i) * C;
        const float r = rstd[i];
        for (int c = c0; c < c1; ++c) dweight[c] += dout[row + c] * (inp[row + c] * r);
      }
    }
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

void SwiGluForward(float* out, const float* inp, int N, int I) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* gate = inp + static_cast<size_t>(i) * 2 * I;
    const float* up = gate + I;
    float* y = out + static_cast<size_t>(i) * I;
    for (int j = 0; j < I; ++j) {
      const float g = gate[j];
      y[j] = g / (1.0f + std::exp(-g)) * up[j];
    }
  }
}

void SwiGluBackward(float* dinp, const float* inp, const float* dout, int N, int I) {
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
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float silu = g * sig;
      // silu'(g) = sig + g sig (1 - sig) = sig (1 + g (1 - sig))
      dgate[j] += dy[j] * up[j] * sig * (1.0f + g * (1.0f - sig));
      dup[j] += dy[j] * silu;
    }
  }
}

}  // namespace hoist::kernels::cpu
