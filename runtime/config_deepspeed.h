// The DeepSpeed sections of the config: the ones hoist reads (fp16, bf16, zero_optimization with
// its offload sections, communication_data_type, aio, activation_checkpointing) and the top-level
// keys it knows but does not act on. Internal to runtime/config*.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runtime/config.h"
#include "runtime/config_reader.h"

namespace hoist::runtime::config_internal {

// The top-level keys handled here, for the unknown-key check and its suggestions.
const std::vector<std::string_view>& DeepSpeedOnlyKeys();

// For each top-level DeepSpeed key present in `top` that hoist does not read: a key that would
// change the training math (Apex AMP, activation checkpointing, summed gradients, ...) is an
// Unimplemented error, because training without it would silently differ from what the file
// asks for; a key that does not (logging, profilers, monitors, I/O tuning) appends one notice
// line to `notices`.
Status CheckDeepSpeedOnlyKeys(const Section& top, std::vector<std::string>* notices);

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
