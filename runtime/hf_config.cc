#include "runtime/hf_config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "core/check.h"
#include "core/file_system.h"
#include "runtime/json_reader.h"
#include "runtime/model.h"
#include "runtime/model_family.h"
#include "runtime/model_limits.h"

namespace hoist::runtime {
namespace hf {

// A positive integer dimension `key` of `config`, at most its bound (runtime/model_limits.h),
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

StatusOr<ModelConfig> ModelConfigFromHf(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) return InvalidArgumentError(path + " is not a JSON object");
  HOIST_ASSIGN_OR_RETURN(const std::string type, hf::Text(config, path, "model_type", ""));
  ModelFamily family;
  if (!ModelFamilyNamed(type, &family)) {
    std::string known;
    for (ModelFamily f : kModelFamilies) {
      known += std::string(known.empty() ? "" : ", ") + "\"" + ModelFamilyName(f) + "\"";
    }
    const std::string architectures =
        config.contains("architectures") ? config["architectures"].dump() : "not given";
    return InvalidArgumentError(path + ": model_type is \"" + type + "\" (architectures " +
                                architectures + "); hoist computes " + known);
  }
  const ModelFamilySpec& spec = FamilyOf(family);
  if (config.contains("architectures") && !config["architectures"].is_null()) {
    const nlohmann::json& names = config["architectures"];
    bool known = names.is_array() && !names.empty();
    for (const nlohmann::json& name : names.is_array() ? names : nlohmann::json::array()) {
      bool ours = false;
      for (const std::string& a : spec.architectures) ours = ours || name == a;
      known = known && ours;
    }
    if (!known) {
      return InvalidArgumentError(path + ": architectures is " + names.dump() + "; hoist trains " +
                                  spec.architectures.front() + " for model_type \"" +
                                  ModelFamilyName(family) + "\" (a causal language model)");
    }
  }
  HOIST_ASSIGN_OR_RETURN(ModelConfig model, spec.from_hf(config, path));
  if (Status size = CheckModelSize(model); !size.ok()) {
    return InvalidArgumentError(path + ": " + size.message());
  }
  return model;
}

StatusOr<HfModelConfig> ReadHfConfig(const std::string& path) {
  StatusOr<nlohmann::json> json = ReadJsonFile(FileSystem::Posix(), path);
  if (!json.ok()) {
    return Status(json.status().code(),
                  "config.json " + path + " could not be read (" + json.status().message() + ")");
  }
  HfModelConfig read;
  read.json = std::move(json).value();
  if (!read.json.is_object()) {
    return InvalidArgumentError(path + " is not a JSON object");
  }
  HOIST_ASSIGN_OR_RETURN(read.model, ModelConfigFromHf(read.json, path));
  return read;
}

std::string HfConfigText(const ModelConfig& model, DType dtype, const nlohmann::json& base) {
  nlohmann::json config = FamilyOf(model.family).to_hf(model, base);
  // transformers 5 writes "dtype"; 4 wrote "torch_dtype", which a config.json saved by it keeps
  // (with the type of this export, so that torch_dtype="auto" loads what the files hold).
  const char* dtype_key =
      config.contains("torch_dtype") && !config.contains("dtype") ? "torch_dtype" : "dtype";
  config[dtype_key] = dtype == DType::kFloat32    ? "float32"
                      : dtype == DType::kBFloat16 ? "bfloat16"
                                                  : "float16";
  return config.dump(2) + "\n";
}

}  // namespace hoist::runtime
