#include "runtime/checkpoint/run_identity.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model/lora.h"
#include "runtime/model/model.h"

namespace hoist::runtime {

nlohmann::json RunIdentity(const Config& config) {
  const ModelConfig& m = config.model;
  nlohmann::json identity = {
      {"model.n_layer", m.n_layer},
      {"model.n_head", m.n_head},
      {"model.n_embd", m.n_embd},
      {"model.vocab_size", m.vocab_size},
      {"model.seq_len", m.seq_len},
      {"data.train", config.data.train},
      {"train_batch_size", config.train_batch_size},
      {"train_micro_batch_size_per_gpu", config.train_micro_batch_size_per_gpu},
      {"gradient_accumulation_steps", config.gradient_accumulation_steps}};
  // Only where it differs from seq_len, so that checkpoints written before the key existed match.
  if (m.n_positions != 0) identity["model.n_positions"] = m.n_positions;
  // The rotary families' own settings; a GPT-2 run's identity stays what it was before they
  // existed, and a Llama's without the later families' settings unless it sets them.
  if (m.family != ModelFamily::kGpt2) {
    identity["model.model_type"] = ModelFamilyName(m.family);
    identity["model.n_kv_head"] = m.kv_heads();
    identity["model.intermediate_size"] = m.intermediate_size;
    identity["model.rope_theta"] = m.rope_theta;
    identity["model.rms_norm_eps"] = m.rms_norm_eps;
    identity["model.tie_word_embeddings"] = m.tie_word_embeddings;
    nlohmann::json scaling = nullptr;
    if (m.rope_scaling.llama3) {
      const RopeScalingConfig& r = m.rope_scaling;
      scaling = {{"factor", r.factor},
                 {"low_freq_factor", r.low_freq_factor},
                 {"high_freq_factor", r.high_freq_factor},
                 {"original_max_position_embeddings", r.original_max_position_embeddings}};
    }
    identity["model.rope_scaling"] = scaling;
    if (m.head_size != 0) identity["model.head_dim"] = m.head_size;
    if (m.sliding_window != 0) identity["model.sliding_window"] = m.sliding_window;
    if (!m.sliding_layers.empty()) identity["model.sliding_layers"] = m.sliding_layers;
    if (m.query_pre_attn_scalar != 0) {
      identity["model.query_pre_attn_scalar"] = m.query_pre_attn_scalar;
    }
    if (m.attn_logit_softcapping != 0) {
      identity["model.attn_logit_softcapping"] = m.attn_logit_softcapping;
    }
    if (m.final_logit_softcapping != 0) {
      identity["model.final_logit_softcapping"] = m.final_logit_softcapping;
    }
  }
  // LoRA: the adapters' shape and the base they adapt (a checkpoint holds the adapters alone, so
  // export and resume read the base from there).
  if (m.lora.enabled()) {
    identity["lora.r"] = m.lora.r;
    identity["lora.alpha"] = m.lora.alpha;
    identity["lora.use_rslora"] = m.lora.use_rslora;
    // The base is re-quantized on resume from model.init_from: it must be quantized alike.
    if (m.lora.nf4_base) {
      identity["lora.base_quantization"] = m.lora.nf4_double_quant ? "nf4+double_quant" : "nf4";
    }
    identity["lora.dropout"] = m.lora.dropout;  // for the reader; may change on resume
    std::vector<std::string> targets = m.lora.target_modules;
    std::sort(targets.begin(), targets.end());
    identity["lora.target_modules"] = targets;
    identity["model.init_from"] = m.init_from;
  }
  return identity;
}

namespace {

// How the global batch is split: recorded for the reader, free to change across a resume.
bool IsBatchSplit(const std::string& key) {
  return key == "train_micro_batch_size_per_gpu" || key == "gradient_accumulation_steps";
}

// Recorded for a reader (the adapter config of a PEFT export), free to change across a resume as
// the learning rate is.
bool IsFreeSetting(const std::string& key) { return key == "lora.dropout"; }

// "8 (train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 2 x 2 ranks)"
std::string DescribeBatch(int64_t batch, int64_t micro, int64_t accumulation, int64_t world) {
  return std::to_string(batch) + " (train_micro_batch_size_per_gpu " + std::to_string(micro) +
         " x gradient_accumulation_steps " + std::to_string(accumulation) + " x " +
         std::to_string(world) + " ranks)";
}

}  // namespace

Status CheckSameRun(const nlohmann::json& saved, const Config& config, const std::string& dir,
                    int saved_world_size) {
  if (!saved.is_object()) {
    return DataLossError("checkpoint " + dir + " has no run identity in its manifest metadata");
  }
  const nlohmann::json expected = RunIdentity(config);
  for (const auto& [key, value] : expected.items()) {
    if (IsBatchSplit(key) || key == "train_batch_size" || IsFreeSetting(key)) continue;
    if (!saved.contains(key) || saved[key] != value) {
      return FailedPreconditionError(
          "checkpoint " + dir + " was written with " + key + " = " +
          (saved.contains(key) ? saved[key].dump() : std::string("(missing)")) +
          " but the job has " + value.dump() +
          "; resume with the settings the checkpoint was written with");
    }
  }
  // Keys recorded only when set (a checkpoint written without them matches a job without them):
  // one the checkpoint has and the job lacks is a change too.
  for (const char* key : {"lora.base_quantization"}) {
    if (saved.contains(key) && !expected.contains(key)) {
      return FailedPreconditionError("checkpoint " + dir + " was written with " + key + " = " +
                                     saved[key].dump() +
                                     " but the job has none; resume with the settings the "
                                     "checkpoint was written with");
    }
  }
  // The global batch must stay; how it is split over ranks, micro-batches and accumulation may
  // change (the data loader hands out the same sequences per step whatever the split).
  // Checkpoints written before train_batch_size was recorded imply it by the split.
  const auto integer = [&](const char* key) -> int64_t {
    const auto it = saved.find(key);
    return it != saved.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
  };
  const int64_t micro = integer("train_micro_batch_size_per_gpu");
  const int64_t accumulation = integer("gradient_accumulation_steps");
  int64_t batch = integer("train_batch_size");
  if (batch < 0 && micro > 0 && accumulation > 0) batch = micro * accumulation * saved_world_size;
  if (batch <= 0) {
    return DataLossError("checkpoint " + dir +
                         ": manifest metadata.run has no valid train_batch_size (nor "
                         "train_micro_batch_size_per_gpu and gradient_accumulation_steps)");
  }
  if (batch != config.train_batch_size) {
    const int64_t world = config.train_batch_size / (config.train_micro_batch_size_per_gpu *
                                                     config.gradient_accumulation_steps);
    return FailedPreconditionError(
        "checkpoint " + dir + " was written with train_batch_size = " +
        DescribeBatch(batch, micro, accumulation, saved_world_size) + " but the job has " +
        DescribeBatch(config.train_batch_size, config.train_micro_batch_size_per_gpu,
                      config.gradient_accumulation_steps, world) +
        "; the global batch must stay the same to continue the run: set train_batch_size " +
        std::to_string(batch) + " (the micro-batch, accumulation and ranks may change)");
  }
  return Status::Ok();
}

StatusOr<ModelConfig> ModelFromRunIdentity(const nlohmann::json& saved, const std::string& dir) {
  ModelConfig m;
  const std::pair<const char*, int*> fields[] = {{"model.n_layer", &m.n_layer},
                                                 {"model.n_head", &m.n_head},
                                                 {"model.n_embd", &m.n_embd},
                                                 {"model.vocab_size", &m.vocab_size},
                                                 {"model.seq_len", &m.seq_len}};
  for (const auto& [key, value] : fields) {
    if (!saved.is_object() || !saved.contains(key) || !saved[key].is_number_integer() ||
        saved[key].get<int64_t>() <= 0 || saved[key].get<int64_t>() > (int64_t{1} << 30)) {
      return DataLossError("checkpoint " + dir + ": manifest metadata.run." + key +
                           " is missing or not a positive integer");
    }
    *value = saved[key].get<int>();
  }
  if (saved.is_object() && saved.contains("model.n_positions")) {
    const nlohmann::json& positions = saved["model.n_positions"];
    if (!positions.is_number_integer() || positions.get<int64_t>() < m.seq_len ||
        positions.get<int64_t>() > (int64_t{1} << 30)) {
      return DataLossError("checkpoint " + dir +
                           ": manifest metadata.run.model.n_positions is not an integer >= "
                           "model.seq_len");
    }
    m.n_positions = positions.get<int>();
  }
  if (saved.is_object() && saved.contains("model.model_type")) {
    auto bad = [&](const char* key) {
      return DataLossError("checkpoint " + dir + ": manifest metadata.run." + key +
                           " is missing or out of range");
    };
    if (!saved["model.model_type"].is_string() ||
        !ModelFamilyNamed(saved["model.model_type"].get<std::string>(), &m.family) ||
        m.family == ModelFamily::kGpt2) {
      return bad("model.model_type");
    }
    for (const auto& [key, value] : {std::pair{"model.n_kv_head", &m.n_kv_head},
                                     std::pair{"model.intermediate_size", &m.intermediate_size}}) {
      if (!saved.contains(key) || !saved[key].is_number_integer() ||
          saved[key].get<int64_t>() <= 0 || saved[key].get<int64_t>() > (int64_t{1} << 30)) {
        return bad(key);
      }
      *value = saved[key].get<int>();
    }
    for (const char* key : {"model.rope_theta", "model.rms_norm_eps"}) {
      if (!saved.contains(key) || !saved[key].is_number() || !(saved[key].get<double>() > 0)) {
        return bad(key);
      }
    }
    m.rope_theta = saved["model.rope_theta"].get<double>();
    m.rms_norm_eps = static_cast<float>(saved["model.rms_norm_eps"].get<double>());
    if (!saved.contains("model.tie_word_embeddings") ||
        !saved["model.tie_word_embeddings"].is_boolean()) {
      return bad("model.tie_word_embeddings");
    }
    m.tie_word_embeddings = saved["model.tie_word_embeddings"].get<bool>();
    const nlohmann::json scaling = saved.value("model.rope_scaling", nlohmann::json());
    if (scaling.is_object()) {
      RopeScalingConfig& r = m.rope_scaling;
      r.llama3 = true;
      for (const auto& [key, value] :
           {std::pair{"factor", &r.factor}, std::pair{"low_freq_factor", &r.low_freq_factor},
            std::pair{"high_freq_factor", &r.high_freq_factor}}) {
        if (!scaling.contains(key) || !scaling[key].is_number()) return bad("model.rope_scaling");
        *value = scaling[key].get<double>();
      }
      if (!scaling.contains("original_max_position_embeddings") ||
          !scaling["original_max_position_embeddings"].is_number_integer()) {
        return bad("model.rope_scaling");
      }
      r.original_max_position_embeddings = scaling["original_max_position_embeddings"].get<int>();
    } else if (!scaling.is_null()) {
      return bad("model.rope_scaling");
    }
    if (m.n_head % m.n_kv_head != 0) return bad("model.n_kv_head");
    // The later families' settings, each recorded only where set.
    for (const auto& [key, value] : {std::pair{"model.head_dim", &m.head_size},
                                     std::pair{"model.sliding_window", &m.sliding_window}}) {
      if (!saved.contains(key)) continue;
      if (!saved[key].is_number_integer() || saved[key].get<int64_t>() <= 0 ||
          saved[key].get<int64_t>() > (int64_t{1} << 24)) {
        return bad(key);
      }
      *value = saved[key].get<int>();
    }
    if (saved.contains("model.sliding_layers")) {
      const nlohmann::json& layers = saved["model.sliding_layers"];
      if (!layers.is_array() || layers.size() != static_cast<size_t>(m.n_layer)) {
        return bad("model.sliding_layers");
      }
      for (const nlohmann::json& sliding : layers) {
        if (!sliding.is_boolean()) return bad("model.sliding_layers");
        m.sliding_layers.push_back(sliding.get<bool>());
      }
    }
    for (const char* key : {"model.query_pre_attn_scalar", "model.attn_logit_softcapping",
                            "model.final_logit_softcapping"}) {
      if (saved.contains(key) && (!saved[key].is_number() || !(saved[key].get<double>() > 0) ||
                                  !(saved[key].get<double>() < 1e30))) {
        return bad(key);
      }
    }
    m.query_pre_attn_scalar = saved.value("model.query_pre_attn_scalar", 0.0);
    m.attn_logit_softcapping = saved.value("model.attn_logit_softcapping", 0.0f);
    m.final_logit_softcapping = saved.value("model.final_logit_softcapping", 0.0f);
  }
  if (saved.is_object() && saved.contains("lora.r")) {
    auto bad = [&](const char* key) {
      return DataLossError("checkpoint " + dir + ": manifest metadata.run." + key +
                           " is missing or out of range");
    };
    LoraConfig& lora = m.lora;
    if (!saved["lora.r"].is_number_integer() || saved["lora.r"].get<int64_t>() < 1 ||
        saved["lora.r"].get<int64_t>() > 65536) {
      return bad("lora.r");
    }
    lora.r = saved["lora.r"].get<int>();
    if (!saved.contains("lora.alpha") || !saved["lora.alpha"].is_number() ||
        !(saved["lora.alpha"].get<double>() > 0)) {
      return bad("lora.alpha");
    }
    lora.alpha = saved["lora.alpha"].get<double>();
    if (!saved.contains("lora.use_rslora") || !saved["lora.use_rslora"].is_boolean()) {
      return bad("lora.use_rslora");
    }
    lora.use_rslora = saved["lora.use_rslora"].get<bool>();
    if (saved.contains("lora.dropout")) {
      const nlohmann::json& dropout = saved["lora.dropout"];
      if (!dropout.is_number() || !(dropout.get<double>() >= 0) || !(dropout.get<double>() < 1)) {
        return bad("lora.dropout");
      }
      lora.dropout = dropout.get<float>();
    }
    const nlohmann::json targets = saved.value("lora.target_modules", nlohmann::json());
    if (!targets.is_array() || targets.empty()) return bad("lora.target_modules");
    for (const auto& t : targets) {
      if (!t.is_string()) return bad("lora.target_modules");
      lora.target_modules.push_back(t.get<std::string>());
    }
    if (!saved.contains("model.init_from") || !saved["model.init_from"].is_string()) {
      return bad("model.init_from");
    }
    m.init_from = saved["model.init_from"].get<std::string>();
  }
  if (m.head_size == 0 && m.n_embd % m.n_head != 0) {
    return DataLossError("checkpoint " + dir + ": manifest metadata.run has model.n_embd " +
                         std::to_string(m.n_embd) + " not divisible by model.n_head " +
                         std::to_string(m.n_head));
  }
  if (Status size = CheckModelSize(m); !size.ok()) {
    return DataLossError("checkpoint " + dir + ": manifest metadata.run: " + size.message());
  }
  if (m.lora.enabled()) {
    if (StatusOr<LoraLayout> layout = LoraLayout::For(m); !layout.ok()) {
      return DataLossError("checkpoint " + dir +
                           ": manifest metadata.run: " + layout.status().message());
    }
  }
  return m;
}

}  // namespace hoist::runtime
