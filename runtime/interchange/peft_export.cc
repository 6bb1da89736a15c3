#include "runtime/interchange/peft_export.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "kernels/cpu/convert.h"
#include "runtime/interchange/export_staging.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime {

namespace {

// The double that prints as the float does (0.05f as 0.05, not 0.05000000074505806).
double ShortestDouble(float value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  HOIST_CHECK(error == std::errc()) << value;
  return std::strtod(std::string(text, end).c_str(), nullptr);
}

}  // namespace

std::string PeftAdapterConfigText(const ModelConfig& model) {
  const LoraConfig& lora = model.lora;
  // PEFT writes lora_alpha as the number it was given: an integer where it is one.
  const nlohmann::json alpha = lora.alpha == std::floor(lora.alpha) && std::abs(lora.alpha) < 1e15
                                   ? nlohmann::json(static_cast<int64_t>(lora.alpha))
                                   : nlohmann::json(lora.alpha);
  const nlohmann::json targets =
      lora.target_modules.size() == 1 && lora.target_modules[0] == "all-linear"
          ? nlohmann::json("all-linear")
          : nlohmann::json(lora.target_modules);
  // nlohmann's object keeps its keys sorted, as PEFT's json.dumps(sort_keys=True) writes them.
  const nlohmann::json config = {{"alora_invocation_tokens", nullptr},
                                 {"alpha_pattern", nlohmann::json::object()},
                                 {"arrow_config", nullptr},
                                 {"auto_mapping", nullptr},
                                 {"base_model_name_or_path", model.init_from},
                                 {"bias", "none"},
                                 {"corda_config", nullptr},
                                 {"ensure_weight_tying", false},
                                 {"eva_config", nullptr},
                                 {"exclude_modules", nullptr},
                                 {"fan_in_fan_out", FamilyOf(model.family).fan_in_fan_out},
                                 {"inference_mode", true},
                                 {"init_lora_weights", true},
                                 {"kasa_config", nullptr},
                                 {"layer_replication", nullptr},
                                 {"layers_pattern", nullptr},
                                 {"layers_to_transform", nullptr},
                                 {"loftq_config", nlohmann::json::object()},
                                 {"lora_alpha", alpha},
                                 {"lora_bias", false},
                                 {"lora_dropout", ShortestDouble(lora.dropout)},
                                 {"lora_ga_config", nullptr},
                                 {"megatron_config", nullptr},
                                 {"megatron_core", "megatron.core"},
                                 {"modules_to_save", nullptr},
                                 {"monteclora_config", nullptr},
                                 {"peft_type", "LORA"},
                                 {"qalora_group_size", 16},
                                 {"r", lora.r},
                                 {"rank_pattern", nlohmann::json::object()},
                                 {"revision", nullptr},
                                 {"target_modules", targets},
                                 {"target_parameters", nullptr},
                                 {"task_type", "CAUSAL_LM"},
                                 {"trainable_token_indices", nullptr},
                                 {"use_bdlora", nullptr},
                                 {"use_dora", false},
                                 {"use_qalora", false},
                                 {"use_rslora", lora.use_rslora},
                                 {"velora_config", nullptr}};
  return config.dump(2);
}

Status WritePeftAdapter(const std::string& out_dir, const ModelConfig& model, const float* adapters,
                        DType dtype, FileSystem& fs) {
  HOIST_ASSIGN_OR_RETURN(const LoraLayout layout, LoraLayout::For(model));
  // Written beside out_dir and swapped in whole (runtime/interchange/export_staging.h).
  HOIST_ASSIGN_OR_RETURN(StagedExportDir staged, StagedExportDir::Begin(out_dir, fs));
  const std::string type = SafetensorsDTypeName(dtype);
  const int64_t size_of = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<SafetensorsOutput> outputs;
  for (int l = 0; l < layout.n_layer; ++l) {
    for (size_t m = 0; m < layout.modules.size(); ++m) {
      const LoraModule& module = layout.modules[m];
      for (bool b : {false, true}) {
        SafetensorsOutput out;
        out.name = layout.PeftName(model.family, l, static_cast<int>(m), b);
        out.dtype = type;
        out.shape = b ? std::vector<int64_t>{module.out, layout.r}
                      : std::vector<int64_t>{layout.r, module.in};
        const float* src =
            adapters + l * layout.unit_size + (b ? layout.b_offset[m] : layout.a_offset[m]);
        const int64_t n = out.shape[0] * out.shape[1];
        out.produce = [src, n, dtype, size_of](const SafetensorsOutput::Emit& emit) -> Status {
          if (dtype == DType::kFloat32) return emit(src, n * size_of);
          std::vector<uint16_t> narrow(static_cast<size_t>(n));
          kernels::cpu::FromFloat(src, narrow.data(), dtype, n);
          return emit(narrow.data(), n * size_of);
        };
        outputs.push_back(std::move(out));
      }
    }
  }
  SortSafetensorsOutputs(&outputs);
  HOIST_RETURN_IF_ERROR(WriteSafetensors(staged.path() + "/adapter_model.safetensors",
                                         std::move(outputs), {{"format", "pt"}}, fs));
  const std::string config = PeftAdapterConfigText(model);
  const std::string_view pieces[] = {config};
  HOIST_RETURN_IF_ERROR(WriteFileAtomically(fs, staged.path() + "/adapter_config.json", pieces));
  // An adapter directory's other files stay: both of its files are written every time.
  return staged.Commit([](std::string_view) { return false; });
}

}  // namespace hoist::runtime
