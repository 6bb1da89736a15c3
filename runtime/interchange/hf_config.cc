#include "runtime/interchange/hf_config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "core/check.h"
#include "core/file_system.h"
#include "core/json_reader.h"
#include "runtime/model/model.h"
#include "runtime/model/model_family.h"
#include "runtime/model/model_limits.h"

namespace hoist::runtime {
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
