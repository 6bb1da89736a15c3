// `hoist export`: a training checkpoint's weights, written as a Hugging Face directory or an llm.c
// file, whatever world size, ZeRO stage and offload wrote the checkpoint (the weights are
// assembled from every rank's shard, checksums verified: runtime/checkpoint/checkpoint_weights.h).
// A LoRA run's checkpoint exports its adapters in PEFT's layout
// (runtime/interchange/peft_export.h), or, as hf and llmc, its base (model.init_from) with the
// adapters merged in (runtime/interchange/lora_merge.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace hoist::runtime {

enum class ExportFormat {
  kHuggingFace,
  kLlmc,
  kPeft,  // a LoRA run's adapters alone: adapter_config.json and adapter_model.safetensors
};

struct ExportOptions {
  std::string checkpoint;  // a checkpoint directory (its latest step) or one step directory
  ExportFormat format = ExportFormat::kHuggingFace;
  std::string output;  // the directory (Hugging Face, PEFT) or the file (llm.c)
  DType dtype = DType::kFloat32;
  int64_t max_shard_bytes = 0;  // Hugging Face: split above this many bytes; 0: one file
};

// Writes the checkpoint's weights; returns the step directory they came from. The config.json
// of a run that started from a Hugging Face checkpoint (model.init_from) is carried over, its
// dimensions rewritten, so the keys hoist does not model survive the round trip.
StatusOr<std::string> ExportCheckpoint(const ExportOptions& options);

}  // namespace hoist::runtime
