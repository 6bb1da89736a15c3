#include "runtime/interchange/lora_merge.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/model/model.h"

namespace hoist::runtime {

namespace {

// Where each targeted layer's weight lies in the base's units: (unit, offset) by (layer,
// module), found by the transformers name the adapter's layer has (for Llama's q_proj, the
// offset of its rows within the fused q/k/v weight).
struct MergeTarget {
  int layer;
  int module;
  int64_t offset;
};

std::map<int, std::vector<MergeTarget>> TargetsByUnit(const ModelConfig& base,
                                                      const LoraLayout& layout) {
  std::map<std::string, const HfTensorPlace*> by_name;
  const std::vector<HfTensorPlace> places = HfTensorPlaces(base);
  for (const HfTensorPlace& place : places) by_name[place.name] = &place;
  std::map<int, std::vector<MergeTarget>> targets;
  for (int l = 0; l < layout.n_layer; ++l) {
    for (size_t m = 0; m < layout.modules.size(); ++m) {
      const LoraModule& module = layout.modules[m];
      const std::string name = LoraLayout::BaseName(base.family, l, module);
      const auto it = by_name.find(name);
      HOIST_CHECK(it != by_name.end()) << "no base tensor " << name << " for its adapter";
      const HfTensorPlace& place = *it->second;
      // transformers' shape: (out, in), or (in, out) for GPT-2's Conv1D; hoist keeps (out, in).
      const std::vector<int64_t> want = place.transposed
                                            ? std::vector<int64_t>{module.in, module.out}
                                            : std::vector<int64_t>{module.out, module.in};
      HOIST_CHECK(place.shape == want) << name << " is not the shape its adapter adds to";
      targets[place.unit].push_back({l, static_cast<int>(m), place.offset});
    }
  }
  return targets;
}

// W (out, in) += scaling * B (out, r) A (r, in).
void AddLowRank(const LoraModule& module, int r, double scaling, const float* a, const float* b,
                float* w) {
  std::vector<double> row(static_cast<size_t>(module.in));
  for (int64_t i = 0; i < module.out; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int k = 0; k < r; ++k) {
      const double bik = b[i * r + k];
      const float* ak = a + int64_t{k} * module.in;
      for (int64_t j = 0; j < module.in; ++j) row[static_cast<size_t>(j)] += bik * ak[j];
    }
    float* wi = w + i * module.in;
    for (int64_t j = 0; j < module.in; ++j) {
      wi[j] = static_cast<float>(wi[j] + scaling * row[static_cast<size_t>(j)]);
    }
  }
}

// "n_embd 16 in the base, 32 in the checkpoint", or "" when the shapes agree.
std::string ShapeDifference(const ModelConfig& base, const ModelConfig& adapted) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> dims[] = {
      {"model_type", {static_cast<int>(base.family), static_cast<int>(adapted.family)}},
      {"n_layer", {base.n_layer, adapted.n_layer}},
      {"n_head", {base.n_head, adapted.n_head}},
      {"n_kv_head", {base.kv_heads(), adapted.kv_heads()}},
      {"n_embd", {base.n_embd, adapted.n_embd}},
      {"vocab_size", {base.vocab_size, adapted.vocab_size}},
      {"n_positions", {base.positions(), adapted.positions()}},
      {"intermediate_size", {base.intermediate_size, adapted.intermediate_size}},
      {"head_dim", {base.head_dim(), adapted.head_dim()}},
      {"sliding_window", {base.sliding_window, adapted.sliding_window}},
      // GPT-2 ties its head whatever the field says.
      {"tie_word_embeddings",
       {adapted.family != ModelFamily::kGpt2 && base.tie_word_embeddings,
        adapted.family != ModelFamily::kGpt2 && adapted.tie_word_embeddings}}};
  for (const auto& [key, values] : dims) {
    if (key == std::string("model_type") && values.first != values.second) {
      return std::string("it is a ") + ModelDisplayName(base.family) + ", the checkpoint's a " +
             ModelDisplayName(adapted.family);
    }
    if (values.first != values.second) {
      return std::string(key) + " is " + std::to_string(values.first) + " in the base but " +
             std::to_string(values.second) + " in the checkpoint";
    }
  }
  const std::vector<zero::UnitSpec> a = ModelUnits(base), b = ModelUnits(adapted);
  if (a.size() != b.size()) return "its units differ";
  for (size_t u = 0; u < a.size(); ++u) {
    if (a[u].size != b[u].size) return "its unit " + a[u].name + " differs in size";
  }
  return "";
}

}  // namespace

Status ReadMergedLoraWeights(const ModelConfig& model, const float* adapters, float* out,
                             nlohmann::json* base_config,
                             const std::function<Status(const WeightSource&)>& check_base) {
  HOIST_ASSIGN_OR_RETURN(const LoraLayout layout, LoraLayout::For(model));
  ModelConfig base = model;
  base.lora = LoraConfig();
  const std::string& path = model.init_from;
  const std::string needs =
      "; the merged weights need the base the adapters were trained on: put it back at that "
      "path, or export the adapters alone with --format peft";
  if (path.empty()) {
    return FailedPreconditionError("the LoRA checkpoint names no base (model.init_from)" + needs);
  }
  StatusOr<std::unique_ptr<WeightSource>> source = OpenWeightSource(path);
  if (!source.ok()) {
    return FailedPreconditionError(
        "the LoRA checkpoint's base " + path +
        " (model.init_from) cannot be read: " + source.status().message() + needs);
  }
  if (const std::string differs = ShapeDifference((*source)->model(), base); !differs.empty()) {
    return FailedPreconditionError("the LoRA checkpoint's base " + path +
                                   " (model.init_from) is not the model its adapters were "
                                   "trained on: " +
                                   differs + needs);
  }
  if (check_base) {
    if (Status same = check_base(**source); !same.ok()) {
      return Status(same.code(), same.message() + needs);
    }
  }
  const std::map<int, std::vector<MergeTarget>> targets = TargetsByUnit(base, layout);
  const std::vector<zero::UnitSpec> units = ModelUnits(base);
  int64_t at = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const int unit = static_cast<int>(u);
    if (Status read = (*source)->FillUnit(unit, out + at); !read.ok()) {
      return FailedPreconditionError("the LoRA checkpoint's base " + path +
                                     " (model.init_from): " + read.message() + needs);
    }
    // The unit is merged as soon as it is read: W += scaling * B A on each targeted weight.
    if (const auto it = targets.find(unit); it != targets.end()) {
      for (const MergeTarget& target : it->second) {
        const float* block = adapters + target.layer * layout.unit_size;
        const size_t m = static_cast<size_t>(target.module);
        AddLowRank(layout.modules[m], layout.r, layout.scaling, block + layout.a_offset[m],
                   block + layout.b_offset[m], out + at + target.offset);
      }
    }
    at += units[u].size;
  }
  if (base_config != nullptr) *base_config = (*source)->hf_config();
  return Status::Ok();
}

}  // namespace hoist::runtime
