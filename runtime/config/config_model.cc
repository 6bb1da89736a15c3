// The `model` section: the family and its dimensions, in hoist's names or Hugging Face's, from
// the job itself or from a config.json (`model.config`) or the checkpoint a run starts from
// (`model.init_from`).
#include "runtime/config/config_model.h"

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/interchange/hf_config.h"
#include "runtime/model/gpt2_weights.h"
#include "runtime/model/model.h"
#include "runtime/model/model_limits.h"

namespace hoist::runtime::config_internal {
namespace {

// An integer dimension under its hoist name and, where Hugging Face names it otherwise, that
// name too (either may be used, not both).
struct Dim {
  const char* key;
  const char* hf_key;  // null: the same name
  int ModelConfig::*field;
};
constexpr Dim kDims[] = {
    {"n_layer", "num_hidden_layers", &ModelConfig::n_layer},
    {"n_head", "num_attention_heads", &ModelConfig::n_head},
    {"n_embd", "hidden_size", &ModelConfig::n_embd},
    {"n_kv_head", "num_key_value_heads", &ModelConfig::n_kv_head},
    {"vocab_size", nullptr, &ModelConfig::vocab_size},
    {"n_positions", "max_position_embeddings", &ModelConfig::n_positions},
    {"intermediate_size", nullptr, &ModelConfig::intermediate_size},
    {"head_dim", nullptr, &ModelConfig::head_size},
    {"sliding_window", nullptr, &ModelConfig::sliding_window},
};

bool SameScaling(const RopeScalingConfig& a, const RopeScalingConfig& b) {
  return a.llama3 == b.llama3 &&
         (!a.llama3 || (a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
                        a.high_freq_factor == b.high_freq_factor &&
                        a.original_max_position_embeddings == b.original_max_position_embeddings));
}

Status ReadRopeScaling(const Section& s, RopeScalingConfig* out) {
  if (!s.Has("rope_scaling")) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(Section r, s.Child("rope_scaling"));
  HOIST_RETURN_IF_ERROR(r.AllowOnly({"rope_type", "type", "factor", "low_freq_factor",
                                     "high_freq_factor", "original_max_position_embeddings"}));
  std::string type = "default";
  HOIST_RETURN_IF_ERROR(r.String(r.Has("type") ? "type" : "rope_type", &type));
  if (type == "default") {
    *out = RopeScalingConfig{};
    return Status::Ok();
  }
  if (type != "llama3") {
    return r.Invalid("rope_type", "must be \"llama3\" or \"default\", found \"" + type + "\"");
  }
  out->llama3 = true;
  HOIST_RETURN_IF_ERROR(r.Double("factor", &out->factor));
  HOIST_RETURN_IF_ERROR(r.Double("low_freq_factor", &out->low_freq_factor));
  HOIST_RETURN_IF_ERROR(r.Double("high_freq_factor", &out->high_freq_factor));
  HOIST_RETURN_IF_ERROR(
      r.Int("original_max_position_embeddings", &out->original_max_position_embeddings));
  if (!(out->factor > 0) || !(out->low_freq_factor > 0) ||
      !(out->high_freq_factor > out->low_freq_factor) ||
      out->original_max_position_embeddings <= 0) {
    return r.Invalid("factor",
                     "needs factor > 0, high_freq_factor > low_freq_factor > 0 and "
                     "original_max_position_embeddings > 0");
  }
  return Status::Ok();
}

// A dimension beyond its bound (runtime/model/model_limits.h) is refused here, before it sizes a
// loop or an allocation.
Status CheckBound(const Section& s, const char* key, int64_t value) {
  const int64_t max = MaxModelDimension(key);
  if (value <= max) return Status::Ok();
  return s.Invalid(key, "must be <= " + ModelBoundText(max) +
                            " (hoist's bound, far above any published model), found " +
                            std::to_string(value));
}

// `value` in its shortest form ("1e-05", "500000"), for messages.
std::string Shortest(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.7g", value);
  return text;
}

// The first setting in which the models `a` and `b` differ, as "n_layer 2 vs 3", or "".
std::string ModelDifference(const ModelConfig& a, const ModelConfig& b) {
  if (a.family != b.family) {
    return std::string("model_type ") + ModelFamilyName(a.family) + " vs " +
           ModelFamilyName(b.family);
  }
  const std::pair<const char*, std::pair<int, int>> dims[] = {
      {"n_layer", {a.n_layer, b.n_layer}},
      {"n_head", {a.n_head, b.n_head}},
      {"n_embd", {a.n_embd, b.n_embd}},
      {"vocab_size", {a.vocab_size, b.vocab_size}},
      {"n_positions", {a.positions(), b.positions()}},
      {"n_kv_head", {a.kv_heads(), b.kv_heads()}},
      {"intermediate_size", {a.intermediate_size, b.intermediate_size}}};
  for (const auto& [key, values] : dims) {
    if (values.first != values.second) {
      return std::string(key) + " " + std::to_string(values.first) + " vs " +
             std::to_string(values.second);
    }
  }
  if (a.family != ModelFamily::kGpt2 &&
      (a.rope_theta != b.rope_theta || a.rms_norm_eps != b.rms_norm_eps ||
       a.tie_word_embeddings != b.tie_word_embeddings ||
       !SameScaling(a.rope_scaling, b.rope_scaling))) {
    return "rope_theta, rms_norm_eps, rope_scaling or tie_word_embeddings";
  }
  if (a.head_dim() != b.head_dim() || a.sliding_window != b.sliding_window ||
      a.sliding_layers != b.sliding_layers || a.query_pre_attn_scalar != b.query_pre_attn_scalar ||
      a.attn_logit_softcapping != b.attn_logit_softcapping ||
      a.final_logit_softcapping != b.final_logit_softcapping) {
    return "head_dim, sliding_window, layer_types, query_pre_attn_scalar or the soft caps";
  }
  return "";
}

// The model a config.json or a checkpoint describes, when the job names one.
StatusOr<std::optional<ModelConfig>> BaseModel(const Section& s, const ModelConfig& job) {
  std::optional<ModelConfig> base;
  std::string where;
  if (!job.hf_config.empty()) {
    StatusOr<HfModelConfig> read = ReadHfConfig(job.hf_config);
    if (!read.ok()) return s.Invalid("config", read.status().message());
    base = read->model;
    where = "model.config " + job.hf_config;
  }
  if (!job.init_from.empty()) {
    StatusOr<std::unique_ptr<WeightSource>> source = OpenWeightSource(job.init_from);
    if (!source.ok()) return s.Invalid("init_from", source.status().message());
    const ModelConfig& from = (*source)->model();
    if (base) {
      const std::string differs = ModelDifference(from, *base);
      if (!differs.empty()) {
        return s.Invalid("init_from", "describes another model than " + where + " (" + differs +
                                          "); give one of the two");
      }
    }
    base = from;
  }
  return base;
}

}  // namespace

Status ReadModel(const Section& top, ModelConfig* model, std::vector<std::string>* notices) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("model"));
  // hoist's names first, then Llama's settings, then Hugging Face's names for the dimensions.
  std::vector<std::string_view> allowed = {
      "n_layer",    "n_head",        "n_embd",       "vocab_size",
      "seq_len",    "n_positions",   "attention",    "init_from",
      "config",     "model_type",    "n_kv_head",    "intermediate_size",
      "rope_theta", "rope_scaling",  "rms_norm_eps", "tie_word_embeddings",
      "head_dim",   "sliding_window"};
  for (const Dim& dim : kDims) {
    if (dim.hf_key != nullptr) allowed.push_back(dim.hf_key);
  }
  HOIST_RETURN_IF_ERROR(s.AllowOnly(allowed));
  std::string attention = "direct";
  HOIST_RETURN_IF_ERROR(s.String("attention", &attention));
  if (Lower(attention) == "direct") {
    model->attention = AttentionKind::kDirect;
  } else if (Lower(attention) == "tiled") {
    model->attention = AttentionKind::kTiled;
  } else {
    return s.Invalid("attention", "must be \"direct\" or \"tiled\", found \"" + attention + "\"");
  }
  HOIST_RETURN_IF_ERROR(s.String("init_from", &model->init_from));
  HOIST_RETURN_IF_ERROR(s.String("config", &model->hf_config));
  HOIST_ASSIGN_OR_RETURN(std::optional<ModelConfig> base, BaseModel(s, *model));

  // What the job says, in whichever name it says it.
  ModelConfig job = *model;
  if (s.Has("model_type")) {
    std::string type;
    HOIST_RETURN_IF_ERROR(s.String("model_type", &type));
    if (!ModelFamilyNamed(type, &job.family)) {
      std::string known;
      for (ModelFamily f : kModelFamilies) {
        known += std::string(known.empty() ? "\"" : ", \"") + ModelFamilyName(f) + "\"";
      }
      return s.Invalid("model_type", "must be one of " + known + ", found \"" + type + "\"");
    }
  } else if (base) {
    job.family = base->family;
  }
  const bool llama = job.family != ModelFamily::kGpt2;  // a rotary family
  std::vector<std::string> set;                         // the keys the job sets, by hoist name
  for (const Dim& dim : kDims) {
    const bool hoist_name = s.Has(dim.key);
    const bool hf_name = dim.hf_key != nullptr && s.Has(dim.hf_key);
    if (hoist_name && hf_name) {
      return s.Invalid(dim.hf_key, std::string("names the same setting as model.") + dim.key +
                                       "; give one of the two");
    }
    if (!hoist_name && !hf_name) continue;
    const char* key = hoist_name ? dim.key : dim.hf_key;
    HOIST_RETURN_IF_ERROR(s.Int(key, &(job.*dim.field)));
    if (job.*dim.field <= 0) {
      return s.Invalid(key, "must be > 0, found " + std::to_string(job.*dim.field));
    }
    HOIST_RETURN_IF_ERROR(CheckBound(s, key, job.*dim.field));
    set.push_back(key);
  }
  HOIST_RETURN_IF_ERROR(s.Double("rope_theta", &job.rope_theta));
  HOIST_RETURN_IF_ERROR(s.Float("rms_norm_eps", &job.rms_norm_eps));
  HOIST_RETURN_IF_ERROR(s.Bool("tie_word_embeddings", &job.tie_word_embeddings));
  HOIST_RETURN_IF_ERROR(ReadRopeScaling(s, &job.rope_scaling));
  if (!llama) {
    for (const char* key : {"rope_theta", "rms_norm_eps", "rope_scaling", "tie_word_embeddings",
                            "intermediate_size", "head_dim", "sliding_window"}) {
      if (s.Has(key)) {
        return s.Invalid(key,
                         "applies to model_type \"llama\"; GPT-2's is fixed (a 4 n_embd "
                         "GELU MLP, layernorm, learned positions, a tied head)");
      }
    }
    job.tie_word_embeddings = true;
  }

  // The checkpoint's or config.json's dimensions; a key the job also sets must agree. Except:
  // a checkpoint given by --set replaces the model the config file describes, as --set wins
  // over the file everywhere else (`hoist train -c job.json --set model.init_from=DIR` on a
  // job that sets the dimensions of its own model); the file's keys give way, with a notice.
  const char* base_key = !model->init_from.empty() ? "init_from" : "config";
  const std::string from = std::string("model.") + base_key + " " +
                           (!model->init_from.empty() ? model->init_from : model->hf_config);
  const bool base_overridden = base && s.errors().Overridden(s.PathOf(base_key));
  std::vector<std::string> gave_way;
  if (base) {
    const auto disagree = [&](const char* key, const std::string& has,
                              const std::string& want) -> Status {
      if (base_overridden && !s.errors().Overridden(s.PathOf(key))) {
        gave_way.push_back(s.PathOf(key) + " " + has + " (now " + want + ")");
        return Status::Ok();
      }
      return s.Invalid(key, "is " + has + " but " + from + " has " + want +
                                "; leave the key out (" + from + " sets it)");
    };
    if (s.Has("model_type") && job.family != base->family) {
      HOIST_RETURN_IF_ERROR(
          disagree("model_type", ModelFamilyName(job.family), ModelFamilyName(base->family)));
    }
    for (const Dim& dim : kDims) {
      const char* key = s.Has(dim.key) ? dim.key : dim.hf_key;
      if (key == nullptr || !s.Has(key)) continue;
      int want = (*base).*dim.field;
      if (dim.field == &ModelConfig::n_positions) want = base->positions();
      if (dim.field == &ModelConfig::n_kv_head) want = base->kv_heads();
      if (dim.field == &ModelConfig::head_size) want = base->head_dim();
      if (job.*dim.field != want) {
        HOIST_RETURN_IF_ERROR(disagree(key, std::to_string(job.*dim.field), std::to_string(want)));
      }
    }
    if (s.Has("rope_theta") && job.rope_theta != base->rope_theta) {
      HOIST_RETURN_IF_ERROR(
          disagree("rope_theta", Shortest(job.rope_theta), Shortest(base->rope_theta)));
    }
    if (s.Has("rms_norm_eps") && job.rms_norm_eps != base->rms_norm_eps) {
      HOIST_RETURN_IF_ERROR(
          disagree("rms_norm_eps", Shortest(job.rms_norm_eps), Shortest(base->rms_norm_eps)));
    }
    if (s.Has("tie_word_embeddings") && job.tie_word_embeddings != base->tie_word_embeddings) {
      HOIST_RETURN_IF_ERROR(disagree("tie_word_embeddings",
                                     job.tie_word_embeddings ? "true" : "false",
                                     base->tie_word_embeddings ? "true" : "false"));
    }
    if (s.Has("rope_scaling") && !SameScaling(job.rope_scaling, base->rope_scaling)) {
      HOIST_RETURN_IF_ERROR(disagree("rope_scaling", "another scaling", "its own"));
    }
    const std::string init_from = model->init_from, hf_config = model->hf_config;
    const AttentionKind kind = model->attention;
    *model = *base;
    model->init_from = init_from;
    model->hf_config = hf_config;
    model->attention = kind;
    model->n_positions = base->positions();
    model->seq_len = base->positions();
  } else {
    *model = job;
  }
  if (s.Has("seq_len")) {
    int seq_len = 0;
    HOIST_RETURN_IF_ERROR(s.Int("seq_len", &seq_len));
    if (seq_len <= 0) return s.Invalid("seq_len", "must be > 0, found " + std::to_string(seq_len));
    HOIST_RETURN_IF_ERROR(CheckBound(s, "seq_len", seq_len));
    if (model->n_positions > 0 && seq_len > model->n_positions && base_overridden &&
        !s.errors().Overridden(s.PathOf("seq_len"))) {
      // The file's training context, longer than the checkpoint's: its whole context.
      gave_way.push_back(s.PathOf("seq_len") + " " + std::to_string(seq_len) + " (now " +
                         std::to_string(model->n_positions) + ")");
      seq_len = model->n_positions;
    }
    if (model->n_positions > 0 && seq_len > model->n_positions) {
      return s.Invalid("seq_len", "must be in [1, " + std::to_string(model->n_positions) +
                                      "], the model's positions, found " + std::to_string(seq_len));
    }
    model->seq_len = seq_len;
  } else if (!base && model->n_positions > 0) {
    model->seq_len = model->n_positions;
  }
  if (model->n_positions == model->seq_len) model->n_positions = 0;
  if (!gave_way.empty()) {
    std::string notice = from + ", given by --set, sets the model; the config file's ";
    for (size_t i = 0; i < gave_way.size(); ++i) notice += (i ? ", " : "") + gave_way[i];
    notices->push_back(notice + " give way to it");
  }

  if (model->head_size == 0 && model->n_embd % model->n_head != 0) {
    return s.Invalid("n_embd", "must be divisible by model.n_head (" +
                                   std::to_string(model->n_head) + "), found " +
                                   std::to_string(model->n_embd));
  }
  if (model->family == ModelFamily::kGpt2) {
    if (model->n_kv_head != 0 && model->n_kv_head != model->n_head) {
      return s.Invalid("n_kv_head",
                       "applies to model_type \"llama\"; GPT-2's heads are all "
                       "key/value heads");
    }
  } else {
    if (model->intermediate_size <= 0) {
      return s.Invalid("intermediate_size", std::string("must be set for model_type \"") +
                                                ModelFamilyName(model->family) +
                                                "\" (the gated MLP's hidden width)");
    }
    if (model->n_head % model->kv_heads() != 0) {
      return s.Invalid("n_kv_head", "must divide model.n_head (" + std::to_string(model->n_head) +
                                        "), found " + std::to_string(model->kv_heads()));
    }
    if (model->head_dim() % 2 != 0) {
      return s.Invalid("n_embd", "/ model.n_head must be even for rotary positions, found " +
                                     std::to_string(model->head_dim()));
    }
    if (!(model->rope_theta > 0) || !(model->rms_norm_eps > 0)) {
      return s.Invalid("rope_theta", "and model.rms_norm_eps must be > 0");
    }
  }
  // Again on the model as merged: a checkpoint's dimensions (an llm.c header) arrive here
  // unchecked.
  for (const Dim& dim : kDims) HOIST_RETURN_IF_ERROR(CheckBound(s, dim.key, (*model).*dim.field));
  if (Status size = CheckModelSize(*model); !size.ok()) {
    return s.errors().Invalid(s.path(), size.message());
  }
  return Status::Ok();
}

}  // namespace hoist::runtime::config_internal
