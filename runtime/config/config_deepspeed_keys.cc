#include "runtime/config/config_deepspeed_keys.h"

#include <algorithm>
#include <span>

namespace hoist::runtime::config_internal {
namespace {

enum class Expect { kBool, kNumber, kCount, kString, kStrings, kObject };

// One key of an object that DeepSpeed reads with a pydantic model (extra keys forbidden), with
// the type the model declares.
struct Field {
  std::string_view key;
  Expect type;
};

// DeepSpeed's monitor configs (deepspeed/monitor/config.py) and its comms logger's
// (deepspeed/comm/config.py).
constexpr Field kTensorboardFields[] = {
    {"enabled", Expect::kBool}, {"output_path", Expect::kString}, {"job_name", Expect::kString}};
constexpr Field kWandbFields[] = {{"enabled", Expect::kBool},
                                  {"group", Expect::kString},
                                  {"team", Expect::kString},
                                  {"project", Expect::kString}};
constexpr Field kCommsLoggerFields[] = {{"enabled", Expect::kBool},
                                        {"verbose", Expect::kBool},
                                        {"prof_all", Expect::kBool},
                                        {"debug", Expect::kBool},
                                        {"prof_ops", Expect::kStrings}};

// A key whose value does not change the trained weights. For a boolean, `asks` is the value that
// asks for something (the other is DeepSpeed's default, which asks for nothing and gets no
// notice); for an object, whether it asks when its `enabled` is absent (DeepSpeed's monitors and
// profilers are off by default); a number asks unless it is 1. `fields`, for an object DeepSpeed
// reads with a pydantic model, are the keys it allows and their types (empty: not checked).
struct NoticeKey {
  std::string_view key;
  Expect type;
  bool asks;
  std::string_view notice;
  std::span<const Field> fields = {};
};

constexpr std::string_view kMonitorNotice =
    "a DeepSpeed monitor that hoist does not write; the same numbers are in hoist's JSONL log "
    "(monitor.jsonl.path) and Prometheus metrics (metrics.enabled); ignored";

constexpr NoticeKey kNoticeKeys[] = {
    {"wall_clock_breakdown", Expect::kBool, true,
     "times the phases of DeepSpeed's step; hoist always times its phases (phase_s in the JSONL "
     "log, hoist_step_phase_seconds); ignored"},
    {"memory_breakdown", Expect::kBool, true,
     "prints DeepSpeed's memory use; hoist always reports memory by place and category (the "
     "JSONL log, the metrics, hoist ctl status); ignored"},
    {"dump_state", Expect::kBool, true, "prints DeepSpeed's engine state at start-up; ignored"},
    {"prescale_gradients", Expect::kBool, true,
     "divides gradients before the all-reduce instead of after it; hoist divides after, which "
     "gives the same mean; ignored"},
    {"gradient_predivide_factor", Expect::kNumber, true,
     "splits the gradient average's division around the all-reduce; hoist divides once after "
     "it, which gives the same mean; ignored"},
    {"zero_allow_untested_optimizer", Expect::kBool, true,
     "lets ZeRO run an optimizer the training script brings; hoist runs its own AdamW; ignored"},
    {"zero_force_ds_cpu_optimizer", Expect::kBool, false,
     "lets an offloaded ZeRO step run an optimizer the training script brings; hoist's offloaded "
     "step is always its own CPU AdamW; ignored"},
    {"sparse_gradients", Expect::kBool, true,
     "sends embedding gradients as sparse tensors; hoist sends them dense, which sums to the "
     "same; ignored"},
    {"dataloader_drop_last", Expect::kBool, true,
     "configures the PyTorch data loader DeepSpeed builds; hoist reads token shards with its own "
     "loader; ignored"},
    {"graph_harvesting", Expect::kBool, true,
     "captures CUDA graphs of short kernel sequences, a speed feature hoist does not have; "
     "ignored"},
    {"timers", Expect::kObject, true,
     "DeepSpeed's throughput timers; hoist reports tokens_per_s and step_s in its JSONL log and "
     "metrics; ignored"},
    {"flops_profiler", Expect::kObject, false,
     "DeepSpeed's FLOPs profiler, a DeepSpeed feature hoist does not have; ignored"},
    {"autotuning", Expect::kObject, false,
     "DeepSpeed's autotuner, a DeepSpeed feature hoist does not have (hoist plan searches ZeRO "
     "stages and offload settings for memory); ignored"},
    {"comms_logger", Expect::kObject, false,
     "DeepSpeed's communication logger, a DeepSpeed feature hoist does not have "
     "(hoist_comm_bytes_total counts the bytes of each collective); ignored",
     kCommsLoggerFields},
    {"nebula", Expect::kObject, false,
     "DeepSpeed's Nebula checkpoint service, a DeepSpeed feature hoist does not have; "
     "checkpoints go to checkpoint.dir; ignored"},
    {"tensorboard", Expect::kObject, false, kMonitorNotice, kTensorboardFields},
    {"wandb", Expect::kObject, false, kMonitorNotice, kWandbFields},
    {"csv_monitor", Expect::kObject, false, kMonitorNotice, kTensorboardFields},
};

// What asks for a missing feature: the section's presence, its `enabled` flag, the section unless
// its `enabled` is false, an integer above 1, or the boolean false or true.
enum class Gate { kPresence, kEnabled, kUnlessDisabled, kAboveOne, kFalse, kTrue };

struct Feature {
  std::string_view key;
  std::string_view what;
  Gate gate;
};

constexpr Feature kFeatures[] = {
    {"amp", "Apex AMP", Gate::kEnabled},
    {"torch_autocast", "torch autocast", Gate::kEnabled},
    {"elasticity", "elastic training", Gate::kEnabled},
    {"data_efficiency", "data efficiency (curriculum learning, random layer token drop)",
     Gate::kEnabled},
    {"curriculum_learning", "curriculum learning", Gate::kEnabled},
    {"progressive_layer_drop", "progressive layer drop", Gate::kEnabled},
    {"eigenvalue", "the eigenvalue schedule of quantisation and layer drop", Gate::kEnabled},
    {"quantize_training", "quantisation-aware training (MoQ)", Gate::kEnabled},
    {"hybrid_engine", "the hybrid engine (generation inside RLHF training)", Gate::kEnabled},
    {"sparse_attention", "sparse attention", Gate::kPresence},
    {"compression_training", "compression training", Gate::kPresence},
    {"weight_quantization", "weight quantisation", Gate::kPresence},
    {"compile", "torch.compile and DeepCompile", Gate::kPresence},
    {"tensor_parallel", "tensor parallelism (AutoTP)", Gate::kPresence},
    {"pipeline", "pipeline parallelism", Gate::kPresence},
    {"sequence_parallel_size", "sequence parallelism (Ulysses)", Gate::kAboveOne},
    {"managed_gradient_accumulation",
     "accumulation boundaries set by the training script (managed_gradient_accumulation false)",
     Gate::kFalse},
    {"expert_parallel", "expert parallelism (AutoEP)", Gate::kUnlessDisabled},
    {"disable_allgather", "gathering updated parameters by broadcasts instead of an all-gather",
     Gate::kTrue},
    {"datastates_ckpt", "DataStates-LLM asynchronous checkpointing", Gate::kPresence},
};

// The DeepSpeed top-level keys read by ReadPrecision, ReadZero, ReadAio and
// ReadActivationCheckpointing (config_deepspeed.h), or checked here.
constexpr std::string_view kReadKeys[] = {
    "fp16",
    "bf16",
    "bfloat16",
    "communication_data_type",
    "zero_optimization",
    "aio",
    "activation_checkpointing",
    "gradient_allreduce_op",
};

// "a string", "an object", ... for an error message.
std::string Describe(const nlohmann::json& value) {
  const std::string name = value.type_name();
  if (value.is_null()) return name;
  return (name.front() == 'a' || name.front() == 'o' ? "an " : "a ") + name;
}

Status CheckType(const Section& s, std::string_view key, Expect type) {
  switch (type) {
    case Expect::kBool: {
      bool value = false;
      return s.Bool(key, &value);
    }
    case Expect::kNumber: {
      double value = 0;
      return s.Double(key, &value);
    }
    case Expect::kCount: {
      int64_t value = 0;
      HOIST_RETURN_IF_ERROR(s.Int(key, &value));
      if (value < 0) return s.Invalid(key, "must be >= 0, found " + std::to_string(value));
      return Status::Ok();
    }
    case Expect::kString: {
      std::string value;
      return s.String(key, &value);
    }
    case Expect::kStrings: {
      const nlohmann::json* value = s.Find(key);
      if (value == nullptr || value->is_null()) return Status::Ok();
      if (!value->is_array()) {
        return s.Invalid(key, "expected a list of strings, found " + Describe(*value));
      }
      for (size_t i = 0; i < value->size(); ++i) {
        if (!(*value)[i].is_string()) {
          return s.Invalid(std::string(key) + "[" + std::to_string(i) + "]",
                           "expected a string, found " + Describe((*value)[i]));
        }
      }
      return Status::Ok();
    }
    case Expect::kObject: return s.Child(key).status();
  }
  return Status::Ok();
}

// The value of `key` and, for an object with `fields`, the keys in it and their types.
Status CheckValue(const Section& s, std::string_view key, Expect type,
                  std::span<const Field> fields) {
  HOIST_RETURN_IF_ERROR(CheckType(s, key, type));
  if (type != Expect::kObject || fields.empty()) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(Section child, s.Child(key));
  std::vector<std::string_view> allowed;
  for (const Field& field : fields) allowed.push_back(field.key);
  HOIST_RETURN_IF_ERROR(child.AllowOnly(allowed));
  for (const Field& field : fields) HOIST_RETURN_IF_ERROR(CheckType(child, field.key, field.type));
  return Status::Ok();
}

// Whether the key's value asks for something (see NoticeKey). The type is already checked.
StatusOr<bool> Asks(const Section& s, const NoticeKey& k) {
  if (!s.Has(k.key)) return false;
  switch (k.type) {
    case Expect::kBool: {
      bool value = !k.asks;
      HOIST_RETURN_IF_ERROR(s.Bool(k.key, &value));
      return value == k.asks;
    }
    case Expect::kNumber: {
      double value = 1;
      HOIST_RETURN_IF_ERROR(s.Double(k.key, &value));
      return value != 1;
    }
    case Expect::kCount:
    case Expect::kString:
    case Expect::kStrings: return true;
    case Expect::kObject: {
      HOIST_ASSIGN_OR_RETURN(Section section, s.Child(k.key));
      bool enabled = k.asks;
      HOIST_RETURN_IF_ERROR(section.Bool("enabled", &enabled));
      return enabled;
    }
  }
  return false;
}

Status CheckFeature(const Section& top, const Feature& f) {
  std::string path = top.PathOf(f.key);
  std::string fix;
  switch (f.gate) {
    case Gate::kPresence:
      HOIST_RETURN_IF_ERROR(CheckType(top, f.key, Expect::kObject));
      fix = "remove the section";
      break;
    case Gate::kEnabled:
    case Gate::kUnlessDisabled: {
      HOIST_ASSIGN_OR_RETURN(Section section, top.Child(f.key));
      bool enabled = f.gate == Gate::kUnlessDisabled;
      HOIST_RETURN_IF_ERROR(section.Bool("enabled", &enabled));
      if (!enabled) return Status::Ok();
      if (section.Has("enabled")) {
        path = section.PathOf("enabled");
        fix = "set it to false or remove the section";
      } else {
        fix = "remove the section";
      }
      break;
    }
    case Gate::kAboveOne: {
      int64_t size = 1;
      HOIST_RETURN_IF_ERROR(top.Int(f.key, &size));
      if (size < 1) return top.Invalid(f.key, "must be >= 1, found " + std::to_string(size));
      if (size == 1) return Status::Ok();
      fix = "set it to 1 or remove it";
      break;
    }
    case Gate::kFalse:
    case Gate::kTrue: {
      const bool asks = f.gate == Gate::kTrue;
      bool value = !asks;
      HOIST_RETURN_IF_ERROR(top.Bool(f.key, &value));
      if (value != asks) return Status::Ok();
      fix = std::string("set it to ") + (asks ? "false" : "true") + " or remove it";
      break;
    }
  }
  return top.errors().Unimplemented(path, MissingFeature(f.what) + "; " + fix);
}

Status CheckAllreduceOp(const Section& top) {
  std::string op = "mean";
  HOIST_RETURN_IF_ERROR(top.String("gradient_allreduce_op", &op));
  if (op == "mean") return Status::Ok();
  if (op == "sum") {
    return top.errors().Unimplemented(
        top.PathOf("gradient_allreduce_op"),
        MissingFeature("summing gradients instead of averaging") + "; use \"mean\"");
  }
  return top.Invalid("gradient_allreduce_op", "must be \"mean\" or \"sum\", found \"" + op + "\"");
}

constexpr NoticeKey kCheckpointNoticeKeys[] = {
    {"tag_validation", Expect::kString, true,
     "checks that every rank saves under the same tag; hoist's rank 0 commits each step "
     "directory after every rank wrote its shard; ignored"},
    {"use_node_local_storage", Expect::kBool, true,
     "lets each node save to its own storage; hoist saves every shard under checkpoint.dir; "
     "ignored"},
    {"parallel_write", Expect::kObject, true,
     "spreads DeepSpeed's pipeline-stage writes; every hoist rank already writes its own shard; "
     "ignored"},
    {"writer", Expect::kObject, true,
     "chooses DeepSpeed's checkpoint writer (FastPersist), a DeepSpeed feature hoist does not "
     "have; hoist writes with its own; ignored"},
};

// Keys of zero_optimization that tune how DeepSpeed schedules, groups, caches, logs or saves, not
// what it computes: accepted with one notice each, their values checked against the types of
// DeepSpeed's DeepSpeedZeroConfig (deepspeed/runtime/zero/config.py).
constexpr Field kLeafModuleFields[] = {{"classes", Expect::kStrings},
                                       {"names", Expect::kStrings},
                                       {"ignore_default_classes", Expect::kBool}};

struct ZeroNoticeKey {
  std::string_view key;
  Expect type;
  std::span<const Field> fields = {};
};

constexpr ZeroNoticeKey kZeroNoticeKeys[] = {
    // How buckets map onto collectives: all-reduce of several ranks' buckets at once, a series
    // of broadcasts instead of one all-gather, the order of gradient copies under CPU offload.
    {"use_multi_rank_bucket_allreduce", Expect::kBool},
    {"allgather_partitions", Expect::kBool},
    {"round_robin_gradients", Expect::kBool},
    {"stage3_use_all_reduce_for_fetch_params", Expect::kBool},
    {"use_all_reduce_for_fetch_params", Expect::kBool},
    {"stage3_allgather_sequential", Expect::kBool},
    {"allgather_sequential", Expect::kBool},
    {"mics_hierarchical_params_gather", Expect::kBool},
    // Memory policy of stage 3: how many parameters stay gathered, and for how long.
    {"stage3_model_persistence_threshold", Expect::kCount},
    {"model_persistence_threshold", Expect::kCount},
    {"stage3_max_reuse_distance", Expect::kCount},
    {"max_reuse_distance", Expect::kCount},
    {"stage3_module_granularity_threshold", Expect::kCount},
    {"module_granularity_threshold", Expect::kCount},
    {"stage3_partition_stream_chunk_size", Expect::kCount},
    {"partition_stream_chunk_size", Expect::kCount},
    // What a checkpoint or a saved 16-bit model looks like, not the training itself.
    {"elastic_checkpoint", Expect::kBool},
    {"stage3_gather_16bit_weights_on_model_save", Expect::kBool},
    {"gather_16bit_weights_on_model_save", Expect::kBool},
    {"stage3_gather_fp16_weights_on_model_save", Expect::kBool},
    {"pipeline_loading_checkpoint", Expect::kBool},
    {"save_muon_momentum_buffer_in_memory", Expect::kBool},
    // PyTorch module plumbing, logging and self-checks.
    {"ignore_unused_parameters", Expect::kBool},  // every GPT-2 parameter receives a gradient
    {"legacy_stage1", Expect::kBool},             // an older implementation of the same stage 1
    {"memory_efficient_linear", Expect::kBool},
    {"override_module_apply", Expect::kBool},
    {"leaf_module", Expect::kObject, kLeafModuleFields},
    {"log_trace_cache_warnings", Expect::kBool},
    {"enable_sanity_checks", Expect::kBool},
    // Only read with zero_quantized_gradients, which is refused (a free-form dict in DeepSpeed).
    {"zeropp_loco_param", Expect::kObject},
};

constexpr std::string_view kOneBitParams[] = {
    "freeze_step",       "cuda_aware",        "comm_backend_name",  "var_freeze_step",
    "var_update_scaler", "local_step_scaler", "local_step_clipper", "max_coeff",
    "min_coeff",         "coeff_beta",        "factor_max",         "factor_min",
    "factor_threshold",
};

}  // namespace

std::string MissingFeature(std::string_view what) {
  return std::string(what) + " is a DeepSpeed feature hoist does not have";
}

const std::vector<std::string_view>& DeepSpeedOnlyKeys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> all;
    for (const NoticeKey& k : kNoticeKeys) all.push_back(k.key);
    for (const Feature& f : kFeatures) all.push_back(f.key);
    all.insert(all.end(), std::begin(kReadKeys), std::end(kReadKeys));
    return all;
  }();
  return keys;
}

