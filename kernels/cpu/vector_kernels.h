// Private to kernels/cpu: the single-threaded inner loops of the vectorised ops, compiled once
// per SIMD level (vector_kernels_{scalar,avx2,avx512}.cc, each with its own ISA flags) and
// reached through a table of function pointers. The ops' .cc files own the threading.
// Not part of the public API; tests reach the levels through dispatch.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "kernels/cpu/dispatch.h"

namespace hoist::kernels::cpu {

// Per-step constants of AdamW, computed once per call in double and rounded to float.
struct AdamWCoeffs {
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;
  float decay_factor;  // 1 - lr * weight_decay
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float grad_scale;
};

struct VectorKernels {
  // out[:n] = GELU(inp[:n])
  void (*gelu_forward)(float* out, const float* inp, size_t n);
  // dinp[:n] += GELU'(inp) * dout
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, size_t n);
  // One row of C: writes out and returns mean and rstd through the pointers.
  void (*layernorm_forward_row)(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int C);
  // One row of C: dinp += the input gradient.
  void (*layernorm_backward_row)(float* dinp, const float* dout, const float* inp,
                                 const float* weight, float mean, float rstd, int C);
  // One row over count channels: dweight += (inp - mean) * rstd * dout; dbias += dout.
  void (*layernorm_param_grad_row)(float* dweight, float* dbias, const float* dout,
                                   const float* inp, float mean, float rstd, int count);
  // One row of Vp logits; returns the loss. dlogits (may alias logits, may be null) is
  // overwritten with dloss * (softmax - onehot) over V and 0 over the padding.
  float (*softmax_xent_row)(float* dlogits, const float* logits, int target, float dloss, int V,
                            int Vp);
  void (*adamw)(float* param, const float* grad, float* m, float* v, size_t n,
                const AdamWCoeffs& c);
  double (*sum_of_squares)(const float* x, size_t n);
  // The attention kernels' rows and tiles. Row t of a head sees keys [lo, t] with
  // lo = t - window + 1 clamped at 0 (window 0: lo = 0), and softcap > 0 caps its scaled scores s
  // to softcap * tanh(s / softcap) before the softmax (kernels/attention_options.h).
  //
  // Rows t0 .. t0+rows-1 of one head's att (row stride T) hold scaled scores in columns [lo, t];
  // they become the softmax probabilities, with 0 in the other columns of [0, T).
  void (*causal_softmax_rows)(float* att, int T, int t0, int rows, int window, float softcap);
  // For rows t0 .. t0+rows-1: datt (row stride ld) holds dL/dP over [lo, t] and becomes
  // dL/d(q.k) = scale * P * (dP - sum_s P dP), times 1 - tanh^2(s / softcap) with a softcap, where
  // scores (row stride ld, read only with a softcap) holds the scaled scores s; 0 in the other
  // columns of [0, ld). att has row stride T.
  void (*causal_softmax_backward_rows)(float* datt, int ld, const float* att, int T, int t0,
                                       int rows, float scale, int window, float softcap,
                                       const float* scores);
  // One tile of the tiled attention (flash_attention.cc). Row r of a tile may see its columns
  // [lo_r, n_r): n_r = clamp(diag + r, 0, cols) (the causal mask; diag = first query - first key
  // + 1) and lo_r = clamp(diag + r - window, 0, n_r) (the window; 0 without one).
  // Forward: s (rows, row stride ld) holds scaled scores, capped here with a softcap. Per row with
  // a visible column the running max and sum are updated and o's row (rows, row stride hs) is
  // multiplied by e^{max_old - max_new}; s becomes e^{s - max_new}, 0 in masked columns, ready
  // for o += s V.
  void (*online_softmax_tile)(float* s, int ld, int rows, int cols, int diag, int window,
                              float softcap, float* row_max, float* row_sum, float* o, int hs);
  // Backward: s holds scaled scores and becomes P = e^{cap(s) - lse}; dp holds dL/dP and becomes
  // dL/d(q.k) = scale * P * (dp - delta) (times 1 - tanh^2(s / softcap) with a softcap); both 0
  // in masked columns. lse, delta: (rows).
  void (*attention_tile_backward)(float* s, float* dp, int ld, int rows, int cols, int diag,
                                  int window, float softcap, const float* lse, const float* delta,
                                  float scale);
};

namespace scalar {
extern const VectorKernels kKernels;
}
namespace avx2 {
extern const VectorKernels kKernels;
}
namespace avx512 {
extern const VectorKernels kKernels;
}

// The table for level; HOIST_CHECKs that the CPU can run it.
const VectorKernels& VectorKernelsFor(SimdLevel level);

}  // namespace hoist::kernels::cpu
