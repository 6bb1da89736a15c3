// What the attention options' tests share (kernels/attention_options.h): a float64 reference of
// grouped-query attention with the options, written from the definition one query row at a time
// (out, the probabilities, lse and the gradient of sum(out * dout) w.r.t. qkv; and for out and the
// gradient the magnitude of what each element is made of, every sum and difference taken with
// absolute values and the softcap's slope 1 - u^2 as 1 + u^2, which bounds what a relative error
// anywhere in those terms moves it by), the grid of options they run and the bound check. Layouts
// those of kernels/cpu/ops.h's AttentionForwardGqa.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/attention_options.h"

namespace hoist::kernels::testing {

struct ReferenceAttention {
  std::vector<double> out, out_mag;    // (B,T,NH*hd)
  std::vector<double> att;             // (B,NH,T,T), 0 outside each row's keys
  std::vector<double> lse;             // (B,NH,T), of the capped scores
  std::vector<double> dqkv, dqkv_mag;  // (B,T,(NH+2*NKV)*hd)
};

inline ReferenceAttention ComputeReferenceAttention(const std::vector<float>& qkv,
                                                    const std::vector<float>& dout, int B, int T,
                                                    int NH, int NKV, int hd,
                                                    const AttentionOptions& options) {
  const int C = NH * hd, W = (NH + 2 * NKV) * hd, group = NH / NKV;
  const double scale = options.scale > 0 ? options.scale : 1.0 / std::sqrt(double(hd));
  const double cap = options.softcap;
  ReferenceAttention r;
  r.out.assign(size_t(B) * T * C, 0.0);
  r.out_mag.assign(r.out.size(), 0.0);
  r.att.assign(size_t(B) * NH * T * T, 0.0);
  r.lse.assign(size_t(B) * NH * T, 0.0);
  r.dqkv.assign(size_t(B) * T * W, 0.0);
  r.dqkv_mag.assign(r.dqkv.size(), 0.0);
  std::vector<double> s(T), slope(T), slope_mag(T), p(T), dp(T), dp_mag(T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t k_col = C + size_t(h / group) * hd, v_col = k_col + size_t(NKV) * hd;
      for (int t = 0; t < T; ++t) {
        const size_t row = (size_t(b) * T + t) * W;
        const float* q = qkv.data() + row + size_t(h) * hd;
        const int lo = options.window > 0 ? std::max(0, t - options.window + 1) : 0;
        double m = -INFINITY;
        for (int j = lo; j <= t; ++j) {
          const float* k = qkv.data() + (size_t(b) * T + j) * W + k_col;
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += double(q[i]) * k[i];
          s[j] = scale * dot;
          slope[j] = slope_mag[j] = 1.0;
          if (cap > 0) {
            const double u = std::tanh(s[j] / cap);
            s[j] = cap * u;
            slope[j] = 1.0 - u * u;
            slope_mag[j] = 1.0 + u * u;
          }
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int j = lo; j <= t; ++j) sum += std::exp(s[j] - m);
        double* att = r.att.data() + ((size_t(b) * NH + h) * T + t) * T;
        for (int j = lo; j <= t; ++j) att[j] = p[j] = std::exp(s[j] - m) / sum;
        r.lse[(size_t(b) * NH + h) * T + t] = m + std::log(sum);

        const size_t out_at = (size_t(b) * T + t) * C + size_t(h) * hd;
        const float* d = dout.data() + out_at;
        double delta = 0, delta_mag = 0;
        for (int j = lo; j <= t; ++j) {
          const float* v = qkv.data() + (size_t(b) * T + j) * W + v_col;
          dp[j] = dp_mag[j] = 0;
          for (int i = 0; i < hd; ++i) {
            r.out[out_at + i] += p[j] * v[i];
            r.out_mag[out_at + i] += p[j] * std::fabs(v[i]);
            dp[j] += double(d[i]) * v[i];
            dp_mag[j] += std::fabs(double(d[i]) * v[i]);
          }
          delta += p[j] * dp[j];
          delta_mag += p[j] * dp_mag[j];
        }
        // dL/d(q.k) of each key, and the magnitude of what it is made of.
        for (int j = lo; j <= t; ++j) {
          const size_t key_row = (size_t(b) * T + j) * W;
          const double g = scale * slope[j] * p[j] * (dp[j] - delta);
          const double g_mag = scale * slope_mag[j] * p[j] * (dp_mag[j] + delta_mag);
          for (int i = 0; i < hd; ++i) {
            const double k = qkv[key_row + k_col + i];
            r.dqkv[row + size_t(h) * hd + i] += g * k;
            r.dqkv_mag[row + size_t(h) * hd + i] += g_mag * std::fabs(k);
            r.dqkv[key_row + k_col + i] += g * q[i];
            r.dqkv_mag[key_row + k_col + i] += g_mag * std::fabs(q[i]);
            r.dqkv[key_row + v_col + i] += p[j] * d[i];
            r.dqkv_mag[key_row + v_col + i] += p[j] * std::fabs(d[i]);
          }
        }
      }
    }
  }
  return r;
}

// Windows 0 (none), 1 (itself), 3, T - 1, T and T + 5; softcaps 0 (none), 0.7 (most scores
// saturate: inputs in [-2, 2] give scores of a few units) and 5; scales 0 (1/sqrt(hd)) and 0.3.
inline std::vector<AttentionOptions> AttentionOptionGrid(int T) {
  std::vector<AttentionOptions> grid;
  for (const int window : {0, 1, 3, T - 1, T, T + 5}) {
    for (const float softcap : {0.0f, 0.7f, 5.0f}) {
      for (const float scale : {0.0f, 0.3f}) grid.push_back({scale, window, softcap});
    }
  }
  return grid;
}

inline std::string Describe(const AttentionOptions& o) {
  return "window " + std::to_string(o.window) + ", softcap " + std::to_string(o.softcap) +
         ", scale " + std::to_string(o.scale);
}

// |got - want| <= rel * mag + abs per element; `what` names the first few that are not.
inline void ExpectWithin(const std::vector<float>& got, const std::vector<double>& want,
                         const std::vector<double>& mag, double rel, double abs,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = rel * mag[i] + abs;
    if (!(std::fabs(got[i] - want[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (bound "
                    << bound << ")";
    }
  }
}

// prior + change, elementwise: a gradient added to what the array held.
inline std::vector<double> Plus(const std::vector<float>& prior,
                                const std::vector<double>& change) {
  std::vector<double> out(change);
  for (size_t i = 0; i < out.size(); ++i) out[i] += prior[i];
  return out;
}

inline std::vector<double> OnePlusAbs(const std::vector<double>& x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = 1.0 + std::fabs(x[i]);
  return out;
}

}  // namespace hoist::kernels::testing