Status CheckDeepSpeedOnlyKeys(const Section& top, std::vector<std::string>* notices) {
  for (const std::string& key : top.Keys()) {
    for (const NoticeKey& k : kNoticeKeys) {
      if (k.key != key) continue;
      HOIST_RETURN_IF_ERROR(CheckValue(top, key, k.type, k.fields));
      HOIST_ASSIGN_OR_RETURN(bool asks, Asks(top, k));
      if (asks) notices->push_back(top.PathOf(key) + ": " + std::string(k.notice));
    }
    for (const Feature& f : kFeatures) {
      if (f.key == key && top.Has(key)) HOIST_RETURN_IF_ERROR(CheckFeature(top, f));
    }
    if (key == "gradient_allreduce_op") HOIST_RETURN_IF_ERROR(CheckAllreduceOp(top));
  }
  return Status::Ok();
}

const std::vector<std::string_view>& ZeroNoticeKeys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> all;
    for (const ZeroNoticeKey& k : kZeroNoticeKeys) all.push_back(k.key);
    return all;
  }();
  return keys;
}

Status CheckZeroNoticeKeys(const Section& zero, std::vector<std::string>* notices) {
  for (const ZeroNoticeKey& k : kZeroNoticeKeys) {
    if (zero.Find(k.key) == nullptr) continue;
    HOIST_RETURN_IF_ERROR(CheckValue(zero, k.key, k.type, k.fields));
    notices->push_back(zero.PathOf(k.key) +
                       ": a DeepSpeed setting that hoist does not act on yet; ignored");
  }
  return Status::Ok();
}

