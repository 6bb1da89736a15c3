// The identity of a training run as a checkpoint records it: what a job must share with the
// checkpoint it resumes for the loss trajectory to continue exactly (the model, the data, the
// global batch), and what a reader needs to rebuild the model. Everything else — lr, steps, eval
// cadence, logging — may change across a restart. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "runtime/config/config.h"

namespace hoist::runtime {

// {"model.n_layer": 4, ..., "data.train": ..., "train_batch_size": ..., and its split}
nlohmann::json RunIdentity(const Config& config);

// OK when `saved` (from the checkpoint in `dir`, written by `saved_world_size` ranks) matches the
// job's identity; otherwise a FailedPrecondition naming the first key that differs and both
// values. The global batch (train_batch_size) must match, not how it is split: the world size,
// the micro-batch and the accumulation steps may all change across a resume.
Status CheckSameRun(const nlohmann::json& saved, const Config& config, const std::string& dir,
                    int saved_world_size);

// The model section of a saved identity; DataLoss naming the key if one is missing or mistyped.
StatusOr<ModelConfig> ModelFromRunIdentity(const nlohmann::json& saved, const std::string& dir);

}  // namespace hoist::runtime
