#include "runtime/config/config_deepspeed.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "runtime/config/config_deepspeed_keys.h"

namespace hoist::runtime::config_internal {
namespace {

std::string Unsupported(std::string_view what) {
  return "this build does not support " + std::string(what) + " yet";
}

std::string IgnoredNotice(const Section& s, std::string_view key) {
  return s.PathOf(key) + ": a DeepSpeed setting that hoist does not act on yet; ignored";
}

std::string Num(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// A boolean key whose non-default value asks for a feature hoist lacks: the default is
// accepted (hoist does what it says), the other value is Unimplemented.
Status RequireBool(const Section& s, std::string_view key, bool supported, std::string_view what) {
  bool value = supported;
  HOIST_RETURN_IF_ERROR(s.Bool(key, &value));
  if (value == supported) return Status::Ok();
  return s.errors().Unimplemented(
      s.PathOf(key),
      Unsupported(what) + "; set it to " + (supported ? "true" : "false") + " or remove it");
}

// ---- fp16 / bf16 ----

Status ReadFp16(const Section& top, Fp16Config* fp16, std::vector<std::string>* notices) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("fp16"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"enabled", "auto_cast", "loss_scale", "initial_scale_power",
                                     "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                                     "min_loss_scale", "fp16_master_weights_and_grads"}));
  HOIST_RETURN_IF_ERROR(s.Bool("enabled", &fp16->enabled));
  HOIST_RETURN_IF_ERROR(s.Float("loss_scale", &fp16->loss_scale));
  HOIST_RETURN_IF_ERROR(s.Int("initial_scale_power", &fp16->initial_scale_power));
  HOIST_RETURN_IF_ERROR(s.Int("loss_scale_window", &fp16->loss_scale_window));
  HOIST_RETURN_IF_ERROR(s.Int("hysteresis", &fp16->hysteresis));
  HOIST_RETURN_IF_ERROR(s.Bool("consecutive_hysteresis", &fp16->consecutive_hysteresis));
  HOIST_RETURN_IF_ERROR(s.Float("min_loss_scale", &fp16->min_loss_scale));
  // DeepSpeed refuses a negative loss_scale whether or not fp16 is enabled.
  if (!(fp16->loss_scale >= 0)) {
    return s.Invalid("loss_scale",
                     "must be >= 0 (0: dynamic loss scaling, > 0: a static scale), "
                     "found " +
                         Num(fp16->loss_scale));
  }
  // fp16 master weights change what the optimizer computes (and need DeepSpeedCPUAdam there).
  HOIST_RETURN_IF_ERROR(
      RequireBool(s, "fp16_master_weights_and_grads", false, "fp16 master weights"));
  // auto_cast casts the floating-point inputs of the model's forward to fp16. hoist's model
  // takes token ids, which DeepSpeed's auto_cast leaves alone too, so true changes nothing.
  bool auto_cast = false;
  HOIST_RETURN_IF_ERROR(s.Bool("auto_cast", &auto_cast));
  if (!fp16->enabled) return Status::Ok();
  if (auto_cast) {
    notices->push_back(s.PathOf("auto_cast") +
                       ": casts floating-point model inputs to fp16; hoist's model takes token "
                       "ids, so there is nothing to cast; ignored");
  }
  if (fp16->loss_scale > 0) return Status::Ok();
  // The dynamic scaler's arguments, validated as DeepSpeed validates them when it builds one.
  if (fp16->initial_scale_power < -126 || fp16->initial_scale_power > 127) {
    return s.Invalid("initial_scale_power",
                     "must be in [-126, 127] so that the initial scale 2^initial_scale_power is a "
                     "normal float, found " +
                         std::to_string(fp16->initial_scale_power));
  }
  if (fp16->loss_scale_window <= 0) {
    return s.Invalid("loss_scale_window",
                     "must be > 0 (the clean steps before the scale doubles), found " +
                         std::to_string(fp16->loss_scale_window));
  }
  if (fp16->hysteresis < 1) {
    return s.Invalid("hysteresis", "must be >= 1 (1: halve the scale on every overflow), found " +
                                       std::to_string(fp16->hysteresis));
  }
  if (!(fp16->min_loss_scale > 0)) {
    return s.Invalid("min_loss_scale", "must be > 0, found " + Num(fp16->min_loss_scale));
  }
  return Status::Ok();
}

// Reads the bf16 section found at `key` ("bf16" or the legacy "bfloat16").
Status ReadBf16(const Section& top, std::string_view key, Bf16Config* bf16,
                std::vector<std::string>* notices) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child(key));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"enabled", "immediate_grad_update", "check_grad_overflow",
                                     "bf16_master_weights_and_grads", "bf16_optimizer_states"}));
  HOIST_RETURN_IF_ERROR(s.Bool("enabled", &bf16->enabled));
  // 16-bit master weights and optimizer states change what the optimizer computes.
  HOIST_RETURN_IF_ERROR(
      RequireBool(s, "bf16_master_weights_and_grads", false, "bf16 master weights"));
  HOIST_RETURN_IF_ERROR(RequireBool(s, "bf16_optimizer_states", false, "bf16 optimizer states"));
  // hoist checks bf16 gradients for inf/NaN and skips such steps (DeepSpeed's default since
  // 0.17.1); stepping on non-finite gradients is not offered.
  HOIST_RETURN_IF_ERROR(
      RequireBool(s, "check_grad_overflow", true, "bf16 steps without the inf/NaN gradient check"));
  // When the bf16 gradient of a micro-batch is added to the fp32 accumulator (in a backward hook
  // or after backward) does not change the sum.
  bool immediate = false;
  HOIST_RETURN_IF_ERROR(s.Bool("immediate_grad_update", &immediate));
  if (s.Find("immediate_grad_update") != nullptr && bf16->enabled) {
    notices->push_back(IgnoredNotice(s, "immediate_grad_update"));
  }
  return Status::Ok();
}

