// Hugging Face config.json and hoist's ModelConfig, both ways, for the families hoist computes:
// the family is found by model_type and its own file reads and writes the keys
// (ModelFamilySpec::from_hf and to_hf; GPT-2's in runtime/gpt2_params.cc, the rotary families'
// common keys in runtime/decoder_family.cc). The readers below are theirs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "runtime/config.h"

namespace hoist::runtime {

// Readers of a config.json's keys for the families' from_hf: each miss is InvalidArgument naming
// `path` and the key, and says which it is (absent, of another type, out of range).
namespace hf {
// A positive integer dimension `key`, at most its bound (runtime/model_limits.h).
Status Dimension(const nlohmann::json& config, const std::string& path, const char* key,
                 int* value);
// A number, a string, a true/false `key` (absent or null: `fallback`).
StatusOr<double> Number(const nlohmann::json& config, const std::string& path, const char* key,
                        double fallback);
StatusOr<std::string> Text(const nlohmann::json& config, const std::string& path, const char* key,
                           const std::string& fallback);
StatusOr<bool> Flag(const nlohmann::json& config, const std::string& path, const char* key,
                    bool fallback);
// layer_types, one "sliding_attention" or "full_attention" per layer, as whether each slides;
// empty where config.json has none.
StatusOr<std::vector<bool>> LayerTypes(const nlohmann::json& config, const std::string& path,
                                       int n_layer);
// The double with the shortest decimal form that rounds to `value` (1e-05 for the float 1e-5f),
// so that a float read from a config.json is written back as it was.
double ShortestDouble(float value);
}  // namespace hf

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
