// Backend: the primitives the runtime computes with, behind one interface per kind of device
// (the ggml pattern: the engine and the model call primitives; a backend implements them). What
// differs between a CPU rank and a GPU rank is the backend below the ZeRO engine, not the engine.
//
//   - CpuBackend (kernels/cpu_backend.h) runs kernels/cpu/ on the host, inline on the calling
//     thread: the CPU rank's backend, and the oracle of every other backend, op by op.
//   - The same class with threaded streams runs each stream's work on a worker thread: a test
//     backend under which a missing event is a data race that ThreadSanitizer finds without a GPU.
//   - A CUDA backend wraps kernels/cuda/ (whose entry points take a stream and return a Status).
//
// Every op is enqueued on the stream it is given and returns at once on a backend whose streams
// are asynchronous: its arguments must stay alive, and its outputs must not be read, until an
// event recorded after it has completed (core/stream.h). Pointers are memory of the backend's
// device unless an op says otherwise; page-locked host memory (pinned pools, staging buffers) may
// stand in for it, since a GPU reaches that over the bus, but pageable host memory (a vector, a
// caller's array) may not, except as the host side of a Copy. On the CPU backend every pointer
// is host memory, so only a GPU run shows a pageable pointer where device memory belongs. Errors:
// a bad argument is kInvalidArgument naming the op; a failure of the work itself may surface at a
// later call on the same stream or at its Synchronize, as CUDA reports them.
//
// A backend is used by one thread at a time (the thread that drives the rank). The memory and
// the streams it hands out belong to it and must not outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/stream.h"
#include "kernels/attention_options.h"
#include "kernels/nf4.h"
#include "kernels/op_variants.h"

namespace hoist::kernels {

// Which memory a Copy moves between: the backend's device and (page-locked, for overlap) host
// memory. On the CPU backend both are host memory.
enum class CopyDirection { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

// One tensor of a multi-tensor AdamW step: n elements in each array, fp32 param, m and v updated
// in place, grad of the step's grad type, copy (may be null) written with the updated parameter
// rounded to the step's copy type.
struct AdamWTensorRef {
  float* param = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const void* grad = nullptr;
  void* copy = nullptr;
  int64_t n = 0;
  float weight_decay = 0.0f;  // decoupled; 0 for the tensors that are not decayed
};

// One tensor of an 8-bit AdamW step (kernels/cpu/adamw8bit_step.h: bitsandbytes' block-wise
// 8-bit AdamW): param, grad and copy as in AdamWTensorRef; the moments as n codes each (m of the
// signed dynamic map, v of the unsigned one) and QuantBlocks(n) fp32 absmaxes each, the blocks
// of kQuantBlockSize elements starting at element 0, all updated in place.
struct AdamW8bitTensorRef {
  float* param = nullptr;
  uint8_t* m = nullptr;
  uint8_t* v = nullptr;
  float* absmax_m = nullptr;
  float* absmax_v = nullptr;
  const void* grad = nullptr;
  void* copy = nullptr;
  int64_t n = 0;
  float weight_decay = 0.0f;
};

// The step's scalars: torch.optim.AdamW's update (kernels/cpu/adamw_step.h gives the arithmetic
// every backend repeats operation for operation).
struct AdamWStepScalars {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float grad_scale = 1.0f;  // clipping and loss-scale unscaling in one factor
  int64_t step = 1;         // 1-based
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceKind kind() const = 0;
  // "cpu", "cpu (threaded streams)", "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string name() const = 0;
  // The compute device's memory (Place::kDevice), counted in its tracker.
  virtual Device& device() = 0;

  // The stream the model and the engine compute on, and the one host<->device copies take so
  // that they overlap the compute.
  virtual const Stream& compute_stream() const = 0;
  virtual const Stream& copy_stream() const = 0;
  virtual StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;
  // Whether `p` is memory of the backend's device, which the host reaches only through Copy (a
  // host scalar or vector is not, nor pinned host memory). The CPU backend, whose device is host
  // memory, answers as a GPU would while live_memory records allocations (tests): what a Device of
  // Place::kDevice handed out is device memory, any other pointer is not; with the record off,
  // every pointer is.
  virtual bool IsDeviceMemory(const void* p) const = 0;
  // Whether the ops take host memory (pageable or pinned) for their arrays, as the CPU's do; a
  // GPU's do not (offloaded states are updated by the CPU's ops there). The CPU backend answers
  // as a GPU would while live_memory records allocations (tests).
  virtual bool OperatesOnHostMemory() const = 0;

