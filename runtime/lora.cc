#include "runtime/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/file_system.h"
#include "core/random.h"
#include "runtime/json_reader.h"
#include "runtime/model.h"
#include "runtime/model_family.h"
#include "runtime/safetensors.h"

namespace hoist::runtime {

double LoraConfig::scaling() const {
  if (r <= 0) return 0.0;
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / r;
}

std::vector<LoraModule> LoraCandidates(const ModelConfig& model) {
  return FamilyOf(model.family).lora_candidates(model);
}

namespace {

// The path transformers gives block `layer`'s modules.
std::string BlockPath(ModelFamily family, int layer) {
  return FamilyOf(family).block_path + std::to_string(layer) + ".";
}

// PEFT's match of a target name against a module's full path: equal, or its end after a dot.
bool PeftMatches(const std::string& target, const std::string& path) {
  if (target == path) return true;
  return path.size() > target.size() &&
         path.compare(path.size() - target.size(), target.size(), target) == 0 &&
         path[path.size() - target.size() - 1] == '.';
}

}  // namespace

StatusOr<LoraLayout> LoraLayout::For(const ModelConfig& model) {
  const LoraConfig& lora = model.lora;
  if (!lora.enabled()) return InvalidArgumentError("lora.r must be positive for adapters");
  if (lora.target_modules.empty()) {
    return InvalidArgumentError("lora.target_modules is empty: name the layers to adapt");
  }
  const std::vector<LoraModule> candidates = LoraCandidates(model);
  std::string known;
  for (const LoraModule& m : candidates) known += std::string(known.empty() ? "" : ", ") + m.name;
  LoraLayout layout;
  layout.n_layer = model.n_layer;
  layout.r = lora.r;
  layout.scaling = static_cast<float>(lora.scaling());
  layout.dropout = lora.dropout;
  layout.base_units = static_cast<int>(ModelUnits(model).size());
  const bool all_linear = lora.target_modules.size() == 1 && lora.target_modules[0] == "all-linear";
  std::set<std::string> matched_something;
  for (const LoraModule& m : candidates) {
    int blocks = 0;
    for (int l = 0; l < model.n_layer; ++l) {
      const std::string path = BlockPath(model.family, l) + m.name;
      bool hit = all_linear;
      for (const std::string& target : lora.target_modules) {
        if (PeftMatches(target, path)) {
          hit = true;
          matched_something.insert(target);
        }
      }
      blocks += hit ? 1 : 0;
    }
    if (blocks == 0) continue;
    if (blocks != model.n_layer) {
      return InvalidArgumentError("lora.target_modules adapts " + std::string(m.name) + " in " +
                                  std::to_string(blocks) + " of " + std::to_string(model.n_layer) +
                                  " blocks; hoist adapts the same layers in every block (name "
                                  "the layer without its block: \"" +
                                  m.name + "\")");
    }
    layout.modules.push_back(m);
  }
  for (const std::string& target : lora.target_modules) {
    if (all_linear || matched_something.count(target) > 0) continue;
    for (const std::string& outside : FamilyOf(model.family).outside_layers) {
      if (PeftMatches(target, outside)) {
        return InvalidArgumentError("lora.target_modules: \"" + target + "\" is " + outside +
                                    ", outside the transformer blocks; hoist adapts the blocks' "
                                    "linear layers (" +
                                    known + ")");
      }
    }
    if (target == "all-linear") {
      return InvalidArgumentError(
          "lora.target_modules: \"all-linear\" must be the only name in the list");
    }
    return InvalidArgumentError("lora.target_modules: \"" + target + "\" matches no layer of a " +
                                ModelDisplayName(model.family) + " block; its layers are " + known);
  }
  int64_t offset = 0;
  for (const LoraModule& m : layout.modules) {
    layout.a_offset.push_back(offset);
    offset += int64_t{lora.r} * m.in;
    layout.b_offset.push_back(offset);
    offset += m.out * lora.r;
  }
  layout.unit_size = offset;
  return layout;
}

int LoraLayout::Find(LoraModule::Site site) const {
  for (size_t i = 0; i < modules.size(); ++i) {
    if (modules[i].site == site) return static_cast<int>(i);
  }
  return -1;
}

std::vector<zero::UnitSpec> LoraLayout::Units() const {
  std::vector<zero::UnitSpec> units;
  for (int l = 0; l < n_layer; ++l) {
    std::string name = "lora.h.";
    name += std::to_string(l);
    units.push_back({name, unit_size, {{0, unit_size, true}}});
  }
  return units;
}

std::string LoraLayout::PeftName(ModelFamily family, int layer, int module, bool b) const {
  return "base_model.model." + BlockPath(family, layer) +
         modules[static_cast<size_t>(module)].name + (b ? ".lora_B.weight" : ".lora_A.weight");
}

std::string LoraLayout::BaseName(ModelFamily family, int layer, const LoraModule& module) {
  return BlockPath(family, layer) + module.name + ".weight";
}

void InitializeLoraUnit(const LoraLayout& layout, int layer, uint64_t seed, float* out) {
  std::memset(out, 0, static_cast<size_t>(layout.unit_size) * sizeof(float));
  for (size_t m = 0; m < layout.modules.size(); ++m) {
    const LoraModule& module = layout.modules[m];
    // One stream per (block, layer site), apart from the base model's streams.
    const uint64_t slice = (uint64_t{0x4C6F5241} << 20) + static_cast<uint64_t>(layer) * 64u +
                           static_cast<uint64_t>(module.site);
    Rng rng(seed ^ (slice * 0x9E3779B97F4A7C15ull));
    const double bound = 1.0 / std::sqrt(static_cast<double>(module.in));
    float* a = out + layout.a_offset[m];
    for (int64_t i = 0; i < int64_t{layout.r} * module.in; ++i) {
      a[i] = static_cast<float>((2.0 * rng.Uniform() - 1.0) * bound);
    }
  }
}

std::vector<zero::UnitSpec> TrainedUnits(const ModelConfig& model) {
  if (!model.lora.enabled()) return ModelUnits(model);
  StatusOr<LoraLayout> layout = LoraLayout::For(model);
  HOIST_CHECK(layout.ok()) << layout.status().ToString();
  return layout->Units();
}

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
