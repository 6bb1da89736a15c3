// CPU kernels of GPT-2 training, forward and backward, on fp32 arrays in row-major layout.
// Conventions (shared by every op here):
//   - N = B*T rows; C channels; OC output channels; NH heads; V real vocabulary, Vp padded.
//   - Backward ops ACCUMULATE (+=) into every gradient they write (dinp, dweight, dbias, ...),
//     so gradient accumulation over micro-batches and residual fan-out need no extra buffers.
//     Callers zero gradient buffers when a new accumulation starts.
//   - Ops use the OpenMP thread team and the SIMD level of ActiveSimdLevel(); results are
//     deterministic for a given thread count (no atomics, fixed reduction order).
//   - Shapes are not validated here (hot path); the model validates once at construction.
// Thread-safe in the sense that distinct calls on distinct buffers may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/attention_options.h"
#include "kernels/op_variants.h"

namespace hoist::kernels::cpu {

// out (B,T,C) = wte[tokens[b,t]] (Vp,C) + wpe[t] (maxT,C)
void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                    int T, int C);
// dwte (Vp,C) += scatter of dout by token; dwpe (maxT,C) += sum over b of dout[b,t]
void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                     int T, int C);

// out (N,C) = (inp - mean) * rstd * weight + bias, eps 1e-5; saves mean (N), rstd (N)
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int N, int C);
// dinp (N,C) += the input gradient; dweight, dbias (C) += the parameter gradients. dweight and
// dbias may each be null (frozen parameters): dinp is the same bits either way.
void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean, const float* rstd,
                       int N, int C);

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be null. Through BLAS sgemm.
void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int N,
                   int C, int OC);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += column sums of dout.
// dbias may be null (no bias); dinp may be null (input needs no gradient, e.g. the first op);
// dweight may be null (a frozen weight: its product is skipped).
void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int N, int C, int OC);
// dbias (OC) += column sums of dout (N,OC), in a fixed order.
void BiasBackward(float* dbias, const float* dout, int N, int OC);

// Causal multi-head self-attention. qkv (B,T,3C) holds q, k, v side by side; head h uses
// channels [h*hs, (h+1)*hs) of each, hs = C/NH. att (B,NH,T,T) receives the softmax
// probabilities (entries above the diagonal are written as 0). out (B,T,C).
void AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) += gradient of out w.r.t. qkv, given the att saved by the forward.
void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                       int T, int C, int NH);
// The same attention, tiled with an online softmax (flash_attention.h): keeps lse (B,NH,T), the
// log-sum-exp of each query row's scaled scores, instead of att, so what is saved for backward
// grows linearly in T. Workspace per thread is bounded by the tile sizes (plus T floats).
void AttentionForwardTiled(float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) += gradient of out w.r.t. qkv, recomputing the probabilities tile by tile from
// qkv and lse; out is the forward's output.
void AttentionBackwardTiled(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int B, int T, int C, int NH);

// Grouped-query causal attention (Llama's num_key_value_heads). qkv (B,T,(NH+2*NKV)*hd) holds,
// in each row, NH query heads, then NKV key heads, then NKV value heads, each hd wide (Llama's
// q_proj, k_proj and v_proj outputs side by side). Query head h attends with key/value head
// h / (NH/NKV) (HF's repeat_kv); NH % NKV == 0. out (B,T,NH*hd), att (B,NH,T,T) and lse (B,NH,T)
// as above; backward adds into dqkv (B,T,(NH+2*NKV)*hd). `options` (kernels/attention_options.h,
// valid: the backend checks them) scale the scores (default 1/sqrt(hd)), may restrict each query
// to a sliding window of keys (att is 0 outside it; the kernels skip the products of keys outside
// every window of a block or tile) and may soft-cap the scores; backward is the gradient of that
// forward. With the default options, NKV == NH and hd = C/NH these are the multi-head ops above,
// bit for bit (those call these).
void AttentionForwardGqa(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                         int hd, const AttentionOptions& options = {});
void AttentionBackwardGqa(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                          int T, int NH, int NKV, int hd, const AttentionOptions& options = {});
void AttentionForwardTiledGqa(float* out, float* lse, const float* qkv, int B, int T, int NH,
                              int NKV, int hd, const AttentionOptions& options = {});
void AttentionBackwardTiledGqa(float* dqkv, const float* dout, const float* qkv, const float* out,
                               const float* lse, int B, int T, int NH, int NKV, int hd,
                               const AttentionOptions& options = {});

// RMSNorm in `style` (kernels/op_variants.h): rstd (N) = 1/sqrt(mean(inp^2) + eps), the mean of
// squares summed in double. kLlama (LlamaRMSNorm): out (N,C) = round_to(inp * rstd,
// normalized_type) * weight. normalized_type is the model's activation type: HF casts the
// normalized row to the input dtype BEFORE multiplying by the weight, so a 16-bit model rounds
// there (and the caller rounds out); kFloat32 rounds nothing. kGemma (GemmaRMSNorm): out =
// inp * rstd * (1 + weight), nothing rounded (normalized_type is not used).
void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                    float eps, DType normalized_type = DType::kFloat32,
                    RmsNormStyle style = RmsNormStyle::kLlama);
// dinp (N,C) += rstd * (w*dout - n * mean(w*dout*n)) with n = inp * rstd (unrounded) and w the
// weight (kGemma: 1 + weight, in fp32); dweight (C) += sum over rows of dout * n, in row order
// (threads own column blocks); null: a frozen weight, only dinp.
void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int N, int C,
                     RmsNormStyle style = RmsNormStyle::kLlama);

