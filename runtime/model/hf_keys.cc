#include "runtime/model/hf_keys.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/check.h"
#include "runtime/model/model_limits.h"

namespace hoist::runtime {
namespace hf {

// A positive integer dimension `key` of `config`, at most its bound (runtime/model/model_limits.h),
// into `value`. Each way to miss says which it is: absent, not an integer, or out of range.
Status Dimension(const nlohmann::json& config, const std::string& path, const char* key,
                 int* value) {
  const int64_t max = MaxModelDimension(key);
  HOIST_CHECK_GT(max, 0) << key << " has no bound";
  if (!config.contains(key) || config[key].is_null()) {
    return InvalidArgumentError(path + ": " + key +
                                " is missing; a config.json of this model_type sets it");
  }
  const nlohmann::json& number = config[key];
  if (!number.is_number_integer()) {
    return InvalidArgumentError(path + ": " + key + " is " + number.dump() + ", not an integer");
  }
  // A number beyond int64 arrives unsigned; compared as such it is simply too large.
  const bool too_large = number.is_number_unsigned() ? number.get<uint64_t>() > uint64_t(max)
                                                     : number.get<int64_t>() > max;
  if (too_large) {
    return InvalidArgumentError(path + ": " + key + " is " + number.dump() + ", more than " +
                                ModelBoundText(max) +
                                ", the most hoist accepts (far above any published model)");
  }
  if (number.get<int64_t>() <= 0) {
    return InvalidArgumentError(path + ": " + key + " is " + number.dump() +
                                "; it must be a positive integer");
  }
  *value = number.get<int>();
  return Status::Ok();
}

// The double with the shortest decimal form that rounds to `value` (1e-05 for the float 1e-5f),
// so that a float read from a config.json is written back as it was.
double ShortestDouble(float value) {
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), value);
  *end.ptr = '\0';
  return std::strtod(text, nullptr);
}

// A number `key` of `config` (absent: `fallback`).
StatusOr<double> Number(const nlohmann::json& config, const std::string& path, const char* key,
                        double fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_number()) {
    return InvalidArgumentError(path + ": " + key + " is " + config[key].dump() + ", not a number");
  }
  return config[key].get<double>();
}

// A string `key` of `config` (absent or null: `fallback`). nlohmann's value() would throw on
// another type; a config.json is the world's input, so that is an error naming the key.
StatusOr<std::string> Text(const nlohmann::json& config, const std::string& path, const char* key,
                           const std::string& fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_string()) {
    return InvalidArgumentError(path + ": " + key + " is " + config[key].dump() + ", not a string");
  }
  return config[key].get<std::string>();
}

// A true/false `key` of `config` (absent or null: `fallback`).
StatusOr<bool> Flag(const nlohmann::json& config, const std::string& path, const char* key,
                    bool fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_boolean()) {
    return InvalidArgumentError(path + ": " + key + " is " + config[key].dump() +
                                ", not true or false");
  }
  return config[key].get<bool>();
}

StatusOr<std::vector<bool>> LayerTypes(const nlohmann::json& config, const std::string& path,
                                       int n_layer) {
  if (!config.contains("layer_types") || config["layer_types"].is_null()) {
    return std::vector<bool>{};
  }
  const nlohmann::json& types = config["layer_types"];
  if (!types.is_array() || types.size() != static_cast<size_t>(n_layer)) {
    return InvalidArgumentError(path + ": layer_types must be a list of num_hidden_layers (" +
                                std::to_string(n_layer) + ") entries");
  }
  std::vector<bool> sliding;
  for (const nlohmann::json& type : types) {
    if (type == "sliding_attention") {
      sliding.push_back(true);
    } else if (type == "full_attention") {
      sliding.push_back(false);
    } else {
      return InvalidArgumentError(path + ": layer_types holds " + type.dump() +
                                  "; hoist computes \"full_attention\" and \"sliding_attention\"");
    }
  }
  return sliding;
}

}  // namespace hf

}  // namespace hoist::runtime
