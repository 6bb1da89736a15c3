// LoRA adapters merged into their base, as PEFT's merge_and_unload does it: each targeted
// layer's weight W (out, in) gains scaling * B A on the rows its adapter adds to (for Llama's
// fused q/k/v and gate/up, the rows of q_proj, v_proj, gate_proj, ... within the fused weight).
// What a LoRA checkpoint's merged export and `hoist sample` compute with: one code path for
// both (ReadCheckpointModelWeights in runtime/checkpoint/checkpoint_weights.h).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_config.h"

namespace hoist::runtime {

// The weights of LoRA model `model` merged: its base read from model.init_from (a Hugging Face
// directory or an llm.c file) unit by unit, each unit merged as it is read, into `out`
// (ModelParameterCount of the model without adapters floats, unit order): for every targeted
// layer, W[i][j] += scaling * sum_k B[i][k] A[k][j], the sum in double and the addition rounded
// once. `adapters` holds layout.n_layer * layout.unit_size floats, block by block, as a LoRA
// checkpoint stores them (ReadCheckpointWeights). `base_config` gets the
// base's config.json (empty for an llm.c file). A base that is gone, unreadable or of other
// shapes than the adapted model's is FailedPrecondition naming its path. `check_base`, when set,
// is called on the opened base before anything is read from it (a checkpoint's check that the
// base is the one its adapters were trained on); its error ends the merge.
Status ReadMergedLoraWeights(
    const ModelConfig& model, const float* adapters, float* out, nlohmann::json* base_config,
    const std::function<Status(const WeightSource&)>& check_base = nullptr);

}  // namespace hoist::runtime
