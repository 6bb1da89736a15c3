#include "runtime/interchange/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/file_system.h"
#include "core/json_reader.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/model.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime {

StatusOr<LoraConfig> ReadPeftAdapterConfig(const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  HOIST_ASSIGN_OR_RETURN(const nlohmann::json json, ReadJsonFile(FileSystem::Posix(), path));
  if (!json.is_object()) {
    return InvalidArgumentError(path + " is not a JSON object: is it a PEFT adapter config?");
  }
  auto bad = [&](const std::string& key, const std::string& why) {
    return InvalidArgumentError(path + ": " + key + " " + why);
  };
  const std::string type = json.value("peft_type", std::string());
  if (type != "LORA") {
    return bad("peft_type", "is \"" + type + "\"; hoist reads LoRA adapters (\"LORA\")");
  }
  LoraConfig lora;
  try {
    const nlohmann::json& r = json.at("r");
    if (!r.is_number_integer() || r.get<int64_t>() < 1 || r.get<int64_t>() > 65536) {
      return bad("r", "is " + r.dump() + "; it must be an integer in [1, 65536]");
    }
    lora.r = r.get<int>();
    lora.alpha = json.value("lora_alpha", 8.0);
    if (!(lora.alpha > 0) || !(lora.alpha <= kMaxLoraAlpha)) {
      return bad("lora_alpha", "is " + nlohmann::json(lora.alpha).dump() + "; it must be in (0, " +
                                   nlohmann::json(kMaxLoraAlpha).dump() + "]");
    }
    lora.dropout = json.value("lora_dropout", 0.0f);
    if (!(lora.dropout >= 0.0f && lora.dropout < 1.0f)) {
      return bad("lora_dropout", "is " + std::to_string(lora.dropout) + "; it must be in [0, 1)");
    }
    lora.use_rslora = json.value("use_rslora", false);
    const nlohmann::json& targets = json.at("target_modules");
    if (targets.is_string()) {
      const std::string name = targets.get<std::string>();
      if (name != "all-linear") {
        return bad("target_modules", "is the regular expression \"" + name +
                                         "\"; hoist takes a list of module names");
      }
      lora.target_modules = {name};
    } else {
      for (const auto& t : targets) lora.target_modules.push_back(t.get<std::string>());
    }
    const std::string bias = json.value("bias", std::string("none"));
    if (bias != "none")
      return bad("bias", "is \"" + bias + "\"; hoist trains no biases (\"none\")");
    for (const char* key : {"modules_to_save", "layers_to_transform"}) {
      if (json.contains(key) && !json[key].is_null() && !json[key].empty()) {
        return bad(key, "is set; hoist adapts the same layers in every block and saves no others");
      }
    }
    for (const char* key : {"rank_pattern", "alpha_pattern"}) {
      if (json.contains(key) && !json[key].is_null() && !json[key].empty()) {
        return bad(key, "is set; hoist gives every adapter the same r and alpha");
      }
    }
    if (json.value("use_dora", false)) return bad("use_dora", "is true; hoist reads plain LoRA");
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
  lora.init_from = dir;
  return lora;
}

Status ReadPeftAdapters(const std::string& dir, ModelFamily family, const LoraLayout& layout,
                        std::vector<float>* out) {
  const std::string path = dir + "/adapter_model.safetensors";
  HOIST_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  out->assign(static_cast<size_t>(layout.n_layer * layout.unit_size), 0.0f);
  std::set<std::string> used;
  for (int l = 0; l < layout.n_layer; ++l) {
    for (size_t m = 0; m < layout.modules.size(); ++m) {
      for (bool b : {false, true}) {
        const std::string name = layout.PeftName(family, l, static_cast<int>(m), b);
        const SafetensorsTensor* tensor = file.Find(name);
        if (tensor == nullptr) {
          return InvalidArgumentError(path + " has no tensor " + name +
                                      ": is the adapter for this model and lora.target_modules?");
        }
        const LoraModule& module = layout.modules[m];
        const std::vector<int64_t> shape = b ? std::vector<int64_t>{module.out, layout.r}
                                             : std::vector<int64_t>{layout.r, module.in};
        if (tensor->shape != shape) {
          return InvalidArgumentError(
              path + ": " + name + " has shape " + nlohmann::json(tensor->shape).dump() + ", not " +
              nlohmann::json(shape).dump() + " (r and the model's dimensions)");
        }
        float* dst =
            out->data() + l * layout.unit_size + (b ? layout.b_offset[m] : layout.a_offset[m]);
        HOIST_RETURN_IF_ERROR(file.ReadFloat(*tensor, 0, tensor->elements(), dst));
        // A NaN or an infinity would spread through every step; the file is damaged.
        const float* bad =
            std::find_if(dst, dst + tensor->elements(), [](float x) { return !std::isfinite(x); });
        if (bad != dst + tensor->elements()) {
          return InvalidArgumentError(path + ": " + name + " element " + std::to_string(bad - dst) +
                                      " is " + std::to_string(*bad) +
                                      "; adapters must be finite (the file is damaged, or the "
                                      "run that wrote it diverged)");
        }
        used.insert(name);
      }
    }
  }
  for (const SafetensorsTensor& tensor : file.tensors()) {
    if (used.count(tensor.name) == 0) {
      return InvalidArgumentError(path + " has the tensor " + tensor.name +
                                  ", which lora.target_modules does not adapt in this model");
    }
  }
  return Status::Ok();
}

}  // namespace hoist::runtime
