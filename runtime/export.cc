#include "runtime/export.h"

#include <vector>

#include "runtime/checkpoint_weights.h"
#include "runtime/gpt2_weights.h"

namespace hoist::runtime {

StatusOr<std::string> ExportCheckpoint(const ExportOptions& options) {
  HOIST_ASSIGN_OR_RETURN(const CheckpointModel opened, OpenCheckpointModel(options.checkpoint));
  const std::string& step_dir = opened.step_dir;
  const nlohmann::json& metadata = opened.metadata;
  const ModelConfig& model = opened.model;
  std::vector<float> weights(static_cast<size_t>(ModelParameterCount(model)));
  HOIST_RETURN_IF_ERROR(ReadCheckpointWeights(step_dir, model, weights.data()));
  if (options.format == ExportFormat::kLlmc) {
    HOIST_RETURN_IF_ERROR(
        WriteLlmcCheckpoint(options.output, model, weights.data(), options.dtype));
    return step_dir;
  }
  HfExportOptions hf;
  hf.dtype = options.dtype;
  hf.max_shard_bytes = options.max_shard_bytes;
  if (metadata.contains("hf_config") && metadata["hf_config"].is_object()) {
    hf.base_config = metadata["hf_config"];
  }
  HOIST_RETURN_IF_ERROR(WriteHfCheckpoint(options.output, model, weights.data(), hf));
  return step_dir;
}

}  // namespace hoist::runtime
