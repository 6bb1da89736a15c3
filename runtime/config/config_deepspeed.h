// The DeepSpeed sections of the config that hoist reads: fp16, bf16, zero_optimization with its
// offload sections, communication_data_type, aio, activation_checkpointing (the keys it does not
// read: runtime/config/config_deepspeed_keys.h). Internal to runtime/config*.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/config/config_reader.h"

namespace hoist::runtime::config_internal {

// Reads `fp16`, `bf16` (or the legacy `bfloat16`) and `communication_data_type` into `config`.
Status ReadPrecision(const Section& top, Config* config, std::vector<std::string>* notices);

// Reads `zero_optimization` (an object, or the legacy `true` for stage 1) into `zero`, with
// offload_optimizer, offload_param and their legacy spellings (cpu_offload, cpu_offload_param,
// cpu_offload_use_pin_memory).
Status ReadZero(const Section& top, ZeroConfig* zero, std::vector<std::string>* notices);

// Reads `aio` (the NVMe queue) into `aio`; the keys that only tune DeepSpeed's libaio threads
// append one notice each to `notices`.
Status ReadAio(const Section& top, AioConfig* aio, std::vector<std::string>* notices);

// Reads `activation_checkpointing` into `ac`; keys with no effect here (partition_activations,
// contiguous_memory_optimization, number_checkpoints, synchronize_checkpoint_boundary) append one
// notice each when set.
Status ReadActivationCheckpointing(const Section& top, ActivationCheckpointingConfig* ac,
                                   std::vector<std::string>* notices);

}  // namespace hoist::runtime::config_internal
