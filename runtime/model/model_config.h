// What a model is: its family, dimensions, attention, LoRA adapters and activation checkpointing
// policy, as plain values. The job config's `model`, `lora` and `activation_checkpointing` sections
// are read into these (runtime/config/config.h); the model library and everything above it take
// them, and nothing here reads a file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hoist::runtime {

// A GPT-2 style decoder: `model` section.
// How attention is computed: `direct` keeps each layer's (B, n_head, T, T) probabilities for
// backward; `tiled` keeps only a log-sum-exp per query row and recomputes the probabilities tile by
// tile in backward, so its activation memory grows linearly in T (kernels/cpu/flash_attention.h).
enum class AttentionKind { kDirect, kTiled };

// `model.model_type`: the architecture (Hugging Face's model_type).
enum class ModelFamily {
  kGpt2,     // "gpt2": pre-LN blocks, learned positions, tanh GELU, biases, LM head tied to wte
  kLlama,    // "llama": RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases
  kQwen2,    // "qwen2": Llama's block with biases on q, k and v
  kQwen3,    // "qwen3": Llama's block with an RMSNorm on each query and key head
  kMistral,  // "mistral": Llama's block with sliding-window attention
  kGemma2,   // "gemma2": GeGLU, (1 + w) RMSNorms around both halves, soft-capped logits
};
inline constexpr ModelFamily kModelFamilies[] = {ModelFamily::kGpt2,    ModelFamily::kLlama,
                                                 ModelFamily::kQwen2,   ModelFamily::kQwen3,
                                                 ModelFamily::kMistral, ModelFamily::kGemma2};
// "gpt2", "llama", ...: Hugging Face's model_type.
const char* ModelFamilyName(ModelFamily family);
// "GPT-2", "Llama", ...: the family as people write it, for messages.
const char* ModelDisplayName(ModelFamily family);
// The family whose ModelFamilyName is `name` (matched case-insensitively), if any.
bool ModelFamilyNamed(std::string_view name, ModelFamily* family);

// Llama 3's rope_scaling (rope_type "llama3"); off for Llama 1/2.
struct RopeScalingConfig {
  bool llama3 = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// `lora`: low-rank adapters on a frozen base, as Hugging Face PEFT defines them
// (runtime/lora.h): beside each targeted linear layer y = x W^T, a trained pair A (r, in) and
// B (out, r) adds scaling * dropout(x) A^T B^T. Off while r is 0.
struct LoraConfig {
  int r = 0;
  double alpha = 8.0;  // PEFT's lora_alpha
  float dropout = 0.0f;
  // PEFT's target_modules: module names matched as PEFT matches them (a name equal to a layer's
  // path or the end of it after a dot: "c_attn", "attn.c_proj", "q_proj"), or "all-linear".
  std::vector<std::string> target_modules;
  bool use_rslora = false;  // scaling alpha / sqrt(r) instead of alpha / r
  // `base_quantization`: "nf4" holds the frozen base's block matmul weights in 4 bits (QLoRA's
  // NormalFloat4, zero/quantized_store.h), which the matmuls dequantize a panel at a time as
  // they multiply; "none": the compute type.
  bool nf4_base = false;
  // `double_quant` (or bitsandbytes' `bnb_4bit_use_double_quant`), with nf4: the 4-bit base's
  // absmaxes in 8 bits too (QLoRA's double quantization), about 0.516 bytes per weight instead
  // of 0.5625.
  bool nf4_double_quant = false;
  // A PEFT adapter directory (adapter_config.json and adapter_model.safetensors) whose adapters
  // a fresh run starts from; its settings fill the keys the job leaves out.
  std::string init_from;

  bool enabled() const { return r > 0; }
  double scaling() const;
};

// The model's dimensions, in hoist's names; a Hugging Face config.json's names map onto them
// (hidden_size: n_embd, num_hidden_layers: n_layer, num_attention_heads: n_head,
// num_key_value_heads: n_kv_head, max_position_embeddings / n_positions: n_positions).
struct ModelConfig {
  ModelFamily family = ModelFamily::kGpt2;
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;        // divisible by n_head
  int vocab_size = 50257;  // above 65536 the token shards hold uint32 tokens
  int seq_len = 1024;      // the training context: T of every micro-batch
  // Rows of the position embedding (transformers' n_positions): the longest context the model
  // knows. 0: seq_len. Set by a checkpoint imported with model.init_from.
  int n_positions = 0;
  // `model.init_from`: a Hugging Face checkpoint directory or an llm.c checkpoint file whose
  // weights a fresh run starts from (runtime/gpt2_weights.h); the model's dimensions come from it.
  std::string init_from;
  // `model.config`: a Hugging Face config.json whose model the job trains (from fresh weights
  // unless init_from is set too); the dimensions come from it.
  std::string hf_config;
  // `model.attention`: "direct" or "tiled" (matched case-insensitively).
  AttentionKind attention = AttentionKind::kDirect;

