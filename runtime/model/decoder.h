// DecoderModel: the rotary decoder families of Hugging Face transformers — Llama
// (LlamaForCausalLM), Qwen2, Qwen3, Mistral and Gemma 2 — as one model over the block model
// (runtime/model/block_model.h). Every one is a pre-norm decoder with RMSNorm, rotary position
// embeddings (rope_theta, and Llama 3's rope_scaling), grouped-query attention (n_kv_head
// key/value heads), a gated MLP and an output head of its own or tied to the token embedding
// (tie_word_embeddings); the families differ in what DecoderTraits names, declared in each
// family's own file (runtime/model/llama.cc, qwen2.cc, qwen3.cc, mistral.cc, gemma2.cc), and in the
// per-layer attention options the config carries (head_dim, sliding_window and its layers,
// query_pre_attn_scalar, the soft caps). Computed through a device backend's ops
// (kernels/backend.h), in fp32 or a 16-bit type, behind the Model interface
// (runtime/model/model.h).
//
// Units (the granularity at which ZeRO partitions, gathers and reduces):
//   unit 0      embed_tokens (Vp, C): the vocabulary padded to a multiple of 128 as GPT-2's; the
//               padding rows stay 0 (no token and no target touches them);
//   unit 1 + l  block l: input_layernorm (C), qkv (NH*hd + 2*NKV*hd, C) = q_proj's rows, then
//               k_proj's, then v_proj's; with qkv_bias its bias (NH*hd + 2*NKV*hd); with qk_norm
//               q_norm (hd) and k_norm (hd); o_proj (C, NH*hd); with sandwich norms the norm of
//               the attention's output (C); the MLP's input norm (C); gate_up (2I, C) =
//               gate_proj's rows then up_proj's; down_proj (C, I); with sandwich norms the norm
//               of the MLP's output (C);
//   unit L + 1  the final norm (C), then lm_head (Vp, C) unless the head is tied (it then uses
//               unit 0's embedding, which a training forward keeps acquired until backward's
//               head, as Gpt2Model does).
// A family without a tensor has it empty, so Llama's units are what they were before the other
// families came. Matrices are (out, in) row-major, as torch.nn.Linear keeps them, so a Hugging
// Face checkpoint maps onto the units tensor by tensor (DecoderHfTensors); the fused tensors are
// contiguous row ranges of their parts.
//
// One block: a = attention(rope(qk_norm(qkv(norm1(x))))) with the layer's window, scale and soft
// cap; h = x + post_norm1(o_proj(a)); out = h + post_norm2(down_proj(act(gate) * up)) where
// (gate, up) = gate_up(norm2(h)), act SiLU or the tanh GELU; the post norms only with sandwich
// norms. Then the final norm, the head (its logits soft-capped where the config says),
// cross-entropy. The token embedding is gathered with the backend's encoder op against a zero
// position table (the table costs max_T x C), scaled by sqrt(C) for Gemma. The rotary table (cos,
// sin for max_T positions) is computed once on the host (kernels/rope.h) and copied to the device.
//
// Activation checkpointing as Gpt2Model's: full and every_k keep only a checkpointed block's
// input, selective keeps the matmul outputs (qkv, the projections' outputs, gate_up) and
// recomputes the norms, the attention and the gated activation; recomputation runs the same ops
// on the same inputs, so the gradients are bit-identical to keeping everything. Memory is
// tracked: params as Category::kParam, grads as kGrad, activations as kActivation. Not
// thread-safe: one model is driven by one thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "runtime/model/block_model.h"
#include "runtime/model/model_config.h"
#include "runtime/model/unit_layout.h"
#include "zero/param_store.h"
#include "zero/partition.h"

