// The loss scale of fp16 training, with DeepSpeed's semantics (its LossScaler and
// DynamicLossScaler, configured by the `fp16` section):
//
// - Static (fp16.loss_scale > 0): the scale never changes; a step whose gradients overflow is
//   still skipped.
// - Dynamic (fp16.loss_scale == 0): the scale starts at 2^initial_scale_power. An overflowing
//   step is skipped; if more than one unit of hysteresis budget is left (it starts at
//   `hysteresis`), one unit is spent and the scale is kept, else the scale halves, never below
//   min_loss_scale (the budget stays spent, so each further overflow halves again). A step
//   without overflow grows the scale 2x when the clean steps before it, counted since the last
//   overflow (or the start), are a positive multiple of loss_scale_window: the first growth is
//   on clean step window + 1, the next window steps later. A growth refills the budget; with
//   consecutive_hysteresis every clean step refills it.
// - An overflow that would halve a dynamic scale already at min_loss_scale ends the run, as in
//   DeepSpeed ("Current loss scale already at minimum"): Update returns an error.
//
// A plain value type, not thread-safe: one per trainer, updated once per optimizer step with the
// overflow flag that every rank agreed on, so every rank's scaler holds the same state.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "runtime/config/config.h"

namespace hoist::runtime {

// What a checkpoint stores to resume the scaler exactly.
struct LossScalerState {
  float scale = 1;
  int hysteresis_left = 1;  // DeepSpeed's cur_hysteresis; >= 1
  // Steps without overflow since the last overflow (or the start); DeepSpeed's
  // cur_iter - last_overflow_iter - 1 before the next step.
  int64_t clean_steps = 0;
  int64_t skipped_steps = 0;  // steps skipped for overflow so far
};

class LossScaler {
 public:
  // `config` must have passed ParseConfig's checks (HOIST_CHECKed here).
  explicit LossScaler(const Fp16Config& config);

  // The scale to multiply the next step's loss by.
  float scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }
  int64_t skipped_steps() const { return state_.skipped_steps; }

  // Records one optimizer step's outcome (true: its gradients held an inf or NaN) and sets the
  // scale for the next step. Returns true when the step must be skipped, i.e. when it
  // overflowed. FailedPrecondition, with the state unchanged, when a dynamic scale already at
  // min_loss_scale would have to be lowered.
  StatusOr<bool> Update(bool overflow);

  LossScalerState state() const { return state_; }
  // Resumes from a checkpoint's state. A static scaler keeps its configured scale (the config is
  // the authority on a static scale) and takes only skipped_steps. A dynamic scaler takes it all;
  // a budget above the configured hysteresis (the config changed) is cut to it. A state no
  // scaler could hold (scale not finite and > 0, budget < 1, negative counts) is DataLoss.
  Status Restore(const LossScalerState& state);

 private:
  Fp16Config config_;
  bool dynamic_;
  LossScalerState state_;
};

}  // namespace hoist::runtime
