// LlamaModel: the Llama family as Hugging Face's LlamaForCausalLM defines it — pre-norm blocks
// with RMSNorm, rotary position embeddings (rope_theta, and Llama 3's rope_scaling), grouped-query
// attention (n_kv_head key/value heads), a SwiGLU MLP, no biases, and an output head of its own
// or tied to the token embedding (tie_word_embeddings) — computed through a device backend's ops
// (kernels/backend.h), in fp32 or a 16-bit type, behind the Model interface (runtime/model.h).
//
// Units (the granularity at which ZeRO partitions, gathers and reduces):
//   unit 0      embed_tokens (Vp, C): the vocabulary padded to a multiple of 128 as GPT-2's; the
//               padding rows stay 0 (no token and no target touches them);
//   unit 1 + l  block l: input_layernorm (C), qkv (NH*hd + 2*NKV*hd, C) = q_proj's rows, then
//               k_proj's, then v_proj's; o_proj (C, NH*hd); post_attention_layernorm (C);
//               gate_up (2I, C) = gate_proj's rows then up_proj's; down_proj (C, I);
//   unit L + 1  the final norm (C), then lm_head (Vp, C) unless the head is tied (it then uses
//               unit 0's embedding, which a training forward keeps acquired until backward's
//               head, as Gpt2Model does).
// Matrices are (out, in) row-major, as torch.nn.Linear keeps them, so a Hugging Face checkpoint
// maps onto the units tensor by tensor (LlamaHfTensors); the fused tensors are contiguous row
// ranges of their parts.
//
// One block: h = x + o_proj(attention(rope(qkv(rmsnorm1(x))))); out = h +
// down_proj(swiglu(gate_up(rmsnorm2(h)))); then the final rmsnorm, the head, cross-entropy. The
// token embedding is gathered with the backend's encoder op against a zero position table (the
// backend has no gather of its own; the table costs max_T x C). The rotary table (cos, sin for
// max_T positions) is computed once on the host (kernels/rope.h) and copied to the device.
//
// Activation checkpointing as Gpt2Model's: full and every_k keep only a checkpointed block's
// input, selective keeps the matmul outputs (qkv after the rotation, the residual after
// attention, gate_up) and recomputes the norms, the attention and the SwiGLU; recomputation runs
// the same ops on the same inputs, so the gradients are bit-identical to keeping everything.
// Memory is tracked: params as Category::kParam, grads as kGrad, activations as kActivation. Not
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
#include "runtime/block_model.h"
#include "runtime/config.h"
#include "zero/param_store.h"
#include "zero/partition.h"

namespace hoist::runtime {

enum LlamaTensor {
  kLlamaEmbedTokens = 0,  // (Vp, C)                 unit 0
  kLlamaInputNorm,        // (C)                     unit 1 + l
  kLlamaQkv,              // ((NH + 2 NKV) hd, C)    unit 1 + l
  kLlamaOProj,            // (C, NH hd)              unit 1 + l
  kLlamaPostNorm,         // (C)                     unit 1 + l
  kLlamaGateUp,           // (2I, C)                 unit 1 + l
  kLlamaDown,             // (C, I)                  unit 1 + l
  kLlamaFinalNorm,        // (C)                     unit L + 1
  kLlamaLmHead,           // (Vp, C)                 unit L + 1; empty when tied
  kNumLlamaTensors
};

// Where each tensor sits: the units and each tensor's place and shape in its unit.
struct LlamaLayout {
  int n_layer = 0;
  bool tied = false;
  // The tensor's shape within one unit (one layer's slice for the per-block tensors); lm_head's
  // is {0, C} when tied.
  std::array<std::vector<int64_t>, kNumLlamaTensors> shapes;
  std::array<int64_t, kNumLlamaTensors> unit_sizes{};     // elements of shapes[t]
  std::array<int64_t, kNumLlamaTensors> local_offsets{};  // offset of the tensor in its unit
  std::vector<int64_t> unit_offsets;  // num_units() + 1 entries: unit u is [u, u+1) of the flat
  int64_t total = 0;

  static LlamaLayout For(const ModelConfig& config);
  // "embed_tokens", "input_layernorm", "qkv", "o_proj", "post_attention_layernorm", "gate_up",
  // "down_proj", "norm", "lm_head".
  static const char* Name(int tensor);
  // Weight decay applies to the 2-D weights (embedding, projections, head), not to the norms.
  static bool Decayed(int tensor);
  static bool PerBlock(int tensor);

