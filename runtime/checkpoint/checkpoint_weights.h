// Reading a training checkpoint's weights whole, whatever ZeRO stage and world size wrote it:
// for sampling and export, which run on one process.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/model/model.h"

namespace hoist::runtime {

// Fills `out` (the floats of TrainedUnits(model), in their order: ModelParameterCount(model) for
// a full-training run, the adapters alone for a LoRA run) with the fp32 weights of the committed
// step directory `step_dir`, assembled from every rank's shard. Each shard's checksum is verified;
// a missing or damaged shard is an error naming it.
Status ReadCheckpointWeights(const std::string& step_dir, const ModelConfig& model, float* out);

// A checkpoint opened for its weights: the step directory, its manifest metadata and the model
// its run identity describes.
struct CheckpointModel {
  std::string step_dir;
  nlohmann::json metadata;
  ModelConfig model;
};
// `checkpoint` is a checkpoint directory (its `latest` step, or the newest complete one) or one
// step directory (it holds manifest.json).
StatusOr<CheckpointModel> OpenCheckpointModel(const std::string& checkpoint);

// The weights a model without adapters computes with, whole: a full-training checkpoint's own
// (ReadCheckpointWeights), or for a LoRA run, its base (model.init_from) with the checkpoint's
// adapters merged in (runtime/interchange/lora_merge.h). What export and sample read.
struct ModelWeights {
  ModelConfig model;           // the checkpoint's model, without adapters
  std::vector<float> weights;  // ModelParameterCount(model) floats, unit order
  nlohmann::json hf_config;    // the config.json the weights came with, when there is one
};
StatusOr<ModelWeights> ReadCheckpointModelWeights(const CheckpointModel& opened);

}  // namespace hoist::runtime