Status ReadCommunicationDataType(const Section& top, Config* config) {
  config->communication_data_type = config->precision();
  if (!top.Has("communication_data_type")) return Status::Ok();
  std::string dtype;
  HOIST_RETURN_IF_ERROR(top.String("communication_data_type", &dtype));
  const std::string lower = Lower(dtype);
  if (lower == "fp32") {
    config->communication_data_type = DType::kFloat32;
  } else if (lower == "fp16") {
    config->communication_data_type = DType::kFloat16;
  } else if (lower == "bf16") {
    config->communication_data_type = DType::kBFloat16;
  } else {
    std::string message =
        "must be \"fp32\", \"fp16\" or \"bf16\" (or unset: the compute "
        "precision), found \"" +
        dtype + "\"";
    std::string_view guess = ClosestMatch(lower, {"fp32", "fp16", "bf16"});
    if (!guess.empty()) message += "; did you mean \"" + std::string(guess) + "\"?";
    return top.Invalid("communication_data_type", message);
  }
  return Status::Ok();
}

// ---- zero_optimization ----

// ---- offload_optimizer / offload_param ----

// Reads `device` of an offload section: DeepSpeed's spellings, matched exactly as DeepSpeed
// matches them.
Status ReadOffloadDevice(const Section& s, Placement* device) {
  std::string name = OffloadDeviceName(*device);
  HOIST_RETURN_IF_ERROR(s.String("device", &name));
  for (Placement d : kPlacements) {
    if (name == OffloadDeviceName(d)) {
      *device = d;
      return Status::Ok();
    }
  }
  std::string message = "must be \"none\", \"cpu\" or \"nvme\", found \"" + name + "\"";
  std::string_view guess = ClosestMatch(Lower(name), {"none", "cpu", "nvme"});
  if (!guess.empty()) message += "; did you mean \"" + std::string(guess) + "\"?";
  return s.Invalid("device", message);
}