  int num_units() const { return n_layer + 2; }
  int unit_of(int tensor, int layer = 0) const;
  int64_t unit_size(int unit) const { return unit_offsets[unit + 1] - unit_offsets[unit]; }
  // Offset in the flat (unit-major) buffer of `layer`'s slice of `tensor`.
  int64_t Offset(int tensor, int layer = 0) const;
  // The units with their weight-decay segments, for the ZeRO engine.
  std::vector<zero::UnitSpec> Units() const;
};

// One tensor of a Hugging Face Llama checkpoint and where it lives in the units: its elements
// are those of `shape` (row-major, transformers' layout), at element `offset` of unit `unit`
// (the padded rows of the embedding and the head come after the real ones and stay 0).
struct LlamaHfTensor {
  std::string name;            // "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // as transformers keeps it: embed_tokens (V, C) without padding
  int unit = 0;
  int64_t offset = 0;
  int tensor = 0;  // the LlamaTensor it is (a part of)
  int layer = -1;  // the block, or -1
};
// Every tensor of LlamaForCausalLM's state_dict for `config`, in its order (lm_head.weight last,
// and absent when the head is tied).
std::vector<LlamaHfTensor> LlamaHfTensors(const ModelConfig& config);

// Hugging Face's LlamaPreTrainedModel initialisation of one unit: weights N(0, 0.02), norms 1, the
// padded rows 0; each tensor slice draws from its own stream keyed on (seed, tensor, layer), so a
// unit's values depend on (seed, unit) alone.
void InitializeLlamaUnit(const ModelConfig& config, int unit, uint64_t seed, float* out);
// Elements [begin, begin + count) of that unit alone, the same bits (runtime/weight_init.h).
void InitializeLlamaRange(const ModelConfig& config, int unit, uint64_t seed, int64_t begin,
                          int64_t count, float* out);

class LlamaModel final : public BlockModel {
 public:
  // As Gpt2Model::Create: activations for micro-batches up to (max_B, max_T), the parameters and
  // gradients too unless `store` is given (it must then serve LlamaLayout::For(config)'s units
  // in activation_type). kInvalidArgument for a config that is not a Llama's or whose dimensions
  // do not fit together.
  static StatusOr<std::unique_ptr<LlamaModel>> Create(
      const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
      zero::ParamStore* store = nullptr, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {});
  // The same on a CPU backend of the model's own, allocating from `device`.
  static StatusOr<std::unique_ptr<LlamaModel>> Create(
      const ModelConfig& config, int max_B, int max_T, Device* device,
      zero::ParamStore* store = nullptr, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {});
  ~LlamaModel() override;

  // What Create allocates for activations (the rotary table included), counted by the same code
  // without allocating, on a backend of kind `device`.
  static ActivationBytes ActivationFootprint(
      const ModelConfig& config, int max_B, int max_T, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {},
      DeviceKind device = DeviceKind::kCpu);

  const LlamaLayout& layout() const { return layout_; }

 private:
  // The per-layer activations backward reads: the attention probabilities in fp32, the rest in
  // the activation type. kSavedQkv holds q and k after the rotation. The selective policy keeps
  // qkv, residual2 and gate_up.
  enum Saved {
    kSavedLn1,
    kSavedQkv,
    kSavedAtty,
    kSavedAtt,
    kSavedResidual2,
    kSavedLn2,
    kSavedGateUp,
    kSavedSwiGlu,
    kSavedResidual3,
    kNumSaved
  };
  LlamaModel(const ModelConfig& config, int max_B, int max_T, DType activation_type,
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

  LlamaLayout layout_;
  int NH_, NKV_, hd_, C_, I_, QKV_;  // QKV_: (NH + 2 NKV) hd
  float* rope_cos_ = nullptr;        // (max_T, hd/2)
  float* rope_sin_ = nullptr;        // (max_T, hd/2)
  void* zero_positions_ = nullptr;   // (max_T, C) zeros: the encoder op's position table
  float* dpositions_ = nullptr;      // (max_T, C) where the encoder's backward puts its gradient
  float* rstd1_ = nullptr;           // (L,B,T)
  float* lse_ = nullptr;             // (L,B,NH,T) with tiled attention
  float* rstd2_ = nullptr;           // (L,B,T)
  float* rstdf_ = nullptr;           // (B,T)
  // Backward scratch in the activation type.
  void* datty_ = nullptr;    // (B,T,NH hd)
  void* dqkv_ = nullptr;     // (B,T,QKV)
  void* dgateup_ = nullptr;  // (B,T,2I)
  void* dswiglu_ = nullptr;  // (B,T,I)
};

}  // namespace hoist::runtime
