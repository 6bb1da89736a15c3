// The `lora` section of the config (runtime/model/lora.h): PEFT's LoraConfig keys, under PEFT's
// names or shorter ones, and `init_from`, a PEFT adapter directory whose settings fill what the job
// leaves out (a key the job also sets must agree with it).
#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "runtime/config/config_model.h"
#include "runtime/interchange/peft_adapter.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime::config_internal {
namespace {

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "\"" : ", \"") + name + "\"";
  return "[" + out + "]";
}

}  // namespace

Status ReadLora(const Section& top, ModelConfig* model) {
  if (!top.Has("lora")) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("lora"));
  HOIST_RETURN_IF_ERROR(
      s.AllowOnly({"r", "alpha", "lora_alpha", "dropout", "lora_dropout", "target_modules", "bias",
                   "use_rslora", "init_from", "fan_in_fan_out", "task_type", "base_quantization",
                   "double_quant", "bnb_4bit_use_double_quant"}));
  for (const auto& [short_key, peft_key] :
       {std::pair{"alpha", "lora_alpha"}, std::pair{"dropout", "lora_dropout"},
        std::pair{"double_quant", "bnb_4bit_use_double_quant"}}) {
    if (s.Has(short_key) && s.Has(peft_key)) {
      return s.Invalid(peft_key,
                       std::string("and ") + short_key + " are the same setting: keep one of them");
    }
  }
  LoraConfig& lora = model->lora;
  lora = LoraConfig{};
  HOIST_RETURN_IF_ERROR(s.String("init_from", &lora.init_from));
  std::optional<LoraConfig> adapter;
  if (!lora.init_from.empty()) {
    StatusOr<LoraConfig> read = ReadPeftAdapterConfig(lora.init_from);
    if (!read.ok()) return s.Invalid("init_from", read.status().message());
    adapter = *read;
  }
  // A key the job sets must agree with the adapter's; a key it leaves out takes the adapter's.
  auto agree = [&](std::string_view key, bool equal, const std::string& theirs) -> Status {
    if (!adapter || equal) return Status::Ok();
    return s.Invalid(key, "disagrees with the adapter lora.init_from names (" + theirs +
                              "); remove the key or use another adapter");
  };
  lora.r = adapter ? adapter->r : 8;
  if (s.Has("r")) {
    int r = 0;
    HOIST_RETURN_IF_ERROR(s.Int("r", &r));
    if (r < 1 || r > 65536)
      return s.Invalid("r", "must be in [1, 65536], found " + std::to_string(r));
    HOIST_RETURN_IF_ERROR(
        agree("r", adapter && r == adapter->r, adapter ? "r " + std::to_string(adapter->r) : ""));
    lora.r = r;
  }
  lora.alpha = adapter ? adapter->alpha : 8.0;
  for (const char* key : {"alpha", "lora_alpha"}) {
    if (!s.Has(key)) continue;
    double alpha = 0;
    HOIST_RETURN_IF_ERROR(s.Double(key, &alpha));
    if (!(alpha > 0) || !(alpha <= kMaxLoraAlpha)) {
      return s.Invalid(key, "must be in (0, " + nlohmann::json(kMaxLoraAlpha).dump() + "], found " +
                                nlohmann::json(alpha).dump() + " (real adapters use 8 to 512)");
    }
    HOIST_RETURN_IF_ERROR(agree(key, adapter && alpha == adapter->alpha,
                                adapter ? "lora_alpha " + std::to_string(adapter->alpha) : ""));
    lora.alpha = alpha;
  }
  lora.dropout = adapter ? adapter->dropout : 0.0f;
  for (const char* key : {"dropout", "lora_dropout"}) {
    if (!s.Has(key)) continue;
    float dropout = 0;
    HOIST_RETURN_IF_ERROR(s.Float(key, &dropout));
    if (!(dropout >= 0.0f && dropout < 1.0f)) {
      return s.Invalid(key, "must be in [0, 1), found " + std::to_string(dropout));
    }
    lora.dropout = dropout;  // a training setting: the job may change the adapter's
  }
  lora.use_rslora = adapter && adapter->use_rslora;
  if (s.Has("use_rslora")) {
    bool rslora = false;
    HOIST_RETURN_IF_ERROR(s.Bool("use_rslora", &rslora));
    HOIST_RETURN_IF_ERROR(agree("use_rslora", adapter && rslora == adapter->use_rslora,
                                adapter && adapter->use_rslora ? "true" : "false"));
    lora.use_rslora = rslora;
  }
  lora.target_modules =
      adapter ? adapter->target_modules : FamilyOf(model->family).default_lora_targets;
  if (const nlohmann::json* targets = s.Find("target_modules")) {
    std::vector<std::string> names;
    if (targets->is_string()) {
      names = {targets->get<std::string>()};
      if (names[0] != "all-linear") {
        return s.Invalid("target_modules",
                         "must be a list of module names (or \"all-linear\"); hoist does not take "
                         "a regular expression");
      }
    } else if (targets->is_array() && !targets->empty()) {
      for (const auto& name : *targets) {
        if (!name.is_string()) return s.Invalid("target_modules", "must hold module names");
        names.push_back(name.get<std::string>());
      }
    } else {
      return s.Invalid("target_modules", "must be a non-empty list of module names");
    }
    // PEFT writes the list from a set: the order is not a setting.
    auto sorted = [](std::vector<std::string> v) {
      std::sort(v.begin(), v.end());
      return v;
    };
    HOIST_RETURN_IF_ERROR(agree("target_modules",
                                adapter && sorted(names) == sorted(adapter->target_modules),
                                adapter ? Join(adapter->target_modules) : ""));
    lora.target_modules = names;
  }
  std::string bias = "none";
  HOIST_RETURN_IF_ERROR(s.String("bias", &bias));
  if (bias != "none") {
    return s.Invalid("bias", "must be \"none\": hoist trains the adapters alone, not the biases");
  }
  std::string task = "CAUSAL_LM";
  HOIST_RETURN_IF_ERROR(s.String("task_type", &task));
  if (task != "CAUSAL_LM") {
    return s.Invalid("task_type", "must be \"CAUSAL_LM\" (hoist trains causal language models)");
  }
  std::string quantization = "none";
  HOIST_RETURN_IF_ERROR(s.String("base_quantization", &quantization));
  if (quantization == "nf4") {
    lora.nf4_base = true;
  } else if (quantization != "none") {
    return s.Invalid(
        "base_quantization",
        "must be \"nf4\" (a 4-bit frozen base) or \"none\", found \"" + quantization + "\"");
  }
  for (const char* key : {"double_quant", "bnb_4bit_use_double_quant"}) {
    HOIST_RETURN_IF_ERROR(s.Bool(key, &lora.nf4_double_quant));
    if (s.Has(key) && lora.nf4_double_quant && !lora.nf4_base) {
      return s.Invalid(key,
                       "quantizes the 4-bit base's absmaxes: it needs base_quantization "
                       "\"nf4\"");
    }
  }
  bool fan_in_fan_out = false;  // PEFT's note on GPT-2's Conv1D weights; hoist knows them
  HOIST_RETURN_IF_ERROR(s.Bool("fan_in_fan_out", &fan_in_fan_out));
  StatusOr<LoraLayout> layout = LoraLayout::For(*model);
  if (!layout.ok()) return s.Invalid("target_modules", layout.status().message());
  return Status::Ok();
}

}  // namespace hoist::runtime::config_internal