const std::vector<std::string_view>& DeepSpeedCheckpointKeys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> all = {"load_universal"};
    for (const NoticeKey& k : kCheckpointNoticeKeys) all.push_back(k.key);
    return all;
  }();
  return keys;
}

Status CheckDeepSpeedCheckpointKeys(const Section& checkpoint, std::vector<std::string>* notices) {
  bool universal = false;
  HOIST_RETURN_IF_ERROR(checkpoint.Bool("load_universal", &universal));
  if (universal) {
    return checkpoint.errors().Unimplemented(
        checkpoint.PathOf("load_universal"),
        MissingFeature("loading DeepSpeed's universal checkpoints") +
            "; set it to false or remove it (hoist resumes from its own checkpoints)");
  }
  for (const NoticeKey& k : kCheckpointNoticeKeys) {
    HOIST_RETURN_IF_ERROR(CheckType(checkpoint, k.key, k.type));
    HOIST_ASSIGN_OR_RETURN(bool asks, Asks(checkpoint, k));
    if (asks) notices->push_back(checkpoint.PathOf(k.key) + ": " + std::string(k.notice));
  }
  return Status::Ok();
}

const std::vector<std::string_view>& OneBitOptimizerParams() {
  static const std::vector<std::string_view> keys(std::begin(kOneBitParams),
                                                  std::end(kOneBitParams));
  return keys;
}

Status RefuseOneBitOptimizerParams(const Section& params) {
  for (std::string_view key : kOneBitParams) {
    if (params.Find(key) == nullptr) continue;
    return params.errors().Unimplemented(
        params.PathOf(key),
        "a parameter of DeepSpeed's 1-bit optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb); " +
            MissingFeature("1-bit compressed communication") + "; remove it");
  }
  return Status::Ok();
}

}  // namespace hoist::runtime::config_internal
