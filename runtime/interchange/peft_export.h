// A LoRA run's adapters as Hugging Face PEFT saves them (save_pretrained of a PeftModel): a
// directory with adapter_model.safetensors (base_model.model.<module>.lora_A.weight (r, in) and
// .lora_B.weight (out, r) for every targeted layer of every block, metadata {"format": "pt"}) and
// adapter_config.json (PEFT's LoraConfig, keys sorted, two-space indent), so that
// PeftModel.from_pretrained(base, dir) loads them onto the base the run adapted.
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/file_system.h"
#include "core/status.h"
#include "runtime/model/model_config.h"

namespace hoist::runtime {

// adapter_config.json for LoRA model `model`: r, lora_alpha, lora_dropout, target_modules,
// use_rslora, base_model_name_or_path (model.init_from), fan_in_fan_out (true for GPT-2's
// Conv1D layers), and PEFT 0.21's defaults for the keys hoist does not model.
std::string PeftAdapterConfigText(const ModelConfig& model);

// Writes `adapters` (layout.n_layer * layout.unit_size floats, block by block, as a LoRA
// checkpoint stores them) into `out_dir` (created) as `dtype`. The directory is replaced whole
// (runtime/interchange/export_staging.h): a failure or a kill leaves the earlier adapters or these.
Status WritePeftAdapter(const std::string& out_dir, const ModelConfig& model, const float* adapters,
                        DType dtype, FileSystem& fs = FileSystem::Posix());

}  // namespace hoist::runtime