// RMSNorm of each query and key head (Qwen3's q_norm and k_norm) over rows of the attention
// layout above: inp and out (N, (NH+2*NKV)*hd) hold NH query heads, NKV key heads and NKV value
// heads per row. Each query head is normalised as one RmsNormForward row of hd with q_weight (hd),
// each key head with k_weight (hd), the same arithmetic; the value heads are copied. rstd
// (N, NH+NKV) holds a row's query heads' then key heads' rstd. out must not overlap inp.
void HeadRmsNormForward(float* out, float* rstd, const float* inp, const float* q_weight,
                        const float* k_weight, int N, int NH, int NKV, int hd, float eps,
                        DType normalized_type = DType::kFloat32,
                        RmsNormStyle style = RmsNormStyle::kLlama);
// dinp (N, (NH+2*NKV)*hd) += RmsNormBackward's gradient of each query and key head, and dout
// itself for the value heads; dq_weight and dk_weight (hd) += the sums over the rows' query and
// key heads, in row order (each may be null: frozen).
void HeadRmsNormBackward(float* dinp, float* dq_weight, float* dk_weight, const float* dout,
                         const float* inp, const float* q_weight, const float* k_weight,
                         const float* rstd, int N, int NH, int NKV, int hd,
                         RmsNormStyle style = RmsNormStyle::kLlama);

// Rotary position embeddings (HF's rotate_half convention), IN PLACE on the NH query heads and the
// NKV key heads of qkv (B,T,(NH+2*NKV)*hd) (the layout of AttentionForwardGqa; the value heads are
// left alone). cos and sin (T, hd/2) are RopeTable's (kernels/rope.h): row t serves position t.
// For i < hd/2, with c = cos[t,i], s = sin[t,i]:
//   x[i] <- x[i] c - x[i + hd/2] s,   x[i + hd/2] <- x[i + hd/2] c + x[i] s.
// hd is even.
void RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                 int hd);
// The backward, IN PLACE on dqkv: the rotation by the negative angle (the transpose), which turns
// the gradient of the rotated q and k into that of the unrotated ones (not an accumulation: the
// gradient of the rotated heads is replaced). The value heads are left alone.
void RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int hd);

// A gated MLP's activation (kernels/op_variants.h: SwiGLU, GeGLU) over a fused gate|up layout:
// inp (N, 2I) holds, in each row, the gate projection's I values then the up projection's I values
// (gate_proj and up_proj stacked into one (2I, C) weight). out (N,I) = act(gate) * up, with
// act(g) = g / (1 + e^-g) (kSilu) or 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (kGeluTanh,
// through std::tanh: unlike GeluForward's vectorised approximation, accurate to the float).
void GluForward(float* out, const float* inp, int N, int I, GluActivation activation);
// dinp (N,2I) += [dout * up * act'(gate) | dout * act(gate)].
void GluBackward(float* dinp, const float* inp, const float* dout, int N, int I,
                 GluActivation activation);

// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void GeluForward(float* out, const float* inp, size_t n);
void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n);

// out = inp * scale (out may be inp).
void Scale(float* out, const float* inp, size_t n, float scale);
// x = cap * tanh(x / cap) in place (tanh(x / cap) rounded to float, then the product); cap > 0.
void SoftcapForward(float* x, size_t n, float cap);

// out = a + b
void ResidualForward(float* out, const float* a, const float* b, size_t n);
// da += dout; db += dout
void ResidualBackward(float* da, float* db, const float* dout, size_t n);

// Fused softmax + cross-entropy over logits (N,Vp), of which the first V columns are real.
// losses (N) = -log softmax(z[i, :V])[targets[i]] with z the logits, or with softcap > 0 the
// capped logits: SoftcapForward's values (unrounded), through std::tanh. If dlogits is not null it
// is OVERWRITTEN (not accumulated; it may alias logits) with the gradient with respect to the raw
// logits, dloss * (softmax(z) - onehot), times 1 - tanh^2(logits / softcap) when capped, in the
// first V columns and 0 in the padding. targets are in [0, V) (checked by the data loader, not
// here). softcap 0: no cap.
void SoftmaxCrossEntropy(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                         float dloss, int N, int V, int Vp, float softcap = 0.0f);
// The same on logits and dlogits of a 16-bit `type` (bf16 or fp16 bits; dlogits may alias
// logits): a row at a time widened, computed as above and rounded once. Bit for bit what widening
// the whole array, the fp32 kernel and one rounding give, without the two fp32 copies of (N,Vp).
void SoftmaxCrossEntropy16(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                           float dloss, int N, int V, int Vp, DType type, float softcap = 0.0f);

// The LoRA ops (kernels/backend.h gives their contracts). C (M,N) = alpha op(A) @ op(B) + beta C,
// row-major with leading dimensions, through sgemm; beta 0 does not read C, K 0 scales C by beta,
// and only the M x N window of C is written.
void Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// out[i] = inp[i] * keep(seed, i) / (1 - p) with kernels/dropout_mask.h's mask; out may be inp.
// `first` is the index of out[0] in the masked array (its counter), so that a chunk of a larger
// array gets that array's mask.
void Dropout(float* out, const float* inp, int64_t n, float p, uint64_t seed, int64_t first = 0);

// In-place AdamW on n parameters, as torch.optim.AdamW computes it:
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param -= lr * weight_decay * param
//   param -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// t is the 1-based step count. grad_scale carries gradient clipping (and later unscaling).
void AdamW(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int64_t t, float grad_scale);

// Sum of squares of x in double precision, in a fixed order (deterministic for a thread count).
double SumOfSquares(const float* x, size_t n);

}  // namespace hoist::kernels::cpu