// nvme keeps the states in scratch files, which need a directory to live in.
Status CheckNvmePath(const Section& s, Placement device, const std::string& nvme_path) {
  if (device != Placement::kNvme || !nvme_path.empty()) return Status::Ok();
  return s.Invalid("nvme_path",
                   "must name a directory when device is \"nvme\": the offloaded states live in "
                   "scratch files there; set it to a directory on a local NVMe drive");
}

// A count of at least 1 under `key`.
Status ReadCount(const Section& s, std::string_view key, std::string_view what, int64_t* out) {
  HOIST_RETURN_IF_ERROR(s.Int(key, out));
  if (*out < 1) {
    return s.Invalid(key,
                     "must be >= 1 (" + std::string(what) + "), found " + std::to_string(*out));
  }
  return Status::Ok();
}

// A tunable of `s` (core/tunables.h) by its key or DeepSpeed's other spelling, in its range.
Status ReadTunable(const Section& s, const Tunable& tunable, int64_t* out) {
  const std::string_view key = tunable.key;
  const std::string_view alias = tunable.alias == nullptr ? "" : tunable.alias;
  if (!alias.empty() && s.Has(key) && s.Has(alias)) {
    return s.Invalid(alias, "is the same setting as " + s.PathOf(key) + "; set only one of them");
  }
  const std::string_view name = !alias.empty() && s.Has(alias) ? alias : key;
  HOIST_RETURN_IF_ERROR(s.Int(name, out));
  if (*out < tunable.min || *out > kMaxTunable) {
    // Counts of elements say their range; counts of buffers what they count.
    const std::string rule =
        tunable.elements
            ? "must be in [" + std::to_string(tunable.min) + ", 2^48] (a count of elements)"
            : "must be >= " + std::to_string(tunable.min) + " and <= 2^48 (" + tunable.what + ")";
    return s.Invalid(name, rule + ", found " + std::to_string(*out));
  }
  return Status::Ok();
}

