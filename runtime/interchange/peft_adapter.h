// A PEFT adapter directory read back (what runtime/interchange/peft_export.h writes, or an
// adapter PEFT saved): `lora.init_from` starts a run from one.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_config.h"

namespace hoist::runtime {

// A PEFT adapter directory: its adapter_config.json's settings, checked (a LoRA adapter of a
// causal language model, bias "none", no modules_to_save or per-layer ranks), for the `lora`
// section to take.
StatusOr<LoraConfig> ReadPeftAdapterConfig(const std::string& dir);

// Reads the adapter units of `layout` from the PEFT adapter directory `dir`
// (adapter_model.safetensors, F32/BF16/F16): every tensor of the layout must be there with its
// shape, and nothing else; `out` gets layout.n_layer * layout.unit_size fp32 values, block by
// block. Errors name the file and the tensor.
Status ReadPeftAdapters(const std::string& dir, ModelFamily family, const LoraLayout& layout,
                        std::vector<float>* out);

}  // namespace hoist::runtime