namespace hoist::runtime {

// What sets a rotary family's block apart from Llama's, fixed by the family.
struct DecoderTraits {
  bool qkv_bias = false;          // Qwen2: q_proj, k_proj and v_proj have biases
  bool qk_norm = false;           // Qwen3: an RMSNorm over each query and key head before RoPE
  bool sandwich_norms = false;    // Gemma 2: norms of the attention's and the MLP's outputs too
  bool unit_offset_norm = false;  // Gemma 2: RMSNorms scale by (1 + w), in fp32
  bool gelu_gate = false;         // Gemma 2: GeGLU (tanh GELU) instead of SwiGLU
  bool scaled_embedding = false;  // Gemma 2: the embedding's output times sqrt(hidden_size)
};
// The traits of `family` (one of the rotary families).
const DecoderTraits& TraitsOf(ModelFamily family);

enum DecoderTensor {
  kDecoderEmbedTokens = 0,  // (Vp, C)                 unit 0
  kDecoderInputNorm,        // (C)                     unit 1 + l
  kDecoderQkv,              // ((NH + 2 NKV) hd, C)    unit 1 + l
  kDecoderQkvBias,          // ((NH + 2 NKV) hd)       unit 1 + l; empty without qkv_bias
  kDecoderQNorm,            // (hd)                    unit 1 + l; empty without qk_norm
  kDecoderKNorm,            // (hd)                    unit 1 + l; empty without qk_norm
  kDecoderOProj,            // (C, NH hd)              unit 1 + l
  kDecoderAttnOutNorm,      // (C)                     unit 1 + l; empty without sandwich norms
  kDecoderMlpNorm,          // (C)                     unit 1 + l
  kDecoderGateUp,           // (2I, C)                 unit 1 + l
  kDecoderDown,             // (C, I)                  unit 1 + l
  kDecoderMlpOutNorm,       // (C)                     unit 1 + l; empty without sandwich norms
  kDecoderFinalNorm,        // (C)                     unit L + 1
  kDecoderLmHead,           // (Vp, C)                 unit L + 1; empty when tied
  kNumDecoderTensors
};

// Where each tensor sits: the units and each tensor's place and shape in its unit.
struct DecoderLayout : UnitLayout<kNumDecoderTensors> {
  bool tied = false;
  // The tensor's shape within one unit (one layer's slice for the per-block tensors); lm_head's
  // is {0, C} when tied.
  std::array<std::vector<int64_t>, kNumDecoderTensors> shapes;

  static DecoderLayout For(const ModelConfig& config);
  // "embed_tokens", "input_layernorm", "qkv", "qkv_bias", "q_norm", "k_norm", "o_proj",
  // "attention_output_norm", "mlp_norm", "gate_up", "down_proj", "mlp_output_norm", "norm",
  // "lm_head".
  static const char* Name(int tensor);
  // Weight decay applies to the 2-D weights (embedding, projections, head), not to the norms and
  // the biases (transformers' Trainer's rule).
  static bool Decayed(int tensor);
  static bool PerBlock(int tensor);

  // The units with their weight-decay segments, for the ZeRO engine.
  std::vector<zero::UnitSpec> Units() const;
};

// One tensor of a Hugging Face checkpoint of a rotary family and where it lives in the units: its
// elements are those of `shape` (row-major, transformers' layout), at element `offset` of unit
// `unit` (the padded rows of the embedding and the head come after the real ones and stay 0).
struct DecoderHfTensor {
  std::string name;            // "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // as transformers keeps it: embed_tokens (V, C) without padding
  int unit = 0;
  int64_t offset = 0;
  int tensor = 0;  // the DecoderTensor it is (a part of)
  int layer = -1;  // the block, or -1
};
// Every tensor of the family's *ForCausalLM state_dict for `config`, in its order (lm_head.weight
// last, and absent when the head is tied).
std::vector<DecoderHfTensor> DecoderHfTensors(const ModelConfig& config);

// Hugging Face's initialisation of one unit: weights N(0, 0.02), biases 0, norms 1 (0 where they
// scale by 1 + w), the padded rows 0; each tensor slice draws from its own stream keyed on (seed,
// tensor, layer), so a unit's values depend on (seed, unit) alone.
void InitializeDecoderUnit(const ModelConfig& config, int unit, uint64_t seed, float* out);
// Elements [begin, begin + count) of that unit alone, the same bits (runtime/model/weight_init.h).
void InitializeDecoderRange(const ModelConfig& config, int unit, uint64_t seed, int64_t begin,
                            int64_t count, float* out);

class DecoderModel final : public BlockModel {
 public:
  // As Gpt2Model::Create: activations for micro-batches up to (max_B, max_T), the parameters and
  // gradients too unless `store` is given (it must then serve DecoderLayout::For(config)'s units
  // in activation_type). kInvalidArgument for a config that is not a rotary family's or whose
  // dimensions do not fit together.
  static StatusOr<std::unique_ptr<DecoderModel>> Create(
      const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
      zero::ParamStore* store = nullptr, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {});
  // The same on a CPU backend of the model's own, allocating from `device`.
  static StatusOr<std::unique_ptr<DecoderModel>> Create(
      const ModelConfig& config, int max_B, int max_T, Device* device,
      zero::ParamStore* store = nullptr, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {});
  ~DecoderModel() override;

