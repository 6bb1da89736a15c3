#include "runtime/config/config_optimizer.h"

#include <cctype>
#include <sstream>

#include "runtime/config/config_deepspeed_keys.h"

namespace hoist::runtime::config_internal {
namespace {

// Every built-in optimizer name of DeepSpeed other than Adam and AdamW, lower-cased.
constexpr std::string_view kDeepSpeedOptimizers[] = {
    "adagrad", "lamb",  "onebitadam", "zerooneadam", "onebitlamb", "muadam",
    "muadamw", "musgd", "lion",       "muon",        "sgd",
};

std::string Num(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// `text` matched case-insensitively against `canonical`; "" when none matches.
std::string Canonical(std::string_view text, const std::vector<std::string_view>& canonical) {
  for (std::string_view name : canonical) {
    if (Lower(name) == Lower(text)) return std::string(name);
  }
  return "";
}

// DeepSpeed's WarmupDecayLR signature default for warmup_max_lr.
constexpr float kWarmupDecayDefaultMaxLr = 0.001f;

}  // namespace

Status ReadOptimizer(const Section& top, OptimizerConfig* opt, std::vector<std::string>* notices) {
  if (!top.Has("optimizer")) {
    // DeepSpeed would train with what the script passes to deepspeed.initialize.
    notices->push_back(
        "optimizer: not set; DeepSpeed would train with the optimizer the training script "
        "passes, and hoist has none: training AdamW with lr 0.001, betas [0.9, 0.999], eps 1e-08 "
        "and weight_decay 0 (the defaults of DeepSpeed's Adam); set the optimizer section to "
        "choose");
  }
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("optimizer"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"type", "params"}));
  if (top.Has("optimizer") && !s.Has("type")) {
    // DeepSpeed builds an optimizer from the section only when it names a type; without one it
    // trains with the script's optimizer, which hoist does not have.
    notices->push_back(s.PathOf("type") +
                       ": not set; DeepSpeed builds no optimizer from a section without a type "
                       "(it would train with the optimizer the training script passes), and "
                       "hoist trains AdamW with these params; set it to \"AdamW\" to say so");
  }
  std::string type = opt->type;
  HOIST_RETURN_IF_ERROR(s.String("type", &type));
  opt->type = Canonical(type, {"AdamW", "Adam", "AdamW8bit"});
  if (!Canonical(type, {"adamw_8bit", "adamw_bnb_8bit"}).empty()) opt->type = "AdamW8bit";
  const bool eight_bit = opt->type == "AdamW8bit";
  if (opt->type.empty()) {
    const std::string lower = Lower(type);
    for (std::string_view known : kDeepSpeedOptimizers) {
      if (known == lower) {
        return s.errors().Unimplemented(s.PathOf("type"),
                                        MissingFeature("the \"" + type + "\" optimizer") +
                                            "; use \"AdamW\", \"Adam\" (which is AdamW) or "
                                            "\"AdamW8bit\"");
      }
    }
    std::string message = "unknown optimizer \"" + type + "\"";
    std::string_view guess = ClosestMatch(type, {"AdamW", "Adam", "AdamW8bit"});
    if (!guess.empty()) message += "; did you mean \"" + std::string(guess) + "\"?";
    return s.Invalid("type", message +
                                 " hoist supports \"AdamW\", \"Adam\" (which is AdamW) and "
                                 "\"AdamW8bit\" (bitsandbytes' 8-bit AdamW)");
  }

  HOIST_ASSIGN_OR_RETURN(Section p, s.Child("params"));
  std::vector<std::string_view> allowed = {"lr",           "betas",       "eps",
                                           "weight_decay", "adam_w_mode", "bias_correction",
                                           "amsgrad",      "torch_adam",  "max_grad_norm"};
  if (eight_bit) allowed.push_back("min_8bit_size");
  const auto& one_bit = config_internal::OneBitOptimizerParams();
  allowed.insert(allowed.end(), one_bit.begin(), one_bit.end());
  HOIST_RETURN_IF_ERROR(p.AllowOnly(allowed));
  HOIST_RETURN_IF_ERROR(config_internal::RefuseOneBitOptimizerParams(p));
  if (p.Has("max_grad_norm")) {
    return p.Invalid("max_grad_norm",
                     "clipping is not an optimizer parameter; use the top-level "
                     "gradient_clipping instead (DeepSpeed refuses this key too)");
  }
  // DeepSpeed's Adam variants that change the update rule.
  struct Variant {
    std::string_view key;
    bool supported;
    std::string_view what;
  };
  for (const Variant& v : {Variant{"adam_w_mode", true, "Adam with L2 regularisation"},
                           Variant{"bias_correction", true, "Adam without bias correction"},
                           Variant{"amsgrad", false, "AMSGrad"}}) {
    bool value = v.supported;
    HOIST_RETURN_IF_ERROR(p.Bool(v.key, &value));
    if (value != v.supported) {
      return s.errors().Unimplemented(p.PathOf(v.key),
                                      "this build does not support " + std::string(v.what) +
                                          " yet; set it to " + (v.supported ? "true" : "false"));
    }
  }
  if (p.Find("torch_adam") != nullptr) {
    notices->push_back(p.PathOf("torch_adam") +
                       ": chooses a PyTorch implementation in DeepSpeed; hoist has its own; "
                       "ignored");
  }