// `enabled_by` names the key that asked for offloading (the section's device, or the legacy
// cpu_offload), so that the stage error points at what the user wrote.
Status ReadOffloadOptimizer(const Section& zero, int stage, std::string_view enabled_by,
                            OffloadOptimizerConfig* opt, std::vector<std::string>* notices) {
  HOIST_ASSIGN_OR_RETURN(Section s, zero.Child("offload_optimizer"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly(
      {"device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read", "pipeline_write",
       "fast_init", "ratio", "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"}));
  HOIST_RETURN_IF_ERROR(ReadOffloadDevice(s, &opt->device));
  HOIST_RETURN_IF_ERROR(s.String("nvme_path", &opt->nvme_path));
  HOIST_RETURN_IF_ERROR(ReadTunable(s, tunables::kOptimizerBufferCount, &opt->buffer_count));
  HOIST_RETURN_IF_ERROR(s.Bool("pin_memory", &opt->pin_memory));
  HOIST_RETURN_IF_ERROR(s.Bool("fast_init", &opt->fast_init));
  if (s.Has("fast_init")) {
    // DeepSpeed's fast_init changes how its offloaded states are first set up, not their values.
    notices->push_back(s.PathOf("fast_init") +
                       ": tunes how DeepSpeed sets up its offloaded optimizer states at start-up; "
                       "hoist sets them up one way, with the same values, so it has no effect");
  }
  // DeepSpeed pipelines the NVMe swapper only when asked; hoist's swapper always does, as far as
  // buffer_count allows, which gives the same states either way.
  for (std::string_view key : {"pipeline_read", "pipeline_write"}) {
    bool pipeline = false;
    HOIST_RETURN_IF_ERROR(s.Bool(key, &pipeline));
    if (s.Has(key)) {
      notices->push_back(s.PathOf(key) +
                         ": hoist always overlaps reading, updating and writing sub-groups when "
                         "buffer_count allows, so this key has no effect");
    }
  }
  // A ratio below 1 keeps the optimizer states of the leading units on the accelerator and
  // updates them there (ZeRO-Offload++'s partial offload; hoist splits at a unit boundary). hoist
  // allows it at stages 1-3 (DeepSpeed at 3 only), to host memory only.
  HOIST_RETURN_IF_ERROR(s.Double("ratio", &opt->ratio));
  if (!(opt->ratio > 0 && opt->ratio <= 1)) {
    return s.Invalid(
        "ratio",
        "must be in (0, 1] (the fraction of the optimizer offloaded), found " + Num(opt->ratio));
  }
  if (opt->ratio < 1 && opt->device == Placement::kNvme) {
    return zero.errors().Unimplemented(
        s.PathOf("ratio"),
        "a partial offload (ratio < 1) to nvme is not supported; set ratio to 1, or device to "
        "\"cpu\"");
  }
  HOIST_RETURN_IF_ERROR(RequireBool(s, "super_offload", false, "SuperOffload"));
  // Where the gradients are converted to fp32 and how many cores DeepSpeedCPUAdam takes: the
  // step computes the same numbers either way.
  bool convert = false;
  HOIST_RETURN_IF_ERROR(s.Bool("convert_grad_on_cpu", &convert));
  if (s.Has("convert_grad_on_cpu")) notices->push_back(IgnoredNotice(s, "convert_grad_on_cpu"));
  double cores = 1.0;
  HOIST_RETURN_IF_ERROR(s.Double("cpuadam_cores_perc", &cores));
  if (!(cores > 0 && cores <= 1)) {
    return s.Invalid("cpuadam_cores_perc",
                     "must be in (0, 1] (a fraction of the cores), found " + Num(cores));
  }
  if (s.Has("cpuadam_cores_perc")) {
    notices->push_back(s.PathOf("cpuadam_cores_perc") +
                       ": hoist's CPU optimizer step uses OMP_NUM_THREADS threads, not a share "
                       "of the cores; ignored");
  }
  HOIST_RETURN_IF_ERROR(CheckNvmePath(s, opt->device, opt->nvme_path));
  if (opt->device != Placement::kDevice && stage == 0) {
    return zero.errors().Invalid(
        enabled_by,
        "offloading the optimizer needs ZeRO stage 1, 2 or 3 (as in DeepSpeed), but "
        "zero_optimization.stage is 0; set zero_optimization.stage");
  }
  return Status::Ok();
}

Status ReadOffloadParam(const Section& zero, int stage, std::string_view enabled_by,
                        OffloadParamConfig* param) {
  HOIST_ASSIGN_OR_RETURN(Section s, zero.Child("offload_param"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly(
      {"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"}));
  HOIST_RETURN_IF_ERROR(ReadOffloadDevice(s, &param->device));
  HOIST_RETURN_IF_ERROR(s.String("nvme_path", &param->nvme_path));
  HOIST_RETURN_IF_ERROR(ReadTunable(s, tunables::kParamBufferCount, &param->buffer_count));
  HOIST_RETURN_IF_ERROR(ReadTunable(s, tunables::kParamBufferSize, &param->buffer_size));
  HOIST_RETURN_IF_ERROR(ReadTunable(s, tunables::kParamMaxInCpu, &param->max_in_cpu));
  HOIST_RETURN_IF_ERROR(s.Bool("pin_memory", &param->pin_memory));
  HOIST_RETURN_IF_ERROR(CheckNvmePath(s, param->device, param->nvme_path));
  if (param->device != Placement::kDevice && stage < 3) {
    return zero.errors().Invalid(
        enabled_by,
        "offloading parameters needs ZeRO stage 3 (as in DeepSpeed), but zero_optimization.stage "
        "is " +
            std::to_string(stage) + "; set zero_optimization.stage to 3");
  }
  return Status::Ok();
}

// The legacy spellings `cpu_offload: true` and `cpu_offload_param: true` (device cpu) and
// `cpu_offload_use_pin_memory` (pin_memory of both sections), then the sections themselves.
Status ReadOffload(const Section& s, ZeroConfig* zero, std::vector<std::string>* notices) {
  struct Legacy {
    std::string_view key;
    std::string_view section;
    Placement* device;
  };
  const Legacy legacy[] = {
      {"cpu_offload", "offload_optimizer", &zero->offload_optimizer.device},
      {"cpu_offload_param", "offload_param", &zero->offload_param.device},
  };
  std::string enabled_by[2];
  for (int i = 0; i < 2; ++i) {
    const Legacy& l = legacy[i];
    bool on = false;
    HOIST_RETURN_IF_ERROR(s.Bool(l.key, &on));
    enabled_by[i] = JoinPath(s.PathOf(l.section), "device");
    if (!on) continue;
    if (s.Has(l.section)) {
      return s.Invalid(l.key, "is the legacy spelling of " + s.PathOf(l.section) +
                                  ".device \"cpu\", and " + s.PathOf(l.section) +
                                  " is also set; set only one of them");
    }
    *l.device = Placement::kHost;
    enabled_by[i] = s.PathOf(l.key);
  }
  if (s.Has("cpu_offload_use_pin_memory")) {
    bool pin = true;
    HOIST_RETURN_IF_ERROR(s.Bool("cpu_offload_use_pin_memory", &pin));
    for (std::string_view section : {"offload_optimizer", "offload_param"}) {
      HOIST_ASSIGN_OR_RETURN(Section child, s.Child(section));
      if (child.Has("pin_memory")) {
        return s.Invalid("cpu_offload_use_pin_memory",
                         "is the legacy spelling of " + child.PathOf("pin_memory") +
                             ", which is also set; set only one of them");
      }
    }
    zero->offload_optimizer.pin_memory = pin;
    zero->offload_param.pin_memory = pin;
  }
  HOIST_RETURN_IF_ERROR(
      ReadOffloadOptimizer(s, zero->stage, enabled_by[0], &zero->offload_optimizer, notices));
  return ReadOffloadParam(s, zero->stage, enabled_by[1], &zero->offload_param);
}

}  // namespace

Status ReadPrecision(const Section& top, Config* config, std::vector<std::string>* notices) {
  HOIST_RETURN_IF_ERROR(ReadFp16(top, &config->fp16, notices));
  // DeepSpeed reads `bf16` and falls back to `bfloat16`; both present is ambiguous.
  if (top.Has("bf16") && top.Has("bfloat16")) {
    return top.Invalid("bfloat16", "is the legacy name of bf16, which is also set; keep only bf16");
  }
  const std::string_view bf16_key = top.Has("bfloat16") ? "bfloat16" : "bf16";
  HOIST_RETURN_IF_ERROR(ReadBf16(top, bf16_key, &config->bf16, notices));
  if (config->fp16.enabled && config->bf16.enabled) {
    return top.Invalid(std::string(bf16_key) + ".enabled",
                       "fp16.enabled and " + std::string(bf16_key) +
                           ".enabled are both true; enable at most one of them (DeepSpeed "
                           "refuses this too)");
  }
  return ReadCommunicationDataType(top, config);
}

Status ReadZero(const Section& top, ZeroConfig* zero, std::vector<std::string>* notices) {
  const nlohmann::json* value = top.Find("zero_optimization");
  // The legacy spelling `"zero_optimization": true` means stage 1, false stage 0.
  if (value != nullptr && value->is_boolean()) {
    zero->stage = value->get<bool>() ? 1 : 0;
    // DeepSpeed reads it too, with this deprecation warning.
    notices->push_back(top.PathOf("zero_optimization") + ": " +
                       (value->get<bool>() ? "true" : "false") +
                       " is the deprecated format of the ZeRO setup (DeepSpeed warns "
                       "\"this format of ZeRO optimization setup is deprecated\"); read as "
                       "stage " +
                       std::to_string(zero->stage) +
                       "; write {\"stage\": " + std::to_string(zero->stage) + "} instead");
    return Status::Ok();
  }
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("zero_optimization"));
  std::vector<std::string_view> allowed = {
      "stage",
      "contiguous_gradients",
      "reduce_scatter",
      "overlap_comm",
      "reduce_bucket_size",
      "allgather_bucket_size",
      "stage3_prefetch_bucket_size",
      "prefetch_bucket_size",
      "stage3_param_persistence_threshold",
      "param_persistence_threshold",
      "stage3_max_live_parameters",
      "max_live_parameters",
      "offload_optimizer",
      "offload_param",
      "cpu_offload",
      "cpu_offload_param",
      "cpu_offload_use_pin_memory",
      "sub_group_size",
      "load_from_fp32_weights",
      "zero_hpz_partition_size",
      "zero_quantized_weights",
      "zero_quantized_nontrainable_weights",
      "zero_quantized_gradients",
      "mics_shard_size",
      "zenflow",
  };
  const std::vector<std::string_view>& notice_keys = ZeroNoticeKeys();
  allowed.insert(allowed.end(), notice_keys.begin(), notice_keys.end());
  HOIST_RETURN_IF_ERROR(s.AllowOnly(allowed));

  HOIST_RETURN_IF_ERROR(s.Int("stage", &zero->stage));
  if (zero->stage < 0 || zero->stage > 3) {
    return s.Invalid("stage", "must be 0, 1, 2 or 3, found " + std::to_string(zero->stage));
  }
  HOIST_RETURN_IF_ERROR(s.Bool("contiguous_gradients", &zero->contiguous_gradients));
  if (s.Has("contiguous_gradients")) {
    notices->push_back(s.PathOf("contiguous_gradients") +
                       ": DeepSpeed copies each gradient into a contiguous buffer as backward "
                       "produces it; hoist's gradients always live in contiguous buckets and "
                       "shards, so true and false behave the same; no effect");
  }
  HOIST_RETURN_IF_ERROR(s.Bool("reduce_scatter", &zero->reduce_scatter));
  zero->overlap_comm = zero->stage == 3;
  HOIST_RETURN_IF_ERROR(s.Bool("overlap_comm", &zero->overlap_comm));
  HOIST_RETURN_IF_ERROR(ReadTunable(s, tunables::kReduceBucketSize, &zero->reduce_bucket_size));
  HOIST_RETURN_IF_ERROR(
      ReadTunable(s, tunables::kAllgatherBucketSize, &zero->allgather_bucket_size));
  // DeepSpeed allows 0 for these: no prefetching, every parameter partitioned, nothing kept
  // gathered beyond the module in use.
  HOIST_RETURN_IF_ERROR(
      ReadTunable(s, tunables::kPrefetchBucketSize, &zero->stage3_prefetch_bucket_size));
  HOIST_RETURN_IF_ERROR(ReadTunable(s, tunables::kParamPersistenceThreshold,
                                    &zero->stage3_param_persistence_threshold));
  HOIST_RETURN_IF_ERROR(
      ReadTunable(s, tunables::kMaxLiveParameters, &zero->stage3_max_live_parameters));

  // Adam is elementwise, so the sub-group size changes how much of the shard is in flight at
  // once (memory, and the NVMe swapper's reads), not the step's numbers.
  HOIST_RETURN_IF_ERROR(ReadTunable(s, tunables::kSubGroupSize, &zero->sub_group_size));
  HOIST_RETURN_IF_ERROR(ReadOffload(s, zero, notices));

  // Features that change the numbers trained on: quantised weights or gradients (ZeRO++), fp32
  // master weights rebuilt from 16-bit copies on load, ZenFlow's deferred updates.
  HOIST_RETURN_IF_ERROR(
      RequireBool(s, "zero_quantized_weights", false, "quantised weight communication (ZeRO++)"));
  HOIST_RETURN_IF_ERROR(RequireBool(s, "zero_quantized_nontrainable_weights", false,
                                    "quantised non-trainable weights (ZeRO++)"));
  HOIST_RETURN_IF_ERROR(RequireBool(s, "zero_quantized_gradients", false,
                                    "quantised gradient communication (ZeRO++)"));
  HOIST_RETURN_IF_ERROR(RequireBool(s, "load_from_fp32_weights", true,
                                    "rebuilding fp32 master weights from 16-bit ones on load"));
  if (s.Has("zenflow")) {
    return s.errors().Unimplemented(s.PathOf("zenflow"),
                                    Unsupported("ZenFlow") + "; remove the section");
  }
  // Other partitioning layouts: they keep the math but change what each rank holds, which is
  // what a user of them plans memory around.
  int64_t hpz = 1;
  HOIST_RETURN_IF_ERROR(s.Int("zero_hpz_partition_size", &hpz));
  if (hpz > 1) {
    return s.errors().Unimplemented(
        s.PathOf("zero_hpz_partition_size"),
        Unsupported("hierarchical partitioning (ZeRO++ hpZ)") + "; set it to 1 or remove it");
  }
  if (hpz < 0) {
    return s.Invalid("zero_hpz_partition_size", "must be >= 0, found " + std::to_string(hpz));
  }
  int64_t mics = -1;
  HOIST_RETURN_IF_ERROR(s.Int("mics_shard_size", &mics));
  if (mics > 0) {
    return s.errors().Unimplemented(s.PathOf("mics_shard_size"),
                                    Unsupported("MiCS sharding") + "; set it to -1 or remove it");
  }

  return CheckZeroNoticeKeys(s, notices);
}

