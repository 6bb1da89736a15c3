#include "runtime/config/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "core/check.h"
#include "runtime/config/config.h"

namespace hoist::runtime {
namespace {

// DeepSpeed's WarmupDecayLR signature default for warmup_max_lr.
constexpr float kWarmupDecayDefaultMaxLr = 0.001f;

Status BadField(const std::string& key, const std::string& what) {
  return InvalidArgumentError(key + " " + what + "; fix it in the config's scheduler section");
}

Status CheckLr(const std::string& key, float value) {
  if (!std::isfinite(value) || value < 0) {
    std::ostringstream got;
    got << "must be a finite learning rate >= 0, got " << value;
    return BadField(key, got.str());
  }
  return Status::Ok();
}

Status CheckRatio(const std::string& key, float value) {
  if (!std::isfinite(value) || value < 0 || value > 1) {
    std::ostringstream got;
    got << "must be a ratio in [0, 1], got " << value;
    return BadField(key, got.str());
  }
  return Status::Ok();
}

}  // namespace

LrScheduleParams LrScheduleParamsOf(const Config& config) {
  LrScheduleParams params;
  const SchedulerConfig& s = config.scheduler;
  params.type = s.type;
  params.base_lr = config.optimizer.lr;
  params.warmup_min_lr = s.warmup_min_lr;
  params.warmup_max_lr = s.warmup_max_lr;
  params.warmup_num_steps = s.warmup_num_steps;
  params.warmup_type = s.warmup_type;
  params.total_num_steps = s.total_num_steps;
  params.warmup_min_ratio = s.warmup_min_ratio;
  params.cos_min_ratio = s.cos_min_ratio;
  return params;
}

StatusOr<LrSchedule> LrSchedule::Create(const LrScheduleParams& params) {
  Kind kind;
  if (params.type.empty()) {
    kind = Kind::kConstant;
  } else if (params.type == "WarmupLR") {
    kind = Kind::kWarmup;
  } else if (params.type == "WarmupDecayLR") {
    kind = Kind::kWarmupDecay;
  } else if (params.type == "WarmupCosineLR") {
    kind = Kind::kWarmupCosine;
  } else {
    return BadField("scheduler.type", "'" + params.type +
                                          "' is not a schedule hoist knows; use WarmupLR, "
                                          "WarmupDecayLR or WarmupCosineLR, or drop the section");
  }
  // The optimizer's lr is validated here too because every schedule scales from it.
  if (!std::isfinite(params.base_lr) || params.base_lr < 0) {
    std::ostringstream got;
    got << "optimizer.params.lr must be a finite learning rate >= 0, got " << params.base_lr;
    return InvalidArgumentError(got.str());
  }
  if (kind == Kind::kConstant) return LrSchedule(params, kind);

  // DeepSpeed warms up over max(2, warmup_num_steps) steps, so 0 and 1 are valid.
  if (params.warmup_num_steps < 0) {
    return BadField("scheduler.params.warmup_num_steps",
                    "must be >= 0, got " + std::to_string(params.warmup_num_steps));
  }
  if (params.warmup_type != "log" && params.warmup_type != "linear") {
    return BadField("scheduler.params.warmup_type",
                    "must be \"log\" or \"linear\", got \"" + params.warmup_type + "\"");
  }
  if (kind == Kind::kWarmup || kind == Kind::kWarmupDecay) {
    HOIST_RETURN_IF_ERROR(CheckLr("scheduler.params.warmup_min_lr", params.warmup_min_lr));
    if (params.warmup_max_lr.has_value()) {
      HOIST_RETURN_IF_ERROR(CheckLr("scheduler.params.warmup_max_lr", *params.warmup_max_lr));
    }
  }
  if (kind == Kind::kWarmupDecay || kind == Kind::kWarmupCosine) {
    if (params.total_num_steps <= 0) {
      return BadField("scheduler.params.total_num_steps",
                      "must be a positive integer for " + params.type + ", got " +
                          std::to_string(params.total_num_steps));
    }
  }
  if (kind == Kind::kWarmupCosine) {
    HOIST_RETURN_IF_ERROR(CheckRatio("scheduler.params.warmup_min_ratio", params.warmup_min_ratio));
    HOIST_RETURN_IF_ERROR(CheckRatio("scheduler.params.cos_min_ratio", params.cos_min_ratio));
  }
  return LrSchedule(params, kind);
}

LrSchedule::LrSchedule(const LrScheduleParams& params, Kind kind)
    : params_(params),
      kind_(kind),
      linear_warmup_(params.warmup_type == "linear"),
      warmup_steps_(std::max<int64_t>(2, params.warmup_num_steps)),
      min_lr_(params.warmup_min_lr) {
  if (params.warmup_max_lr.has_value()) {
    max_lr_ = *params.warmup_max_lr;
  } else if (kind == Kind::kWarmupDecay) {
    max_lr_ = kWarmupDecayDefaultMaxLr;
  } else {
    max_lr_ = params.base_lr;
  }
}

double LrSchedule::WarmupGamma(int64_t iteration) const {
  if (linear_warmup_) {
    return static_cast<double>(iteration) / static_cast<double>(warmup_steps_);
  }
  return std::log(static_cast<double>(iteration + 1)) /
         std::log(static_cast<double>(warmup_steps_));
}

double LrSchedule::LrAt(int64_t iteration) const {
  HOIST_CHECK_GE(iteration, -1) << "LrAt takes DeepSpeed's last_batch_iteration, -1 or more";
  const double base_lr = params_.base_lr;
  switch (kind_) {
    case Kind::kConstant: return base_lr;
    case Kind::kWarmup:
    case Kind::kWarmupDecay: {
      if (iteration < 0) return min_lr_;
      double gamma;
      if (iteration < warmup_steps_) {
        gamma = WarmupGamma(iteration);
      } else if (kind_ == Kind::kWarmup) {
        gamma = 1.0;
      } else {
        const double decay_steps =
            std::max<double>(1.0, static_cast<double>(params_.total_num_steps - warmup_steps_));
        gamma =
            std::max(0.0, static_cast<double>(params_.total_num_steps - iteration) / decay_steps);
      }
      return min_lr_ + (max_lr_ - min_lr_) * gamma;
    }
    case Kind::kWarmupCosine: {
      if (iteration < 0) return 0.0;
      if (iteration < warmup_steps_) {
        const double min_ratio = params_.warmup_min_ratio;
        return base_lr * (min_ratio + (1.0 - min_ratio) * WarmupGamma(iteration));
      }
      const double decay_steps =
          std::max<double>(1.0, static_cast<double>(params_.total_num_steps - warmup_steps_));
      const double progress =
          std::min(1.0, static_cast<double>(iteration - warmup_steps_ + 1) / decay_steps);
      const double floor = params_.cos_min_ratio;
      const double ratio =
          std::max(0.0, floor + (1.0 - floor) * (1.0 + std::cos(std::numbers::pi * progress)) / 2);
      return base_lr * ratio;
    }
  }
  HOIST_CHECK(false) << "unhandled schedule kind";
  return 0.0;
}

}  // namespace hoist::runtime
