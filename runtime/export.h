// `hoist export`: a training checkpoint's weights, written as a Hugging Face directory or an llm.c
// file, whatever world size, ZeRO stage and offload wrote the checkpoint (the weights are
// assembled from every rank's shard, checksums verified: runtime/checkpoint_weights.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace hoist::runtime {

enum class ExportFormat { kHuggingFace, kLlmc };

struct ExportOptions {
  std::string checkpoint;  // a checkpoint directory (its latest step) or one step directory
  ExportFormat format = ExportFormat::kHuggingFace;
  std::string output;  // the directory (Hugging Face) or the file (llm.c)
  DType dtype = DType::kFloat32;
  int64_t max_shard_bytes = 0;  // Hugging Face: split above this many bytes; 0: one file
};

// Writes the checkpoint's weights; returns the step directory they came from. The config.json
// of a run that started from a Hugging Face checkpoint (model.init_from) is carried over, its
// dimensions rewritten, so the keys hoist does not model survive the round trip.
StatusOr<std::string> ExportCheckpoint(const ExportOptions& options);

}  // namespace hoist::runtime