Status ReadAio(const Section& top, AioConfig* aio, std::vector<std::string>* notices) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("aio"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"block_size", "queue_depth", "intra_op_parallelism",
                                     "single_submit", "overlap_events", "use_gds"}));
  HOIST_RETURN_IF_ERROR(s.Int("block_size", &aio->block_size));
  // The scratch files are opened with O_DIRECT, whose transfers must be aligned to the logical
  // block size; 4096 covers every drive in use.
  if (aio->block_size <= 0 || aio->block_size % 4096 != 0) {
    return s.Invalid("block_size",
                     "must be a positive multiple of 4096 bytes (O_DIRECT reads and writes "
                     "aligned blocks), found " +
                         std::to_string(aio->block_size));
  }
  HOIST_RETURN_IF_ERROR(s.Int("queue_depth", &aio->queue_depth));
  if (aio->queue_depth < 1 || aio->queue_depth > 4096) {
    return s.Invalid("queue_depth", "must be in [1, 4096] (requests in flight), found " +
                                        std::to_string(aio->queue_depth));
  }
  HOIST_RETURN_IF_ERROR(
      ReadCount(s, "intra_op_parallelism", "I/O threads", &aio->intra_op_parallelism));
  HOIST_RETURN_IF_ERROR(s.Bool("single_submit", &aio->single_submit));
  HOIST_RETURN_IF_ERROR(s.Bool("overlap_events", &aio->overlap_events));
  // DeepSpeed's libaio handle splits each request over threads and submits from them; one
  // io_uring queue has no such threads, so these are checked but change nothing.
  for (std::string_view key : {"intra_op_parallelism", "single_submit", "overlap_events"}) {
    if (s.Has(key)) {
      notices->push_back(s.PathOf(key) +
                         ": tunes DeepSpeed's libaio threads, which hoist's io_uring queue has no "
                         "counterpart for; no effect");
    }
  }
  return RequireBool(s, "use_gds", false, "GPUDirect Storage");
}

