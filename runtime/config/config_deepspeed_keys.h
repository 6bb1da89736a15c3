// The DeepSpeed keys hoist does not read: monitors, profilers and tuning that do not change the
// trained weights (accepted with one notice each, their values type-checked), and DeepSpeed
// features hoist does not have (refused, naming the feature). Internal to runtime/config*.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runtime/config/config_reader.h"

namespace hoist::runtime::config_internal {

// The top-level keys handled by CheckDeepSpeedOnlyKeys, and those read elsewhere in
// config_deepspeed.cc, for the unknown-key check and its suggestions.
const std::vector<std::string_view>& DeepSpeedOnlyKeys();

// For each top-level DeepSpeed key present in `top` that hoist does not read: a feature that
// would change the training (Apex AMP, pipeline or tensor parallelism, quantisation, ...), when
// asked for, is an Unimplemented error "<what> is a DeepSpeed feature hoist does not have",
// because training without it would silently differ from what the file asks for; a key that does
// not (logging, profilers, monitors), when it asks for something, appends one notice line to
// `notices`. Every such value is type-checked.
Status CheckDeepSpeedOnlyKeys(const Section& top, std::vector<std::string>* notices);

// The keys of `zero_optimization` that tune how DeepSpeed schedules, groups, caches or saves, not
// what it computes, for the section's allowed keys.
const std::vector<std::string_view>& ZeroNoticeKeys();
// Type-checks those present in `zero` (the zero_optimization section) as DeepSpeed's pydantic
// config declares them, and appends one notice each.
Status CheckZeroNoticeKeys(const Section& zero, std::vector<std::string>* notices);

// DeepSpeed's keys of the `checkpoint` section, which hoist's own section shares.
const std::vector<std::string_view>& DeepSpeedCheckpointKeys();
// Type-checks those present in `checkpoint`: load_universal true is refused (hoist cannot load
// DeepSpeed's universal checkpoints), the others append one notice each.
Status CheckDeepSpeedCheckpointKeys(const Section& checkpoint, std::vector<std::string>* notices);

// The params of DeepSpeed's 1-bit optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb).
const std::vector<std::string_view>& OneBitOptimizerParams();
// Refuses the first 1-bit optimizer param present in `params` as a feature hoist does not have.
Status RefuseOneBitOptimizerParams(const Section& params);

// "<what> is a DeepSpeed feature hoist does not have".
std::string MissingFeature(std::string_view what);

}  // namespace hoist::runtime::config_internal
