#include "runtime/train/loss_scaler.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/check.h"

namespace hoist::runtime {
namespace {

// Doubling stops at the largest power of two a float holds. DeepSpeed keeps the scale in a
// Python float, where the fp32 loss times the scale overflows (and halves the scale) long before
// the scale itself would; a float scale that reached infinity would never come back.
constexpr float kMaxScale = 0x1p127f;

std::string Num(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

}  // namespace

LossScaler::LossScaler(const Fp16Config& config)
    : config_(config), dynamic_(!(config.loss_scale > 0)) {
  HOIST_CHECK(std::isfinite(config.loss_scale) && config.loss_scale >= 0) << config.loss_scale;
  if (!dynamic_) {
    state_.scale = config.loss_scale;
    state_.hysteresis_left = 1;
    return;
  }
  HOIST_CHECK(config.initial_scale_power >= -126 && config.initial_scale_power <= 127)
      << config.initial_scale_power;
  HOIST_CHECK_GT(config.loss_scale_window, 0);
  HOIST_CHECK_GE(config.hysteresis, 1);
  HOIST_CHECK(config.min_loss_scale > 0 && std::isfinite(config.min_loss_scale))
      << config.min_loss_scale;
  state_.scale = std::ldexp(1.0f, config.initial_scale_power);
  state_.hysteresis_left = config.hysteresis;
}

StatusOr<bool> LossScaler::Update(bool overflow) {
  if (!dynamic_) {
    if (overflow) ++state_.skipped_steps;
    return overflow;
  }
  if (overflow) {
    if (state_.hysteresis_left <= 1) {
      if (state_.scale == config_.min_loss_scale) {
        return FailedPreconditionError(
            "fp16: the gradients overflowed with the loss scale already at fp16.min_loss_scale (" +
            Num(config_.min_loss_scale) +
            "), so it cannot be lowered further; the run cannot make progress. Lower "
            "fp16.min_loss_scale, lower the learning rate or gradient_clipping, or train in bf16 "
            "(bf16.enabled) instead");
      }
      state_.scale = std::fmax(state_.scale / 2, config_.min_loss_scale);
    } else {
      --state_.hysteresis_left;
    }
    state_.clean_steps = 0;
    ++state_.skipped_steps;
    return true;
  }
  if (config_.consecutive_hysteresis) state_.hysteresis_left = config_.hysteresis;
  if (state_.clean_steps > 0 && state_.clean_steps % config_.loss_scale_window == 0) {
    if (!config_.consecutive_hysteresis) state_.hysteresis_left = config_.hysteresis;
    state_.scale = std::fmin(state_.scale * 2, kMaxScale);
  }
  ++state_.clean_steps;
  return false;
}

Status LossScaler::Restore(const LossScalerState& state) {
  if (!(std::isfinite(state.scale) && state.scale > 0) || state.hysteresis_left < 1 ||
      state.clean_steps < 0 || state.skipped_steps < 0) {
    return DataLossError(
        "loss scaler state in the checkpoint is not one a scaler can hold (scale " +
        Num(state.scale) + ", hysteresis left " + std::to_string(state.hysteresis_left) +
        ", clean steps " + std::to_string(state.clean_steps) + ", skipped steps " +
        std::to_string(state.skipped_steps) +
        "); the checkpoint is damaged, resume from another one");
  }
  if (!dynamic_) {
    state_.skipped_steps = state.skipped_steps;
    return Status::Ok();
  }
  state_ = state;
  if (state_.hysteresis_left > config_.hysteresis) state_.hysteresis_left = config_.hysteresis;
  return Status::Ok();
}

}  // namespace hoist::runtime
