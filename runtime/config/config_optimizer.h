// The `optimizer` and `scheduler` sections of the config, with DeepSpeed's defaults; a default
// hoist fills in that decides the training (no optimizer section, no lr, a warmup without its
// end) is said once in a notice. Internal to runtime/config*.cc.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/config/config_reader.h"

namespace hoist::runtime::config_internal {

// Reads `optimizer` {type, params} into `opt`; DeepSpeed's other optimizers and their params are
// refused as features hoist does not have.
Status ReadOptimizer(const Section& top, OptimizerConfig* opt, std::vector<std::string>* notices);

// Reads `scheduler` {type, params} into `sched`; `opt` (already read) is what an unset
// warmup_max_lr is compared with.
Status ReadScheduler(const Section& top, const OptimizerConfig& opt, SchedulerConfig* sched,
                     std::vector<std::string>* notices);

}  // namespace hoist::runtime::config_internal