  // dst[0, bytes) = 0.
  virtual Status Zero(void* dst, int64_t bytes, const Stream& stream) = 0;
  // dst[0, bytes) = src[0, bytes); the two must not overlap.
  virtual Status Copy(void* dst, const void* src, int64_t bytes, CopyDirection direction,
                      const Stream& stream) = 0;
  // dst[i] = src[i] for i < n, converted: widened exactly, or rounded to nearest even when
  // narrowing (16-bit to the other 16-bit type goes through fp32). Same types: a copy. dst and
  // src may be the same array only when the types are equal.
  virtual Status Cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n,
                      const Stream& stream) = 0;
  // acc[i] = round_acc_type(acc[i] + scale * add[i]) for i < n, in fp32 arithmetic.
  virtual Status Accumulate(void* acc, DType acc_type, const void* add, DType add_type, float scale,
                            int64_t n, const Stream& stream) = 0;
  // *sum += the sum over i < n of (x[i] * scale)^2, each call's part computed in a fixed order
  // (deterministic) and added in double. `sum` is one double of device memory.
  virtual Status SumOfSquares(const void* x, DType type, float scale, int64_t n, double* sum,
                              const Stream& stream) = 0;
  // One AdamW step over every tensor: grads of grad_type, copies of copy_type (16-bit, or any
  // type where no tensor has a copy). Deterministic, and the same bits on every backend.
  virtual Status AdamW(std::span<const AdamWTensorRef> tensors, DType grad_type, DType copy_type,
                       const AdamWStepScalars& scalars, const Stream& stream) = 0;
  // The same update with 8-bit moments: per block, dequantize, AdamW's arithmetic, requantize
  // against the block's new absmax. Deterministic, and the same bits on every backend.
  virtual Status AdamW8bit(std::span<const AdamW8bitTensorRef> tensors, DType grad_type,
                           DType copy_type, const AdamWStepScalars& scalars,
                           const Stream& stream) = 0;

  // The model's ops: GPT-2's forward and backward, with the shapes and arithmetic of
  // kernels/cpu/ops.h (N = B*T rows, C channels, OC output channels, NH heads, V real and Vp
  // padded vocabulary; layernorm eps 1e-5; tanh GELU; causal attention scaled by 1/sqrt(C/NH)).
  // Activations, their gradients and the weights are `type` (fp32, bf16 or fp16); mean, rstd,
  // att, lse and losses are fp32, and so are the weight gradients (dweight, dbias, dwte, dwpe),
  // which are accumulators. Backward ops ADD to every gradient they write; a 16-bit activation
  // gradient is rounded once, after the addition. Tokens and targets are int32 in [0, Vp) and
  // [0, V), in the backend's device memory. The products accumulate in fp32 whatever `type`.
  // GPU kernels may add with atomics where the CPU's order is fixed (the encoder's dwte, the
  // layernorm's and the biases' parameter gradients): those agree to rounding, not to the bit.
  // Products and attention run on the compute stream only (one BLAS workspace serves them).

