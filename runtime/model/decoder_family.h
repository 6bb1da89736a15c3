// What the rotary families' files (runtime/model/llama.cc, qwen2.cc, qwen3.cc, mistral.cc,
// gemma2.cc) share outside the model (runtime/model/decoder.h): the family spec built from a
// family's traits, and the config.json keys every rotary family has, read and written once.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/model/decoder.h"
#include "runtime/model/model_config.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime {

// What a family's config.json holds where it differs from Llama's.
struct DecoderHfKeys {
  ModelFamily family = ModelFamily::kLlama;
  // The MLP's activation as config.json names it, and the values hoist computes for it (the
  // first is what a fresh export writes).
  const char* activation_key = "hidden_act";
  std::vector<std::string> activations = {"silu"};
  // transformers' defaults where config.json leaves the key out: head_dim (0: hidden_size /
  // num_attention_heads), tie_word_embeddings, rms_norm_eps.
  int head_dim = 0;
  bool tied = false;
  double rms_norm_eps = 1e-6;
};

// The keys every rotary family has: num_hidden_layers, num_attention_heads, hidden_size,
// intermediate_size, vocab_size, max_position_embeddings, num_key_value_heads, head_dim (even),
// the activation, rms_norm_eps, tie_word_embeddings, the rotary frequencies (rope_theta and
// rope_scaling, or transformers 5's rope_parameters: default or llama3), sliding_window (null:
// none) and layer_types (absent: sliding_layers stays empty, every layer slides where a window
// is set). The family's reader checks its own keys after. InvalidArgument naming `path` and the
// key for a value hoist does not compute.
StatusOr<ModelConfig> DecoderFromHf(const nlohmann::json& config, const std::string& path,
                                    const DecoderHfKeys& keys);
// InvalidArgument naming `key` unless config.json leaves it out, sets it null or to `allowed`:
// a variant of the family hoist does not compute (`what` says what it computes).
Status OnlyAllowed(const nlohmann::json& config, const std::string& path, const char* key,
                   const nlohmann::json& allowed, const std::string& what);

// transformers' Qwen2 and Qwen3 turn the window on with use_sliding_window (default false), for
// the layers from max_window_layers (default 28) on where config.json has no layer_types; off,
// no layer slides.
Status ReadWindowSwitch(const nlohmann::json& config, const std::string& path, ModelConfig* m);

// config[key] = value, unless config holds an equal number there already (256 and 256.0 alike),
// so that a value read and written back keeps its spelling.
void SetNumber(nlohmann::json& config, const char* key, const nlohmann::json& value);

// `base` (or `defaults` where `base` is empty) with the common keys set from `model`; a key
// `base` leaves out is added only where the model needs it (head_dim other than hidden_size /
// num_attention_heads, a window, per-layer types), so that a config.json read and written back
// is the same.
nlohmann::json DecoderHfConfig(const ModelConfig& model, const nlohmann::json& base,
                               const nlohmann::json& defaults, const DecoderHfKeys& keys);

// A rotary family's spec: DecoderModel with `traits`, its units, LoRA candidates (transformers'
// q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; PEFT's default targets q_proj
// and v_proj), parameter bound and matmul weights, its Hugging Face tensors, and the family's
// config.json reader and writer.
ModelFamilySpec DecoderFamilySpec(
    ModelFamily family, const DecoderTraits* traits, std::vector<std::string> architectures,
    StatusOr<ModelConfig> (*from_hf)(const nlohmann::json&, const std::string&),
    nlohmann::json (*to_hf)(const ModelConfig&, const nlohmann::json&));

}  // namespace hoist::runtime
