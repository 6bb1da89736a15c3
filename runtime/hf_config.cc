#include "runtime/hf_config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "core/check.h"
#include "core/file_system.h"
#include "runtime/json_reader.h"
#include "runtime/model.h"
#include "runtime/model_limits.h"

namespace hoist::runtime {
namespace {

// A positive integer dimension `key` of `config`, at most its bound (runtime/model_limits.h),
// into `value`. Each way to miss says which it is: absent, not an integer, or out of range.
Status Dimension(const nlohmann::json& config, const std::string& path, const char* key,
                 int* value) {
  const int64_t max = MaxModelDimension(key);
  HOIST_CHECK_GT(max, 0) << key << " has no bound";
  if (!config.contains(key) || config[key].is_null()) {
    return InvalidArgumentError(path + ": " + key +
                                " is missing; a config.json of this model_type sets it");
  }
  const nlohmann::json& number = config[key];
  if (!number.is_number_integer()) {
    return InvalidArgumentError(path + ": " + key + " is " + number.dump() + ", not an integer");
  }
  // A number beyond int64 arrives unsigned; compared as such it is simply too large.
  const bool too_large = number.is_number_unsigned() ? number.get<uint64_t>() > uint64_t(max)
                                                     : number.get<int64_t>() > max;
  if (too_large) {
    return InvalidArgumentError(path + ": " + key + " is " + number.dump() + ", more than " +
                                ModelBoundText(max) +
                                ", the most hoist accepts (far above any published model)");
  }
  if (number.get<int64_t>() <= 0) {
    return InvalidArgumentError(path + ": " + key + " is " + number.dump() +
                                "; it must be a positive integer");
  }
  *value = number.get<int>();
  return Status::Ok();
}

// The double with the shortest decimal form that rounds to `value` (1e-05 for the float 1e-5f),
// so that a float read from a config.json is written back as it was.
double ShortestDouble(float value) {
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), value);
  *end.ptr = '\0';
  return std::strtod(text, nullptr);
}

// A number `key` of `config` (absent: `fallback`).
StatusOr<double> Number(const nlohmann::json& config, const std::string& path, const char* key,
                        double fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_number()) {
    return InvalidArgumentError(path + ": " + key + " is " + config[key].dump() + ", not a number");
  }
  return config[key].get<double>();
}

// A string `key` of `config` (absent or null: `fallback`). nlohmann's value() would throw on
// another type; a config.json is the world's input, so that is an error naming the key.
StatusOr<std::string> Text(const nlohmann::json& config, const std::string& path, const char* key,
                           const std::string& fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_string()) {
    return InvalidArgumentError(path + ": " + key + " is " + config[key].dump() + ", not a string");
  }
  return config[key].get<std::string>();
}

// A true/false `key` of `config` (absent or null: `fallback`).
StatusOr<bool> Flag(const nlohmann::json& config, const std::string& path, const char* key,
                    bool fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_boolean()) {
    return InvalidArgumentError(path + ": " + key + " is " + config[key].dump() +
                                ", not true or false");
  }
  return config[key].get<bool>();
}