  // out (B,T,C) = wte[tokens] + wpe[t]. dwte (Vp,C) += dout scattered by token; dwpe += dout
  // summed over the batch.
  virtual Status EncoderForward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                int B, int T, int C, DType type, const Stream& stream) = 0;
  virtual Status EncoderBackward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                                 int B, int T, int C, DType type, const Stream& stream) = 0;
  // out (N,C) = (inp - mean) * rstd * weight + bias, keeping mean and rstd (N) for backward.
  // Backward: dweight and dbias may each be null (a frozen parameter: no gradient computed), and
  // dinp is then the same as with them (the same bits on the CPU).
  virtual Status LayerNormForward(void* out, float* mean, float* rstd, const void* inp,
                                  const void* weight, const void* bias, int N, int C, DType type,
                                  const Stream& stream) = 0;
  virtual Status LayerNormBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                                   const void* inp, const void* weight, const float* mean,
                                   const float* rstd, int N, int C, DType type,
                                   const Stream& stream) = 0;
  // out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (may be null). gelu_out, when not null,
  // receives GELU(out) as well, computed from the fp32 product before either is rounded (out
  // keeps the pre-activation that GeluBackward needs). Where the CUDA backend cannot fuse the
  // GELU into the product (OC not a multiple of 8, a misaligned bias) it applies it to the rounded
  // out instead: in 16-bit types the two differ by about one rounding.
  virtual Status MatmulForward(void* out, const void* inp, const void* weight, const void* bias,
                               int N, int C, int OC, DType type, void* gelu_out,
                               const Stream& stream) = 0;
  // dinp (N,C) += dout @ weight (dinp null: not wanted); dweight (OC,C) += dout^T @ inp (null: a
  // frozen weight, whose product is skipped); dbias (OC) += column sums of dout (null: no bias,
  // or a frozen one).
  virtual Status MatmulBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                                const void* inp, const void* weight, int N, int C, int OC,
                                DType type, const Stream& stream) = 0;
  // Direct attention: att (B,NH,T,T) keeps the probabilities (0 above the diagonal) for backward;
  // dqkv (B,T,3C) += the gradient. `workspace` holds AttentionWorkspaceBytes of device memory
  // (none may be needed: 0 bytes, and workspace may then be null); nothing in it outlives a call.
  virtual int64_t AttentionWorkspaceBytes(int B, int T, int C, int NH, DType type) const = 0;
  virtual Status AttentionForward(void* out, float* att, const void* qkv, void* workspace, int B,
                                  int T, int C, int NH, DType type, const Stream& stream) = 0;
  virtual Status AttentionBackward(void* dqkv, const void* dout, const void* qkv, const float* att,
                                   void* workspace, int B, int T, int C, int NH, DType type,
                                   const Stream& stream) = 0;
  // Tiled attention (an online softmax; never forms T x T): lse (B,NH,T) keeps each query row's
  // log-sum-exp; backward recomputes the probabilities from qkv, out and lse. Its workspace holds
  // TiledAttentionWorkspaceBytes (the same rules as above).
  virtual int64_t TiledAttentionWorkspaceBytes(int B, int T, int NH) const = 0;
  virtual Status AttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T, int C,
                                       int NH, DType type, const Stream& stream) = 0;
  virtual Status AttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv,
                                        const void* out, const float* lse, void* workspace, int B,
                                        int T, int C, int NH, DType type, const Stream& stream) = 0;
  // The Llama family's ops, and the variants Qwen3 and Gemma 2 need (kernels/cpu/ops.h gives each
  // one's arithmetic), with the conventions above. Their attention layout: qkv (B,T,(NH+2*NKV)*hd)
  // holds in each row NH query heads, then NKV key heads, then NKV value heads, each hd wide
  // (Llama's q_proj, k_proj, v_proj outputs side by side); query head h uses key/value head h /
  // (NH/NKV) (HF's repeat_kv), NH % NKV == 0, scores scaled by 1/sqrt(hd) unless the attention
  // options say otherwise; out (B,T,NH*hd).
  //
  // Grouped-query attention, direct (att (B,NH,T,T) kept) and tiled (lse (B,NH,T) kept), with the
  // same contracts as AttentionForward/AttentionForwardTiled, and `options`
  // (kernels/attention_options.h):
  //   - scale: scores = (q . k) * scale; 0 means 1/sqrt(hd) (Gemma 2: query_pre_attn_scalar^-0.5);
  //   - window: 0, query i attends every key j <= i; > 0, Hugging Face's sliding_window: i attends
  //     j iff i - window < j <= i (1: itself only; >= T: the same bits as 0). att is 0 outside
  //     the window. The tiled ops skip the key tiles outside every window of a query tile (and
  //     the query tiles no window of a key tile reaches), so a short window costs less; the CPU's
  //     direct ops skip the keys before a row block's windows, the GPU's mask them;
  //   - softcap: 0, none; > 0, Gemma 2's attn_logit_softcapping: after scaling and before the
  //     mask, s = softcap * tanh(s / softcap); lse is that of the capped scores.
  // The backward is the gradient of that forward, the softcap's slope 1 - tanh^2 included (with a
  // softcap the direct backward recomputes the scores from qkv: att keeps only probabilities). A
  // negative window, or a scale or softcap that is negative or not finite, is kInvalidArgument
  // naming the op and the option.
  // Default options are plain causal attention, the same bits as before the options; with them,
  // NKV == NH and hd == C/NH these give the multi-head ops' results bit for bit. The workspace
  // sizes are for these shapes, whatever the options.
  virtual int64_t GqaAttentionWorkspaceBytes(int B, int T, int NH, int NKV, int hd,
                                             DType type) const = 0;
  virtual Status GqaAttentionForward(void* out, float* att, const void* qkv, void* workspace, int B,
                                     int T, int NH, int NKV, int hd,
                                     const AttentionOptions& options, DType type,
                                     const Stream& stream) = 0;
  virtual Status GqaAttentionBackward(void* dqkv, const void* dout, const void* qkv,
                                      const float* att, void* workspace, int B, int T, int NH,
                                      int NKV, int hd, const AttentionOptions& options, DType type,
                                      const Stream& stream) = 0;
  virtual int64_t GqaTiledAttentionWorkspaceBytes(int B, int T, int NH) const = 0;
  virtual Status GqaAttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T,
                                          int NH, int NKV, int hd, const AttentionOptions& options,
                                          DType type, const Stream& stream) = 0;
  virtual Status GqaAttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv,
                                           const void* out, const float* lse, void* workspace,
                                           int B, int T, int NH, int NKV, int hd,
                                           const AttentionOptions& options, DType type,
                                           const Stream& stream) = 0;
  // RMSNorm of `style` (kernels/op_variants.h): rstd (N, fp32) = 1/sqrt(mean(inp^2) + eps).
  //   kLlama: out (N,C) = round(inp * rstd) * weight where round is to `type` (HF's order: the
  //           normalised row is cast to the activation dtype before the weight multiplies it;
  //           nothing is rounded in fp32), then out is rounded to `type`.
  //   kGemma: out = inp * rstd * (1 + weight), all in fp32 ((inp * rstd) first, as HF), rounded
  //           once to `type`.
  // The CPU sums the squares in double, a GPU in fp32: rstd agrees to rounding. Backward: dinp +=
  // the fp32 gradient (of the unrounded formula, with the weight w, or 1 + w in fp32 for kGemma);
  // dweight (C, fp32) += the sum over rows of dout * inp * rstd in either style (null: a frozen
  // weight, only dinp).
  virtual Status RmsNormForward(void* out, float* rstd, const void* inp, const void* weight, int N,
                                int C, float eps, RmsNormStyle style, DType type,
                                const Stream& stream) = 0;
  virtual Status RmsNormBackward(void* dinp, float* dweight, const void* dout, const void* inp,
                                 const void* weight, const float* rstd, int N, int C,
                                 RmsNormStyle style, DType type, const Stream& stream) = 0;
  // RMSNorm of each query and key head (Qwen3's q_norm and k_norm; Gemma 3's with kGemma) over the
  // qkv layout above: inp and out (N, (NH+2*NKV)*hd) rows hold NH query heads, then NKV key heads,
  // then NKV value heads, each hd wide. Each query head is RmsNormForward's row of hd with
  // q_weight (hd), each key head with k_weight (hd), in `style`, the same arithmetic; the value
  // heads are copied to out unchanged. rstd (N, NH+NKV, fp32) holds each row's query heads' then
  // key heads' rstd. out must not overlap inp (the model keeps inp for backward). Backward: dinp
  // (N, (NH+2*NKV)*hd) += the gradient (the value heads': dout itself); dq_weight and dk_weight
  // (hd, fp32) += their sums over every row's query or key heads (each may be null: frozen).
  virtual Status HeadRmsNormForward(void* out, float* rstd, const void* inp, const void* q_weight,
                                    const void* k_weight, int N, int NH, int NKV, int hd, float eps,
                                    RmsNormStyle style, DType type, const Stream& stream) = 0;
  virtual Status HeadRmsNormBackward(void* dinp, float* dq_weight, float* dk_weight,
                                     const void* dout, const void* inp, const void* q_weight,
                                     const void* k_weight, const float* rstd, int N, int NH,
                                     int NKV, int hd, RmsNormStyle style, DType type,
                                     const Stream& stream) = 0;
  // Rotary position embeddings IN PLACE on the query and key heads of qkv (the layout above; the
  // value heads are untouched): pairs (i, i + hd/2) of each head of row (b, t) rotated by the
  // angle whose cos and sin are cos[t, i] and sin[t, i] (fp32 rows of hd/2, at least T of them,
  // device memory, as kernels/rope.h's MakeRopeTable computes them; a table made once for
  // max_position_embeddings serves every T), in fp32 and rounded once to `type`. The
  // backward, IN PLACE on dqkv, rotates by the negative angle: the gradient of the rotated heads
  // becomes that of the unrotated ones (replaced, not added to). hd even.
  virtual Status RopeForward(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                             int NKV, int hd, DType type, const Stream& stream) = 0;
  virtual Status RopeBackward(void* dqkv, const float* cos, const float* sin, int B, int T, int NH,
                              int NKV, int hd, DType type, const Stream& stream) = 0;
  // A gated MLP's activation over the fused gate|up layout (kernels/op_variants.h): inp (N, 2I)
  // holds gate_proj's I outputs then up_proj's I outputs in each row; out (N, I) =
  // act(gate) * up, computed in fp32 and rounded once (HF rounds act(gate) to a 16-bit dtype
  // before the product: about a rounding apart). kSilu is SwiGLU (Llama), kGeluTanh GeGLU
  // (Gemma). Backward: dinp (N, 2I) += [dout * up * act'(gate) | dout * act(gate)].
  virtual Status GluForward(void* out, const void* inp, int N, int I, GluActivation activation,
                            DType type, const Stream& stream) = 0;
  virtual Status GluBackward(void* dinp, const void* inp, const void* dout, int N, int I,
                             GluActivation activation, DType type, const Stream& stream) = 0;

  // out = GELU(inp) (may alias inp); dinp += GELU'(inp) * dout.
  virtual Status GeluForward(void* out, const void* inp, int64_t n, DType type,
                             const Stream& stream) = 0;
  virtual Status GeluBackward(void* dinp, const void* inp, const void* dout, int64_t n, DType type,
                              const Stream& stream) = 0;
  // out = a + b (may alias either); da += dout and db += dout.
  virtual Status ResidualForward(void* out, const void* a, const void* b, int64_t n, DType type,
                                 const Stream& stream) = 0;
  virtual Status ResidualBackward(void* da, void* db, const void* dout, int64_t n, DType type,
                                  const Stream& stream) = 0;
  // out = round(inp * scale) (may alias inp), the product in fp32: Gemma's embedding times
  // sqrt(C) (the caller passes the factor already rounded to `type`, as HF does) and its backward
  // (the same op on the gradient). scale finite, n >= 0.
  virtual Status Scale(void* out, const void* inp, int64_t n, float scale, DType type,
                       const Stream& stream) = 0;
  // Logit soft-capping IN PLACE: x = round(cap * tanh(x / cap)) (tanh(x / cap) first, then the
  // product, in fp32), for logits read without a loss (SoftmaxCrossEntropy caps its own). cap 0:
  // nothing is done; otherwise cap > 0 and finite. n >= 0.
  virtual Status SoftcapForward(void* x, int64_t n, float cap, DType type,
                                const Stream& stream) = 0;
  // losses (N) = -log softmax(z[i, :V])[targets[i]] where z is the logits, or with softcap > 0
  // the capped logits softcap * tanh(logits / softcap) (Gemma 2's final_logit_softcapping, in
  // fp32, as SoftcapForward computes them but not rounded to `type`). dlogits (may be null, may
  // alias logits) is OVERWRITTEN with the gradient with respect to the raw logits: dloss *
  // (softmax(z) - onehot), times 1 - tanh^2(logits / softcap) when capped; 0 in the padding
  // columns. softcap 0: no cap, the logits as they are; otherwise softcap > 0 and finite. A
  // negative target (-1, or transformers' -100) is an ignored position, a token the loss is
  // masked off: its loss is 0 and its dlogits row 0. Targets are < V.
  virtual Status SoftmaxCrossEntropy(float* losses, void* dlogits, const void* logits,
                                     const int32_t* targets, float dloss, int N, int V, int Vp,
                                     float softcap, DType type, const Stream& stream) = 0;

  // The ops of low-rank adapters (LoRA): a general product for the adapters' A and B, which
  // work on column slices of wider activations, and the dropout of the adapters' input.
  //
  // C (M,N) = alpha * op(A) @ op(B) + beta * C, row-major, each matrix with its leading dimension
  // (elements from one row to the next, >= its row length): op(A) (M,K) is A stored (M,K) at lda,
  // or with trans_a the transpose of A stored (K,M); op(B) (K,N) is B stored (K,N) at ldb, or with
  // trans_b the transpose of B stored (N,K). A and B in `type`; C in `c_type`, which is fp32 or
  // `type`. Products accumulate in fp32 and C is rounded once; beta 0 does not read C (it may hold
  // NaN). M, N or K of 0 is allowed (K 0: C = beta * C). Only the M x N window of C is written
  // (C may point into a wider matrix, ldc > N). Like the other products, compute stream only.
  virtual Status Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
                      int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
                      DType type, DType c_type, const Stream& stream) = 0;
  // out[i] = inp[i] * keep(seed, i) / (1 - p) for i in [0, n): keep(seed, i) is 1 where a
  // counter-based hash of (seed, i) mapped to [0, 1) is >= p, else 0 (kernels/dropout_mask.h);
  // the same (seed, i) gives the same mask on every backend and every call, so a backward pass
  // applies forward's mask to the gradient by calling it again with the same seed. The scale
  // 1/(1-p) is computed in fp32 and multiplies inp in fp32; 16-bit outputs are rounded once, so
  // every backend gives the same bits. p in [0, 1) (p 0: out = inp); out may be inp.
  virtual Status Dropout(void* out, const void* inp, int64_t n, float p, uint64_t seed, DType type,
                         const Stream& stream) = 0;
  // out (n elements of `type`) = the NF4 values of codes/absmax (kernels/nf4.h): kCodebook[code]
  // * absmax[i / 64] in fp32, rounded once to `type`; every backend gives the same bits. codes
  // (nf4::CodeBytes(n) bytes) and absmax (nf4::Blocks(n) floats) in the backend's device memory.
  // The oracle of the 4-bit matmuls below (which dequantize a panel at a time themselves).
  virtual Status DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax,
                               int64_t n, const Stream& stream) = 0;
  // The products of a frozen weight held in NF4 (a LoRA fine-tune's 4-bit base), without the
  // whole weight ever dequantized: MatmulForward (no GELU) and MatmulBackward's dinp (the weight
  // gets no gradient), where the weight is `weight`'s NF4 values rounded once to `type` (the bits
  // DequantizeNf4 writes). The matmul dequantizes it a panel at a time into `workspace`
  // (workspace_bytes of device memory, nf4::WorkspaceBytes of the matrix or more; it must hold
  // C and OC fp32 values) and multiplies each panel as it is made: forward a panel of whole rows
  // of the weight (so each output is one product over C, rounded once, as MatmulForward rounds
  // it: a bias the CUDA epilogue cannot take is added after, as there), backward one of whole
  // columns (each dinp element one product over OC added to it, rounded once). Nothing in the
  // workspace outlives a call. The values multiplied are those of dequantizing the whole weight
  // first; the order of the fp32 sums may differ from MatmulForward's, by the library's blocking.
  virtual Status MatmulForwardNf4(void* out, const void* inp, const nf4::Matrix& weight,
                                  const void* bias, int N, int C, int OC, DType type,
                                  void* workspace, int64_t workspace_bytes,
                                  const Stream& stream) = 0;
  virtual Status MatmulBackwardNf4(void* dinp, const void* dout, const nf4::Matrix& weight, int N,
                                   int C, int OC, DType type, void* workspace,
                                   int64_t workspace_bytes, const Stream& stream) = 0;
  // The absmaxes of a double-quantized NF4 tensor (QLoRA's double quantization, the absmaxes
  // themselves in 8 bits): out[b] = code[codes[b]] * scales[b / 256] + offset in fp32, for b in
  // [0, n), where code is kernels/cpu/blockwise_quant.h's signed dynamic map and 256 its
  // kQuantBlockSize; every backend gives the same bits (a product, then a sum, each rounded).
  // out, codes (n bytes) and scales (ceil(n / 256) floats) in the backend's device memory.
  virtual Status DequantizeNf4Absmax(float* out, const uint8_t* codes, const float* scales,
                                     float offset, int64_t n, const Stream& stream) = 0;
};

}  // namespace hoist::kernels
