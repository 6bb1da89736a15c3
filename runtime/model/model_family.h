// ModelFamilySpec: what the runtime knows of a model family outside its model class, declared in
// the family's own file (Gpt2Family() in runtime/model/gpt2.cc, LlamaFamily() in
// runtime/model/llama.cc, Qwen2Family() in runtime/model/qwen2.cc, ...) and found through FamilyOf.
// The model's creation and activation footprint, its units, its Hugging Face config.json and tensor
// names, the bound of its parameter count, the LoRA adapters it takes and the matmul weights the
// planner counts all go through it, so that code above the models never branches on the family. The
// specs are immutable and live for the program's life; FamilyOf is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "runtime/model/hf_keys.h"
#include "runtime/model/lora.h"
#include "runtime/model/model.h"
#include "runtime/model/model_config.h"
#include "zero/param_store.h"
#include "zero/partition.h"

namespace hoist::runtime {

struct DecoderTraits;

struct ModelFamilySpec {
  ModelFamily family;
  // transformers' classes of the family's causal LM, the one an export writes first
  // ("LlamaForCausalLM"); a config.json naming another is refused.
  std::vector<std::string> architectures;
  // The model a config.json of the family describes (ModelConfigFromHf's contract), and the
  // config.json for a model: `base` with the model's keys set, or the family's defaults where
  // `base` is empty (HfConfigText's).
  StatusOr<ModelConfig> (*from_hf)(const nlohmann::json& config, const std::string& path);
  nlohmann::json (*to_hf)(const ModelConfig& model, const nlohmann::json& base);
  // Every tensor of the family's state_dict and where it lives (HfTensorPlaces).
  std::vector<HfTensorPlace> (*hf_tensors)(const ModelConfig& model);
  // A rotary family's block (runtime/model/decoder.h); null for GPT-2.
  const DecoderTraits* decoder = nullptr;
  // The model on `backend` (CreateModel's contract, runtime/model/model.h).
  StatusOr<std::unique_ptr<Model>> (*create)(const ModelConfig& config, int max_B, int max_T,
                                             kernels::Backend* backend, zero::ParamStore* store,
                                             DType activation_type,
                                             const ActivationCheckpointingConfig& checkpointing);
  // What create allocates for activations, counted without allocating (ModelActivationFootprint).
  Model::ActivationBytes (*activation_footprint)(const ModelConfig& config, int max_B, int max_T,
                                                 DType activation_type,
                                                 const ActivationCheckpointingConfig& checkpointing,
                                                 DeviceKind device);
  // The units with their weight-decay segments (ModelUnits).
  std::vector<zero::UnitSpec> (*units)(const ModelConfig& config);
  // An upper bound of the parameter count, computed in long double so that no product of the
  // config's int dimensions overflows (CheckModelSize).
  long double (*parameter_bound)(const ModelConfig& config);
  // Every linear layer of a block, in the order a block computes them (LoraCandidates).
  std::vector<LoraModule> (*lora_candidates)(const ModelConfig& config);
  // transformers' path of the blocks' modules, before the block's index: "model.layers.".
  const char* block_path;
  // The linear layers outside the blocks, which hoist does not adapt (PEFT's names).
  std::vector<std::string> outside_layers;
  // PEFT's default target_modules for the family.
  std::vector<std::string> default_lora_targets;
  // Whether the family's linear layers keep their weights (in, out), as GPT-2's Conv1D do (PEFT's
  // fan_in_fan_out).
  bool fan_in_fan_out = false;
  // The weights of one block's matmuls, and those of its last projection (the MLP's output,
  // whose result every checkpointing policy keeps), for the planner's FLOP and recompute counts.
  double (*block_matmul_weights)(const ModelConfig& config);
  double (*last_projection_weights)(const ModelConfig& config);
};

// The spec's `create` for a family class with a static Create of CreateModel's arguments.
template <typename Family>
StatusOr<std::unique_ptr<Model>> CreateAs(const ModelConfig& config, int max_B, int max_T,
                                          kernels::Backend* backend, zero::ParamStore* store,
                                          DType activation_type,
                                          const ActivationCheckpointingConfig& checkpointing) {
  HOIST_ASSIGN_OR_RETURN(
      std::unique_ptr<Family> model,
      Family::Create(config, max_B, max_T, backend, store, activation_type, checkpointing));
  return std::unique_ptr<Model>(std::move(model));
}

// The spec of `family` (every ModelFamily has one).
const ModelFamilySpec& FamilyOf(ModelFamily family);

// Each family's spec, defined in its own file.
const ModelFamilySpec& Gpt2Family();
const ModelFamilySpec& LlamaFamily();
const ModelFamilySpec& Qwen2Family();
const ModelFamilySpec& Qwen3Family();
const ModelFamilySpec& MistralFamily();
const ModelFamilySpec& Gemma2Family();

}  // namespace hoist::runtime
