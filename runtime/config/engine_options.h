// How a job config becomes the options of the ZeRO engine and the model's data types: one
// mapping, shared by the trainer that runs a config and the estimator that predicts it.
#pragma once

#include "comm/communicator.h"
#include "runtime/config/config.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {

// The engine options of `config`'s zero_optimization, precision and optimizer sections.
zero::ZeroOptions ZeroOptionsFrom(const Config& config);

// With LoRA, the options of the two engines a job builds from ZeroOptionsFrom's `options`: the
// frozen base's (the stage and offload_param; no optimizer) and the adapters' (the stage and
// offload_optimizer; the parameters stay with the model).
zero::ZeroOptions FrozenBaseOptions(const zero::ZeroOptions& options);
zero::ZeroOptions AdapterOptions(const zero::ZeroOptions& options);

}  // namespace hoist::runtime