  // What Create allocates for activations (the rotary table included), counted by the same code
  // without allocating, on a backend of kind `device`.
  static ActivationBytes ActivationFootprint(
      const ModelConfig& config, int max_B, int max_T, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {},
      DeviceKind device = DeviceKind::kCpu);

  const DecoderLayout& layout() const { return layout_; }

 private:
  // The per-layer activations backward reads: the attention probabilities in fp32, the rest in
  // the activation type. kSavedQkv holds q and k after their norms and the rotation; with
  // qk_norm kSavedQkvProj holds the projection before them (else it is empty). kSavedAttnOut and
  // kSavedMlpOut, the projections' outputs before the sandwich norms, are empty without them. The
  // selective policy keeps the matmuls' outputs: qkv (or the projection), the attention's
  // projection, residual2, gate_up and the MLP's projection.
  enum Saved {
    kSavedLn1,
    kSavedQkvProj,
    kSavedQkv,
    kSavedAtty,
    kSavedAtt,
    kSavedAttnOut,
    kSavedResidual2,
    kSavedLn2,
    kSavedGateUp,
    kSavedAct,
    kSavedMlpOut,
    kSavedResidual3,
    kNumSaved
  };
  DecoderModel(const ModelConfig& config, int max_B, int max_T, DType activation_type,
               const ActivationCheckpointingConfig& checkpointing);

  void DeclareArrays(Arrays& activations, Arrays& scratch) override;
  int64_t SavedCount(int s, int B, int T) const override;
  int64_t AttentionWorkspaceBytes() const override;
  Status Prepare() override;
  Status EmbedForward(const void* embedding) override;
  Status BlockForward(int l, const void* residual, const void* weights, const void* adapters,
                      void* scratch, uint64_t compute) override;
  Status BlockBackward(int l, const void* residual, const void* weights, float* grads,
                       const void* adapters, float* adapter_grads) override;
  Status FinalNormForward(const void* final_unit, const void* residual) override;
  Status FinalNormBackward(const void* final_unit, float* grads, const void* residual) override;
  Status EmbedBackward(float* grads) override;
  float* lse(int l) const;
  kernels::AttentionOptions AttentionOf(int l) const;
  kernels::RmsNormStyle norm_style() const;
  kernels::GluActivation activation() const;

  DecoderLayout layout_;
  const DecoderTraits& traits_;
  int NH_, NKV_, hd_, C_, I_, QKV_;  // QKV_: (NH + 2 NKV) hd
  float* rope_cos_ = nullptr;        // (max_T, hd/2)
  float* rope_sin_ = nullptr;        // (max_T, hd/2)
  void* zero_positions_ = nullptr;   // (max_T, C) zeros: the encoder op's position table
  float* dpositions_ = nullptr;      // (max_T, C) where the encoder's backward puts its gradient
  float* rstd1_ = nullptr;           // (L,B,T)
  float* lse_ = nullptr;             // (L,B,NH,T) with tiled attention
  float* rstd2_ = nullptr;           // (L,B,T)
  float* rstd_qk_ = nullptr;         // (L,B,T,NH+NKV) with qk_norm
  float* rstd_attn_out_ = nullptr;   // (L,B,T) with sandwich norms
  float* rstd_mlp_out_ = nullptr;    // (L,B,T) with sandwich norms
  float* rstdf_ = nullptr;           // (B,T)
  float embed_scale_ = 1.0f;         // sqrt(C) rounded to the activation type, or 1
  // Backward scratch in the activation type.
  void* datty_ = nullptr;      // (B,T,NH hd)
  void* dqkv_ = nullptr;       // (B,T,QKV)
  void* dgateup_ = nullptr;    // (B,T,2I)
  void* dact_ = nullptr;       // (B,T,I)
  void* dqkv_proj_ = nullptr;  // (B,T,QKV) with qk_norm
  void* dproj_ = nullptr;      // (B,T,C) with sandwich norms: a projection's output gradient
};

}  // namespace hoist::runtime
