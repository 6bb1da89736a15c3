#include "runtime/device_training.h"

namespace hoist::runtime {

Status SupportsDeviceTraining(const Config& config, const std::string& device) {
  auto refuse = [&](const std::string& key, const std::string& what) {
    return UnimplementedError(key + ": " + what + " is not yet available on --device " + device +
                              "; train this job with --device cpu, or change the key");
  };
  if (config.zero.stage != 0) {
    return refuse("zero_optimization.stage",
                  "ZeRO stage " + std::to_string(config.zero.stage) +
                      " (partitioned states; the device path keeps whole states on every rank, "
                      "stage 0)");
  }
  if (config.zero.offload_optimizer.device != OffloadDevice::kNone) {
    return refuse("zero_optimization.offload_optimizer", "offloading the optimizer");
  }
  if (config.zero.offload_param.device != OffloadDevice::kNone) {
    return refuse("zero_optimization.offload_param", "offloading the parameters");
  }
  const int head_size = config.model.n_embd / config.model.n_head;
  if (config.model.attention == AttentionKind::kTiled && head_size > 128) {
    return refuse("model.attention",
                  "tiled attention with heads of " + std::to_string(head_size) +
                      " channels (the GPU's tiled kernel takes at most 128; direct has no limit)");
  }
  if (config.activation_checkpointing.policy != CheckpointPolicy::kNone) {
    return refuse("activation_checkpointing.policy",
                  std::string("activation checkpointing (policy ") +
                      CheckpointPolicyName(config.activation_checkpointing.policy) + ")");
  }
  return Status::Ok();
}

}  // namespace hoist::runtime
