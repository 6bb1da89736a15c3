// Hugging Face config.json and hoist's ModelConfig, both ways, for the families hoist computes:
// the family is found by model_type and its own file reads and writes the keys
// (ModelFamilySpec::from_hf and to_hf; GPT-2's in runtime/model/gpt2_params.cc, the rotary
// families' common keys in runtime/model/decoder_family.cc). The readers below are theirs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "runtime/model/hf_keys.h"
#include "runtime/model/model_config.h"

namespace hoist::runtime {

// The model `config` (a parsed config.json) describes; seq_len is its positions. A model_type
// hoist does not compute, architectures other than the family's causal LM, or a setting the
// family does not compute (GPT-2: an activation other than the tanh GELU, layernorm eps other
// than 1e-5, untied embeddings, n_inner other than 4 n_embd, the scaled-attention variants; the
// rotary families: another activation, biases the family lacks, rope scaling other than llama3)
// is InvalidArgument naming `path` and the key.
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
