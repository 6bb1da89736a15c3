// What a family declares of its Hugging Face form, below the readers and writers of the files
// (runtime/interchange/): the readers of a config.json's keys its from_hf uses, and where each
// tensor of its checkpoint lives in hoist's units.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace hoist::runtime {

// Where one tensor of a Hugging Face checkpoint lives in hoist's units.
struct HfTensorPlace {
  std::string name;            // "transformer.h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // as stored (transformers' shape)
  int unit = 0;
  int64_t offset = 0;       // its first element within the unit
  bool transposed = false;  // stored (in, out) (GPT-2's Conv1D); hoist keeps (out, in)
};

// Readers of a config.json's keys for the families' from_hf: each miss is InvalidArgument naming
// `path` and the key, and says which it is (absent, of another type, out of range).
namespace hf {
// A positive integer dimension `key`, at most its bound (runtime/model/model_limits.h).
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

}  // namespace hoist::runtime
