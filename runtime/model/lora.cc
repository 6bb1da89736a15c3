#include "runtime/model/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/file_system.h"
#include "core/random.h"
#include "runtime/model/model.h"
#include "runtime/model/model_family.h"

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

}  // namespace hoist::runtime