  if (top.Has("optimizer") && !p.Has("lr")) {
    notices->push_back(p.PathOf("lr") + ": not set; " + Num(opt->lr) +
                       " (the default of DeepSpeed's Adam); set it to choose");
  }
  HOIST_RETURN_IF_ERROR(p.Float("lr", &opt->lr));
  HOIST_RETURN_IF_ERROR(p.FloatPair("betas", &opt->beta1, &opt->beta2));
  HOIST_RETURN_IF_ERROR(p.Float("eps", &opt->eps));
  HOIST_RETURN_IF_ERROR(p.Float("weight_decay", &opt->weight_decay));
  HOIST_RETURN_IF_ERROR(p.Int("min_8bit_size", &opt->min_8bit_size));
  if (opt->min_8bit_size < 0) {
    return p.Invalid("min_8bit_size", "must be >= 0, found " + Num(double(opt->min_8bit_size)));
  }
  if (!(opt->lr > 0)) return p.Invalid("lr", "must be > 0, found " + Num(opt->lr));
  const float betas[] = {opt->beta1, opt->beta2};
  for (int i = 0; i < 2; ++i) {
    if (!(betas[i] >= 0 && betas[i] < 1)) {
      return p.Invalid("betas[" + std::to_string(i) + "]",
                       "must be in [0, 1), found " + Num(betas[i]));
    }
  }
  if (!(opt->eps > 0)) return p.Invalid("eps", "must be > 0, found " + Num(opt->eps));
  if (!(opt->weight_decay >= 0)) {
    return p.Invalid("weight_decay", "must be >= 0, found " + Num(opt->weight_decay));
  }
  return Status::Ok();
}

