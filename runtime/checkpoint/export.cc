#include "runtime/checkpoint/export.h"

#include <vector>

#include "runtime/checkpoint/checkpoint_weights.h"
#include "runtime/interchange/llmc_checkpoint.h"
#include "runtime/interchange/peft_export.h"
#include "runtime/model/gpt2_weights.h"
#include "runtime/model/lora.h"

namespace hoist::runtime {

StatusOr<std::string> ExportCheckpoint(const ExportOptions& options) {
  HOIST_ASSIGN_OR_RETURN(const CheckpointModel opened, OpenCheckpointModel(options.checkpoint));
  const std::string& step_dir = opened.step_dir;
  if (options.format == ExportFormat::kPeft) {
    if (!opened.model.lora.enabled()) {
      return InvalidArgumentError("checkpoint " + step_dir +
                                  " is of a full-training run, not a LoRA run: it has no "
                                  "adapters to export in PEFT's layout; export it with --format "
                                  "hf or llmc");
    }
    int64_t count = 0;
    for (const zero::UnitSpec& unit : TrainedUnits(opened.model)) count += unit.size;
    std::vector<float> adapters(static_cast<size_t>(count));
    HOIST_RETURN_IF_ERROR(ReadCheckpointWeights(step_dir, opened.model, adapters.data()));
    HOIST_RETURN_IF_ERROR(
        WritePeftAdapter(options.output, opened.model, adapters.data(), options.dtype));
    return step_dir;
  }
  // The model's weights whole: a LoRA run's base with its adapters merged.
  HOIST_ASSIGN_OR_RETURN(const ModelWeights whole, ReadCheckpointModelWeights(opened));
  if (options.format == ExportFormat::kLlmc) {
    HOIST_RETURN_IF_ERROR(
        WriteLlmcCheckpoint(options.output, whole.model, whole.weights.data(), options.dtype));
    return step_dir;
  }
  HfExportOptions hf;
  hf.dtype = options.dtype;
  hf.max_shard_bytes = options.max_shard_bytes;
  if (whole.hf_config.is_object()) hf.base_config = whole.hf_config;
  HOIST_RETURN_IF_ERROR(WriteHfCheckpoint(options.output, whole.model, whole.weights.data(), hf));
  return step_dir;
}

}  // namespace hoist::runtime
