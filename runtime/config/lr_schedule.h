// Learning-rate schedules with the semantics of DeepSpeed's deepspeed/runtime/lr_schedules.py
// (WarmupLR, WarmupDecayLR, WarmupCosineLR) and a constant schedule. An LrSchedule is an
// immutable value: a pure function from the scheduler's iteration to the learning rate, so it
// needs no state in a checkpoint beyond the step counter. Safe to share between threads.
//
// DeepSpeed's formulas, with it = the scheduler's last_batch_iteration (it >= 0) and
// W = max(2, warmup_num_steps):
//   warmup gamma(it) = log(it + 1) / log(W)  ("log")   or   it / W  ("linear"),   it < W
//   WarmupLR:       lr = min_lr + (max_lr - min_lr) * (it < W ? gamma(it) : 1)
//   WarmupDecayLR:  same warmup; for it >= W the factor is max(0, (T - it) / max(1, T - W))
//   WarmupCosineLR: lr = base_lr * ratio; ratio = warmup_min_ratio + (1 - warmup_min_ratio) *
//                   gamma(it) for it < W; after it, with p = min(1, (it - W + 1) / max(1, T - W)),
//                   ratio = max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi p)) / 2)
// where T = total_num_steps. At it = -1 (before the scheduler's first step) DeepSpeed gives
// min_lr for WarmupLR/WarmupDecayLR and 0 for WarmupCosineLR; LrAt(-1) returns the same.
//
// Where hoist differs from DeepSpeed, on purpose:
//  - An unknown warmup_type is an error; DeepSpeed logs a warning and uses "log".
//  - Negative or non-finite learning rates and ratios outside [0, 1] are errors; DeepSpeed does
//    not check them.
//  - warmup_num_steps below 0 is an error; 0 and 1 are accepted and warm up over 2 steps, as
//    DeepSpeed's max(2, warmup_num_steps) does.
//  - total_num_steps must be positive for WarmupDecayLR and WarmupCosineLR (DeepSpeed requires
//    the argument but accepts any value).
// DeepSpeed facts kept as they are:
//  - WarmupDecayLR's warmup_max_lr defaults to 0.001, not to the optimizer's lr (its Python
//    signature overrides WarmupLR's None default); WarmupLR's defaults to the optimizer's lr.
//  - WarmupCosineLR clamps the cosine progress p at 1, so past total_num_steps the lr stays at
//    base_lr * cos_min_ratio (DeepSpeed releases before that clamp let it rise again).
//  - DeepSpeed's engine calls scheduler.step() after each optimizer step that was not skipped
//    for an fp16 overflow, so its k-th applied optimizer step (0-based) uses LrAt(k - 1). A
//    trainer that wants DeepSpeed's exact trajectory passes the number of applied steps minus
//    one; one that passes the step index itself runs one iteration ahead of DeepSpeed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace hoist::runtime {

// The scheduler section of the config (DeepSpeed's `scheduler: {type, params}`) plus the
// optimizer's lr. Field names are DeepSpeed's.
struct LrScheduleParams {
  std::string type;   // "" (constant base_lr), "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"
  float base_lr = 0;  // the optimizer's lr (optimizer.params.lr)
  float warmup_min_lr = 0;
  std::optional<float> warmup_max_lr;  // unset: base_lr (WarmupLR) or 0.001 (WarmupDecayLR)
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // "log" or "linear"
  int64_t total_num_steps = 0;      // WarmupDecayLR and WarmupCosineLR
  float warmup_min_ratio = 0;       // WarmupCosineLR
  float cos_min_ratio = 1e-4f;      // WarmupCosineLR
};

struct Config;
// The schedule `config` asks for (its scheduler section and optimizer.params.lr). ParseConfig
// validates it with Create, so that every command refuses a bad schedule alike, naming the file.
LrScheduleParams LrScheduleParamsOf(const Config& config);

class LrSchedule {
 public:
  // Validates `params`; an invalid field is InvalidArgument naming its config key path
  // (e.g. "scheduler.params.warmup_num_steps").
  static StatusOr<LrSchedule> Create(const LrScheduleParams& params);

  // The learning rate at DeepSpeed's last_batch_iteration = `iteration` (>= -1; see above for
  // how that maps onto optimizer steps). Computed in double.
  double LrAt(int64_t iteration) const;

  const LrScheduleParams& params() const { return params_; }

 private:
  enum class Kind { kConstant, kWarmup, kWarmupDecay, kWarmupCosine };

  LrSchedule(const LrScheduleParams& params, Kind kind);
  // The warmup fraction in [0, 1) for 0 <= iteration < warmup_steps_.
  double WarmupGamma(int64_t iteration) const;

  LrScheduleParams params_;
  Kind kind_;
  bool linear_warmup_;
  int64_t warmup_steps_;  // max(2, warmup_num_steps)
  double min_lr_;
  double max_lr_;
};

}  // namespace hoist::runtime
