// Hugging Face config.json and hoist's ModelConfig, both ways, for the families hoist computes:
// GPT-2 (model_type "gpt2": n_layer, n_head, n_embd, vocab_size, n_positions) and Llama
// (model_type "llama": hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, max_position_embeddings, rms_norm_eps, rope_theta and rope_scaling, or
// transformers 5's rope_parameters, vocab_size, tie_word_embeddings).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "runtime/config.h"

namespace hoist::runtime {

// The model `config` (a parsed config.json) describes; seq_len is its positions. Another
// model_type, or a setting hoist does not compute (GPT-2: an activation other than the tanh
// GELU, layernorm eps other than 1e-5, untied embeddings, n_inner other than 4 n_embd, the
// scaled-attention variants; Llama: hidden_act other than silu, attention or MLP biases, a
// head_dim other than hidden_size / num_attention_heads, rope scaling other than llama3) is
// InvalidArgument naming `path` and the key.
StatusOr<ModelConfig> ModelConfigFromHf(const nlohmann::json& config, const std::string& path);

// Reads and parses the config.json at `path` (ModelConfigFromHf), returning the JSON too.
struct HfModelConfig {
  ModelConfig model;
  nlohmann::json json;
};
StatusOr<HfModelConfig> ReadHfConfig(const std::string& path);

// config.json as transformers writes it for `model`: `base` (the config.json the weights came
// with, so that the keys hoist does not model survive) with the dimensions set from `model`, or
// transformers' defaults for the family when `base` is not an object or empty. `dtype` is what the
// safetensors hold. Keys sorted, two-space indent, a final newline, as transformers writes it.
std::string HfConfigText(const ModelConfig& model, DType dtype, const nlohmann::json& base);

}  // namespace hoist::runtime