Status ReadActivationCheckpointing(const Section& top, ActivationCheckpointingConfig* ac,
                                   std::vector<std::string>* notices) {
  if (!top.Has("activation_checkpointing")) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("activation_checkpointing"));
  HOIST_RETURN_IF_ERROR(
      s.AllowOnly({"policy", "every_k", "partition_activations", "cpu_checkpointing",
                   "contiguous_memory_optimization", "number_checkpoints",
                   "synchronize_checkpoint_boundary", "profile"}));
  // The section asks for checkpointing; DeepSpeed leaves the choice of blocks to the model code,
  // hoist to `policy`, which defaults to every block.
  std::string policy = "full";
  HOIST_RETURN_IF_ERROR(s.String("policy", &policy));
  if (!s.Has("policy")) {
    notices->push_back(s.PathOf("policy") +
                       ": not set; every transformer block is checkpointed (\"full\"); set it "
                       "to \"selective\", \"every_k\" or \"none\" to recompute less");
  }
  const std::string lower = Lower(policy);
  bool found = false;
  for (CheckpointPolicy p : {CheckpointPolicy::kNone, CheckpointPolicy::kFull,
                             CheckpointPolicy::kEveryK, CheckpointPolicy::kSelective}) {
    if (lower == CheckpointPolicyName(p)) {
      ac->policy = p;
      found = true;
    }
  }
  if (!found) {
    std::string message =
        "must be \"none\", \"full\", \"every_k\" or \"selective\", found \"" + policy + "\"";
    std::string_view guess = ClosestMatch(lower, {"none", "full", "every_k", "selective"});
    if (!guess.empty()) message += "; did you mean \"" + std::string(guess) + "\"?";
    return s.Invalid("policy", message);
  }
  HOIST_RETURN_IF_ERROR(s.Int("every_k", &ac->every_k));
  if (ac->every_k < 1) {
    return s.Invalid("every_k", "must be >= 1 (one block in every_k is checkpointed), found " +
                                    std::to_string(ac->every_k));
  }
  if (s.Has("every_k") && ac->policy != CheckpointPolicy::kEveryK) {
    return s.Invalid("every_k", "is only read with policy \"every_k\", but policy is \"" +
                                    std::string(CheckpointPolicyName(ac->policy)) +
                                    "\"; set policy to \"every_k\" or remove every_k");
  }
  HOIST_RETURN_IF_ERROR(s.Bool("cpu_checkpointing", &ac->cpu_checkpointing));
  HOIST_RETURN_IF_ERROR(s.Bool("partition_activations", &ac->partition_activations));
  HOIST_RETURN_IF_ERROR(
      s.Bool("contiguous_memory_optimization", &ac->contiguous_memory_optimization));
  HOIST_RETURN_IF_ERROR(
      s.Bool("synchronize_checkpoint_boundary", &ac->synchronize_checkpoint_boundary));
  HOIST_RETURN_IF_ERROR(s.Bool("profile", &ac->profile));
  HOIST_RETURN_IF_ERROR(s.Int("number_checkpoints", &ac->number_checkpoints));
  if (s.Has("number_checkpoints") && ac->number_checkpoints < 1) {
    return s.Invalid("number_checkpoints", "must be >= 1 (or null: not set), found " +
                                               std::to_string(ac->number_checkpoints));
  }
  if (ac->cpu_checkpointing && !ac->enabled()) {
    return s.Invalid("cpu_checkpointing",
                     "keeps checkpointed block inputs in pinned host memory, but policy is "
                     "\"none\", so nothing is checkpointed; choose a policy or set it to false");
  }
  if (ac->partition_activations) {
    notices->push_back(s.PathOf("partition_activations") +
                       ": splits checkpointed activations across model-parallel ranks; hoist "
                       "has no model parallelism, so it has no effect");
  }
  if (ac->contiguous_memory_optimization) {
    notices->push_back(s.PathOf("contiguous_memory_optimization") +
                       ": hoist always keeps the checkpointed inputs in one buffer allocated "
                       "once; no effect");
  }
  if (s.Has("number_checkpoints")) {
    notices->push_back(s.PathOf("number_checkpoints") +
                       ": sizes DeepSpeed's contiguous checkpoint buffer; hoist sizes its buffer "
                       "from the policy and the model; no effect");
  }
  if (ac->synchronize_checkpoint_boundary) {
    notices->push_back(s.PathOf("synchronize_checkpoint_boundary") +
                       ": synchronizes the device at each checkpoint boundary; hoist's CPU "
                       "kernels finish before the next op starts, so it has no effect");
  }
  return Status::Ok();
}

}  // namespace hoist::runtime::config_internal