StatusOr<ModelConfig> Gpt2FromHf(const nlohmann::json& config, const std::string& path) {
  auto bad = [&](const std::string& key, const std::string& what) {
    return InvalidArgumentError(path + ": " + key + " " + what);
  };
  ModelConfig m;
  m.family = ModelFamily::kGpt2;
  const std::pair<const char*, int*> dims[] = {{"n_layer", &m.n_layer},
                                               {"n_head", &m.n_head},
                                               {"n_embd", &m.n_embd},
                                               {"vocab_size", &m.vocab_size},
                                               {"n_positions", &m.n_positions}};
  for (const auto& [key, value] : dims) HOIST_RETURN_IF_ERROR(Dimension(config, path, key, value));
  m.tie_word_embeddings = true;
  m.seq_len = m.n_positions;
  if (m.n_embd % m.n_head != 0) return bad("n_embd", "is not divisible by n_head");
  HOIST_ASSIGN_OR_RETURN(const std::string activation,
                         Text(config, path, "activation_function", "gelu_new"));
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh") {
    return bad("activation_function",
               "is \"" + activation + "\"; hoist's GPT-2 computes the tanh GELU (\"gelu_new\")");
  }
  if (config.contains("layer_norm_epsilon") &&
      (!config["layer_norm_epsilon"].is_number() ||
       std::abs(config["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12)) {
    return bad("layer_norm_epsilon",
               "is " + config["layer_norm_epsilon"].dump() + "; hoist's GPT-2 layernorm uses 1e-5");
  }
  if (config.contains("n_inner") && !config["n_inner"].is_null() &&
      config["n_inner"] != nlohmann::json(4 * m.n_embd)) {
    return bad("n_inner", "is " + config["n_inner"].dump() + "; hoist's GPT-2 MLP is 4 * n_embd");
  }
  HOIST_ASSIGN_OR_RETURN(const bool tied, Flag(config, path, "tie_word_embeddings", true));
  if (!tied) {
    return bad("tie_word_embeddings", "is false; hoist's GPT-2 ties the LM head to wte");
  }
  HOIST_ASSIGN_OR_RETURN(const bool by_layer,
                         Flag(config, path, "scale_attn_by_inverse_layer_idx", false));
  HOIST_ASSIGN_OR_RETURN(const bool upcast, Flag(config, path, "reorder_and_upcast_attn", false));
  HOIST_ASSIGN_OR_RETURN(const bool scaled, Flag(config, path, "scale_attn_weights", true));
  if (by_layer || upcast || !scaled) {
    return bad("scale_attn_*",
               "select an attention variant hoist's GPT-2 does not compute (it scales by "
               "1/sqrt(head size) only)");
  }
  return m;
}

nlohmann::json Gpt2HfConfig(const ModelConfig& model, const nlohmann::json& base) {
  nlohmann::json config = base;
  if (!base.is_object() || base.empty()) {
    // transformers' GPT-2 defaults for the keys its loader reads.
    config = {{"activation_function", "gelu_new"},
              {"architectures", {"GPT2LMHeadModel"}},
              {"attn_pdrop", 0.1},
              {"bos_token_id", 50256},
              {"embd_pdrop", 0.1},
              {"eos_token_id", 50256},
              {"initializer_range", 0.02},
              {"layer_norm_epsilon", 1e-05},
              {"model_type", "gpt2"},
              {"n_inner", nullptr},
              {"resid_pdrop", 0.1},
              {"scale_attn_by_inverse_layer_idx", false},
              {"scale_attn_weights", true},
              {"reorder_and_upcast_attn", false},
              {"tie_word_embeddings", true},
              {"use_cache", true}};
  }
  config["n_layer"] = model.n_layer;
  config["n_head"] = model.n_head;
  config["n_embd"] = model.n_embd;
  config["vocab_size"] = model.vocab_size;
  config["n_positions"] = model.positions();
  if (config.contains("n_ctx")) config["n_ctx"] = model.positions();
  return config;
}

StatusOr<ModelConfig> LlamaFromHf(const nlohmann::json& config, const std::string& path) {
  auto bad = [&](const std::string& key, const std::string& what) {
    return InvalidArgumentError(path + ": " + key + " " + what);
  };
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  const std::pair<const char*, int*> dims[] = {
      {"num_hidden_layers", &m.n_layer}, {"num_attention_heads", &m.n_head},
      {"hidden_size", &m.n_embd},        {"intermediate_size", &m.intermediate_size},
      {"vocab_size", &m.vocab_size},     {"max_position_embeddings", &m.n_positions}};
  for (const auto& [key, value] : dims) HOIST_RETURN_IF_ERROR(Dimension(config, path, key, value));
  m.n_kv_head = m.n_head;
  if (config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()) {
    HOIST_RETURN_IF_ERROR(Dimension(config, path, "num_key_value_heads", &m.n_kv_head));
  }
  m.seq_len = m.n_positions;
  if (m.n_embd % m.n_head != 0) {
    return bad("hidden_size", "is not divisible by num_attention_heads");
  }
  if (m.n_head % m.n_kv_head != 0) {
    return bad("num_key_value_heads", "does not divide num_attention_heads");
  }
  if (config.contains("head_dim") && !config["head_dim"].is_null() &&
      config["head_dim"] != nlohmann::json(m.n_embd / m.n_head)) {
    return bad("head_dim",
               "is " + config["head_dim"].dump() +
                   "; hoist's Llama has head_dim = hidden_size / num_attention_heads (" +
                   std::to_string(m.n_embd / m.n_head) + ")");
  }
  if (m.head_dim() % 2 != 0) return bad("hidden_size", "gives an odd head size: RoPE pairs them");
  HOIST_ASSIGN_OR_RETURN(const std::string act, Text(config, path, "hidden_act", "silu"));
  if (act != "silu") {
    return bad("hidden_act", "is \"" + act + "\"; hoist's Llama MLP is SwiGLU (\"silu\")");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (config.contains(key) && config[key] != nlohmann::json(false)) {
      return bad(key, "is " + config[key].dump() + "; hoist's Llama has no biases");
    }
  }
  if (config.contains("pretraining_tp") && config["pretraining_tp"] != nlohmann::json(1)) {
    return bad("pretraining_tp", "is " + config["pretraining_tp"].dump() + "; only 1 is read");
  }
  HOIST_ASSIGN_OR_RETURN(double eps, Number(config, path, "rms_norm_eps", 1e-6));
  if (!(eps > 0)) return bad("rms_norm_eps", "must be > 0");
  m.rms_norm_eps = static_cast<float>(eps);
  HOIST_ASSIGN_OR_RETURN(m.tie_word_embeddings, Flag(config, path, "tie_word_embeddings", false));

  // Rotary positions: rope_theta and rope_scaling (transformers 4), or rope_parameters holding
  // both (transformers 5).
  const bool v5 = config.contains("rope_parameters") && config["rope_parameters"].is_object();
  const nlohmann::json& rope = v5 ? config["rope_parameters"] : config;
  const std::string rope_key = v5 ? "rope_parameters." : "";
  HOIST_ASSIGN_OR_RETURN(m.rope_theta, Number(rope, path, "rope_theta", 10000.0));
  if (!(m.rope_theta > 0)) return bad(rope_key + "rope_theta", "must be > 0");
  const nlohmann::json* scaling = nullptr;
  if (v5) {
    scaling = &config["rope_parameters"];
  } else if (config.contains("rope_scaling") && config["rope_scaling"].is_object()) {
    scaling = &config["rope_scaling"];
  } else if (config.contains("rope_scaling") && !config["rope_scaling"].is_null()) {
    return bad("rope_scaling", "is neither null nor an object");
  }
  if (scaling != nullptr) {
    const std::string where = v5 ? "rope_parameters" : "rope_scaling";
    const std::string where_path = path + " " + where;
    HOIST_ASSIGN_OR_RETURN(std::string type, Text(*scaling, where_path, "rope_type", ""));
    if (type.empty()) {
      HOIST_ASSIGN_OR_RETURN(type, Text(*scaling, where_path, "type", "default"));
    }
    if (type == "llama3") {
      RopeScalingConfig& s = m.rope_scaling;
      s.llama3 = true;
      HOIST_ASSIGN_OR_RETURN(s.factor, Number(*scaling, path, "factor", 8.0));
      HOIST_ASSIGN_OR_RETURN(s.low_freq_factor, Number(*scaling, path, "low_freq_factor", 1.0));
      HOIST_ASSIGN_OR_RETURN(s.high_freq_factor, Number(*scaling, path, "high_freq_factor", 4.0));
      HOIST_RETURN_IF_ERROR(Dimension(*scaling, path + " " + where,
                                      "original_max_position_embeddings",
                                      &s.original_max_position_embeddings));
      if (!(s.factor > 0) || !(s.low_freq_factor > 0) ||
          !(s.high_freq_factor > s.low_freq_factor)) {
        return bad(where, "needs factor > 0 and high_freq_factor > low_freq_factor > 0");
      }
    } else if (type != "default") {
      return bad(where + ".rope_type", "is \"" + type +
                                           "\"; hoist's Llama computes the default rotary "
                                           "frequencies or Llama 3's (\"llama3\")");
    }
  }
  return m;
}

nlohmann::json LlamaHfConfig(const ModelConfig& model, const nlohmann::json& base) {
  nlohmann::json config = base;
  if (!base.is_object() || base.empty()) {
    // transformers' Llama defaults for the keys its loader reads.
    config = {{"architectures", {"LlamaForCausalLM"}},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"bos_token_id", 1},
              {"eos_token_id", 2},
              {"hidden_act", "silu"},
              {"initializer_range", 0.02},
              {"mlp_bias", false},
              {"model_type", "llama"},
              {"pretraining_tp", 1},
              {"use_cache", true}};
  }
  config["hidden_size"] = model.n_embd;
  config["intermediate_size"] = model.intermediate_size;
  config["num_hidden_layers"] = model.n_layer;
  config["num_attention_heads"] = model.n_head;
  config["num_key_value_heads"] = model.kv_heads();
  config["head_dim"] = model.head_dim();
  config["max_position_embeddings"] = model.positions();
  config["vocab_size"] = model.vocab_size;
  config["rms_norm_eps"] = ShortestDouble(model.rms_norm_eps);
  config["tie_word_embeddings"] = model.tie_word_embeddings;
  nlohmann::json rope = {{"rope_theta", model.rope_theta}, {"rope_type", "default"}};
  if (model.rope_scaling.llama3) {
    const RopeScalingConfig& s = model.rope_scaling;
    rope = {{"rope_theta", model.rope_theta},
            {"rope_type", "llama3"},
            {"factor", s.factor},
            {"low_freq_factor", s.low_freq_factor},
            {"high_freq_factor", s.high_freq_factor},
            {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  if (config.contains("rope_parameters") || !config.contains("rope_theta")) {
    // transformers 5's form (and what a fresh export writes).
    config.erase("rope_theta");
    config.erase("rope_scaling");
    config["rope_parameters"] = rope;
  } else {
    config["rope_theta"] = model.rope_theta;
    rope.erase("rope_theta");
    config["rope_scaling"] = model.rope_scaling.llama3 ? rope : nlohmann::json();
  }
  return config;
}

}  // namespace

StatusOr<ModelConfig> ModelConfigFromHf(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) return InvalidArgumentError(path + " is not a JSON object");
  HOIST_ASSIGN_OR_RETURN(const std::string type, Text(config, path, "model_type", ""));
  if (type == "gpt2" || type == "llama") {
    HOIST_ASSIGN_OR_RETURN(ModelConfig model,
                           type == "gpt2" ? Gpt2FromHf(config, path) : LlamaFromHf(config, path));
    if (Status size = CheckModelSize(model); !size.ok()) {
      return InvalidArgumentError(path + ": " + size.message());
    }
    return model;
  }
  return InvalidArgumentError(path + ": model_type is \"" + type +
                              "\"; hoist computes \"gpt2\" and \"llama\" models");
}

StatusOr<HfModelConfig> ReadHfConfig(const std::string& path) {
  StatusOr<nlohmann::json> json = ReadJsonFile(FileSystem::Posix(), path);
  if (!json.ok()) {
    return Status(json.status().code(),
                  "config.json " + path + " could not be read (" + json.status().message() + ")");
  }
  HfModelConfig read;
  read.json = std::move(json).value();
  if (!read.json.is_object()) {
    return InvalidArgumentError(path + " is not a JSON object");
  }
  HOIST_ASSIGN_OR_RETURN(read.model, ModelConfigFromHf(read.json, path));
  return read;
}

std::string HfConfigText(const ModelConfig& model, DType dtype, const nlohmann::json& base) {
  nlohmann::json config =
      model.family == ModelFamily::kLlama ? LlamaHfConfig(model, base) : Gpt2HfConfig(model, base);
  // transformers 5 writes "dtype"; 4 wrote "torch_dtype", which a config.json saved by it keeps
  // (with the type of this export, so that torch_dtype="auto" loads what the files hold).
  const char* dtype_key =
      config.contains("torch_dtype") && !config.contains("dtype") ? "torch_dtype" : "dtype";
  config[dtype_key] = dtype == DType::kFloat32    ? "float32"
                      : dtype == DType::kBFloat16 ? "bfloat16"
                                                  : "float16";
  return config.dump(2) + "\n";
}

}  // namespace hoist::runtime
