#include "runtime/checkpoint/checkpoint_weights.h"

#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "runtime/checkpoint/base_identity.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_metadata.h"
#include "runtime/checkpoint/run_identity.h"
#include "runtime/interchange/lora_merge.h"
#include "runtime/model/lora.h"
#include "zero/partition.h"

namespace hoist::runtime {

StatusOr<CheckpointModel> OpenCheckpointModel(const std::string& checkpoint) {
  CheckpointModel opened;
  opened.step_dir = checkpoint;
  if (!std::filesystem::exists(std::filesystem::path(checkpoint) / "manifest.json")) {
    HOIST_ASSIGN_OR_RETURN(opened.step_dir, FindLatestCheckpoint(checkpoint));
  }
  HOIST_ASSIGN_OR_RETURN(CheckpointReader reader,
                         CheckpointReader::Open(opened.step_dir, /*rank=*/0));
  opened.metadata = reader.metadata();
  if (!opened.metadata.contains("run")) {
    return DataLossError("checkpoint " + opened.step_dir + " has no run identity in its manifest");
  }
  HOIST_ASSIGN_OR_RETURN(opened.model,
                         ModelFromRunIdentity(opened.metadata["run"], opened.step_dir));
  return opened;
}

Status ReadCheckpointWeights(const std::string& step_dir, const ModelConfig& model, float* out) {
  // The trained units: the whole model's, or a LoRA run's adapters.
  const std::vector<zero::UnitSpec> units = TrainedUnits(model);
  std::vector<int64_t> unit_offsets = {0};
  for (const zero::UnitSpec& unit : units) unit_offsets.push_back(unit_offsets.back() + unit.size);
  HOIST_ASSIGN_OR_RETURN(CheckpointReader first, CheckpointReader::Open(step_dir, 0));
  const nlohmann::json& metadata = first.metadata();
  HOIST_ASSIGN_OR_RETURN(const int64_t stage,
                         CheckpointMetadata(metadata, step_dir).Integer("zero_stage", 0, 3));
  const int world_size = first.world_size();
  if (stage == 0 || world_size == 1) {
    // The whole state, in unit order, in rank 0's shard.
    return first.Read("master", out, unit_offsets.back() * int64_t{sizeof(float)});
  }
  for (int rank = 0; rank < world_size; ++rank) {
    HOIST_ASSIGN_OR_RETURN(zero::PartitionPlan plan,
                           zero::PartitionPlan::Build(units, world_size, rank));
    HOIST_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(step_dir, rank));
    std::vector<float> shard(static_cast<size_t>(plan.total_shard()));
    HOIST_RETURN_IF_ERROR(
        reader.Read("master", shard.data(), plan.total_shard() * int64_t{sizeof(float)}));
    for (int u = 0; u < plan.num_units(); ++u) {
      const zero::UnitPartition& part = plan.unit(u);
      std::memcpy(out + unit_offsets[static_cast<size_t>(u)] + part.owned_begin,
                  shard.data() + part.shard_offset,
                  static_cast<size_t>(part.owned_real) * sizeof(float));
    }
  }
  return Status::Ok();
}

StatusOr<ModelWeights> ReadCheckpointModelWeights(const CheckpointModel& opened) {
  ModelWeights out;
  out.model = opened.model;
  out.model.lora = LoraConfig();
  out.weights.resize(static_cast<size_t>(ModelParameterCount(out.model)));
  const nlohmann::json& metadata = opened.metadata;
  if (metadata.contains("hf_config") && metadata["hf_config"].is_object()) {
    out.hf_config = metadata["hf_config"];
  }
  if (!opened.model.lora.enabled()) {
    HOIST_RETURN_IF_ERROR(ReadCheckpointWeights(opened.step_dir, opened.model, out.weights.data()));
    return out;
  }
  int64_t adapter_count = 0;
  for (const zero::UnitSpec& unit : TrainedUnits(opened.model)) adapter_count += unit.size;
  std::vector<float> adapters(static_cast<size_t>(adapter_count));
  HOIST_RETURN_IF_ERROR(ReadCheckpointWeights(opened.step_dir, opened.model, adapters.data()));
  nlohmann::json base_config;
  // The base must be the one the adapters were trained on; checkpoints written before its
  // identity was recorded cannot tell.
  std::function<Status(const WeightSource&)> check_base;
  if (metadata.contains(kBaseIdentityField)) {
    check_base = [&](const WeightSource& base) -> Status {
      HOIST_ASSIGN_OR_RETURN(nlohmann::json current, BaseIdentity(base));
      return CheckSameBase(metadata[kBaseIdentityField], current, base.path(), opened.step_dir);
    };
  } else {
    HOIST_LOG(WARN) << "checkpoint " << opened.step_dir
                    << " was written before checkpoints recorded the identity of their LoRA "
                       "base; the base at "
                    << opened.model.init_from
                    << " (model.init_from) is merged without checking that it is the one the "
                       "adapters were trained on";
  }
  HOIST_RETURN_IF_ERROR(ReadMergedLoraWeights(opened.model, adapters.data(), out.weights.data(),
                                              &base_config, check_base));
  if (!out.hf_config.is_object()) out.hf_config = std::move(base_config);
  return out;
}

}  // namespace hoist::runtime