  // The rotary families' (Llama and the families after it; GPT-2's are fixed: n_kv_head =
  // n_head, a 4 n_embd GELU MLP, layernorm eps 1e-5, learned positions, a tied head).
  int n_kv_head = 0;          // key/value heads (grouped-query attention); 0: n_head
  int intermediate_size = 0;  // the gated MLP's hidden width
  double rope_theta = 10000.0;
  RopeScalingConfig rope_scaling;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;  // an untied lm_head unless the checkpoint ties it
  // config.json's head_dim where it is not n_embd / n_head (Qwen3, Gemma 2, Mistral NeMo); 0:
  // n_embd / n_head.
  int head_size = 0;
  // Sliding-window attention (Mistral, Gemma 2's local layers): a query attends the
  // sliding_window latest positions, itself included. 0: every earlier position. The layers it
  // applies to: sliding_layers[l], or every layer where sliding_layers is empty.
  int sliding_window = 0;
  std::vector<bool> sliding_layers;
  // Gemma 2: scores scaled by query_pre_attn_scalar^-1/2 (0: head_dim, the usual 1/sqrt(hd)),
  // attention scores and final logits soft-capped as cap * tanh(x / cap) (0: not capped).
  double query_pre_attn_scalar = 0;
  float attn_logit_softcapping = 0.0f;
  float final_logit_softcapping = 0.0f;

  // The `lora` section: with adapters the base weights are frozen and only the adapters train.
  LoraConfig lora;

  // vocab_size rounded up to a multiple of 128 (the embedding's padded row count).
  int padded_vocab_size() const;
  // Rows of the position embedding.
  int positions() const { return n_positions > 0 ? n_positions : seq_len; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return head_size > 0 ? head_size : n_embd / n_head; }
  // The attention window of block `layer` (0: none).
  int window(int layer) const {
    const bool sliding = sliding_layers.empty() || sliding_layers[static_cast<size_t>(layer)];
    return sliding ? sliding_window : 0;
  }
};

// Which transformer blocks keep their activations for backward and which recompute them
// (`activation_checkpointing.policy`):
//   none       every block keeps everything backward reads;
//   full       every block keeps only its input (the residual stream) and recomputes its forward
//              in backward;
//   every_k    one block in `every_k` (blocks 0, k, 2k, ...) does as in full, the others keep
//              everything;
//   selective  every block keeps its matmul outputs and recomputes the cheap, memory-heavy rest:
//              the layernorms, the attention scores and softmax, and the GELU.
enum class CheckpointPolicy { kNone, kFull, kEveryK, kSelective };

// "none", "full", "every_k", "selective".
const char* CheckpointPolicyName(CheckpointPolicy policy);

// `activation_checkpointing`: DeepSpeed's keys plus hoist's `policy` and `every_k`. Without the
// section nothing is checkpointed; with it and no `policy` the policy is `full` (what a DeepSpeed
// user who checkpoints every layer gets). Recomputation is bit-exact: the gradients equal those
// of the run without checkpointing. partition_activations, contiguous_memory_optimization,
// number_checkpoints, synchronize_checkpoint_boundary and profile are read and checked; the ones
// that have no counterpart here are accepted with one notice each.
struct ActivationCheckpointingConfig {
  CheckpointPolicy policy = CheckpointPolicy::kNone;
  int every_k = 2;  // >= 1; used by every_k
  // Keep the checkpointed block inputs in pinned host memory instead of device memory.
  bool cpu_checkpointing = false;
  bool partition_activations = false;
  bool contiguous_memory_optimization = false;
  int64_t number_checkpoints = 0;  // 0: not set
  bool synchronize_checkpoint_boundary = false;
  // Log the seconds spent recomputing each step (`recompute_s` in the JSONL log).
  bool profile = false;

  bool enabled() const { return policy != CheckpointPolicy::kNone; }
  // Whether block `layer` of `n_layer` keeps only its input and recomputes the rest (full and
  // every_k); selective recomputes a part of every block and none nothing.
  bool Checkpointed(int layer) const;
};

}  // namespace hoist::runtime