Status ReadScheduler(const Section& top, const OptimizerConfig& opt, SchedulerConfig* sched,
                     std::vector<std::string>* notices) {
  if (!top.Has("scheduler")) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("scheduler"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"type", "params"}));
  const std::vector<std::string_view> kTypes = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  if (!s.Has("type")) {
    return s.Invalid("type",
                     "missing; set it to WarmupLR, WarmupDecayLR or WarmupCosineLR, or remove "
                     "the scheduler section for a constant learning rate");
  }
  std::string type;
  HOIST_RETURN_IF_ERROR(s.String("type", &type));
  sched->type = Canonical(type, kTypes);
  if (sched->type.empty()) {
    if (!Canonical(type, {"LRRangeTest", "OneCycle"}).empty()) {
      return s.errors().Unimplemented(s.PathOf("type"),
                                      MissingFeature("the \"" + type + "\" scheduler") +
                                          "; use WarmupLR, WarmupDecayLR or WarmupCosineLR");
    }
    std::string message = "unknown scheduler \"" + type + "\";";
    std::string_view guess = ClosestMatch(type, kTypes);
    if (!guess.empty()) message += " did you mean \"" + std::string(guess) + "\"?";
    return s.Invalid("type",
                     message + " hoist supports WarmupLR, WarmupDecayLR and WarmupCosineLR");
  }

  const bool cosine = sched->type == "WarmupCosineLR";
  const bool decays = sched->type != "WarmupLR";
  HOIST_ASSIGN_OR_RETURN(Section p, s.Child("params"));
  Status keys_ok;
  if (cosine) {
    keys_ok = p.AllowOnly({"total_num_steps", "warmup_min_ratio", "warmup_num_steps",
                           "cos_min_ratio", "warmup_type"});
  } else if (decays) {
    keys_ok = p.AllowOnly(
        {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps"});
  } else {
    keys_ok = p.AllowOnly({"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"});
  }
  // The usual cause is a parameter of another schedule type, so say which type was read.
  if (!keys_ok.ok()) {
    return Status(keys_ok.code(),
                  keys_ok.message() + " (the params of scheduler type " + sched->type + ")");
  }

  HOIST_RETURN_IF_ERROR(p.Int("warmup_num_steps", &sched->warmup_num_steps));
  if (sched->warmup_num_steps < 0) {
    return p.Invalid("warmup_num_steps",
                     "must be >= 0, found " + std::to_string(sched->warmup_num_steps));
  }
  HOIST_RETURN_IF_ERROR(p.String("warmup_type", &sched->warmup_type));
  if (sched->warmup_type != "log" && sched->warmup_type != "linear") {
    return p.Invalid("warmup_type",
                     "must be \"log\" or \"linear\", found \"" + sched->warmup_type + "\"");
  }
  if (decays) {
    if (!p.Has("total_num_steps")) {
      return p.Invalid("total_num_steps",
                       "must be set for " + sched->type + " (the step at which the decay ends)");
    }
    HOIST_RETURN_IF_ERROR(p.Int("total_num_steps", &sched->total_num_steps));
    if (sched->total_num_steps <= sched->warmup_num_steps) {
      return p.Invalid("total_num_steps", "must be > scheduler.params.warmup_num_steps (" +
                                              std::to_string(sched->warmup_num_steps) +
                                              "), found " + std::to_string(sched->total_num_steps));
    }
  }
  if (cosine) {
    HOIST_RETURN_IF_ERROR(p.Float("warmup_min_ratio", &sched->warmup_min_ratio));
    HOIST_RETURN_IF_ERROR(p.Float("cos_min_ratio", &sched->cos_min_ratio));
    for (std::string_view key : {"warmup_min_ratio", "cos_min_ratio"}) {
      float ratio = key == "cos_min_ratio" ? sched->cos_min_ratio : sched->warmup_min_ratio;
      if (!(ratio >= 0 && ratio <= 1)) {
        return p.Invalid(key, "must be in [0, 1], found " + Num(ratio));
      }
    }
    return Status::Ok();
  }
  HOIST_RETURN_IF_ERROR(p.Float("warmup_min_lr", &sched->warmup_min_lr));
  if (!(sched->warmup_min_lr >= 0)) {
    return p.Invalid("warmup_min_lr", "must be >= 0, found " + Num(sched->warmup_min_lr));
  }
  if (p.Has("warmup_max_lr")) {
    float max_lr = 0;
    HOIST_RETURN_IF_ERROR(p.Float("warmup_max_lr", &max_lr));
    if (!(max_lr > 0)) return p.Invalid("warmup_max_lr", "must be > 0, found " + Num(max_lr));
    if (max_lr < sched->warmup_min_lr) {
      return p.Invalid("warmup_max_lr", "must be >= scheduler.params.warmup_min_lr (" +
                                            Num(sched->warmup_min_lr) + "), found " + Num(max_lr));
    }
    sched->warmup_max_lr = max_lr;
    return Status::Ok();
  }
  // DeepSpeed's WarmupLR warms up to the optimizer's lr (older releases: to 0.001), its
  // WarmupDecayLR to 0.001 whatever the optimizer's lr: a quiet difference a user should see.
  const bool decay = sched->type == "WarmupDecayLR";
  const float end = decay ? kWarmupDecayDefaultMaxLr : opt.lr;
  const std::string end_text = decay ? "0.001 (DeepSpeed's default for WarmupDecayLR)"
                                     : "optimizer.params.lr (" + Num(opt.lr) + ")";
  if (sched->warmup_min_lr > end) {
    return p.Invalid("warmup_min_lr", "is " + Num(sched->warmup_min_lr) +
                                          ", above where the warmup ends: warmup_max_lr is not "
                                          "set, so it is " +
                                          end_text + "; set warmup_max_lr");
  }
  std::string notice =
      p.PathOf("warmup_max_lr") + ": not set; " + sched->type + " warms up to " + end_text;
  notice += decay ? ", not to optimizer.params.lr (" + Num(opt.lr) + ")"
                  : ", as current DeepSpeed does (older DeepSpeed releases warm up to 0.001)";
  notices->push_back(notice + "; set it to choose");
  return Status::Ok();
}

}  // namespace hoist::runtime::config_internal
