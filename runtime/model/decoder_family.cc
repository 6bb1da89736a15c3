#include "runtime/model/decoder_family.h"

#include <algorithm>
#include <utility>

#include "runtime/model/hf_keys.h"

namespace hoist::runtime {

namespace {

// The rotary frequencies: rope_theta and rope_scaling (transformers 4), or rope_parameters
// holding both (transformers 5); default or Llama 3's frequencies.
Status ReadRope(const nlohmann::json& config, const std::string& path, ModelConfig* m) {
  auto bad = [&](const std::string& key, const std::string& what) {
    return InvalidArgumentError(path + ": " + key + " " + what);
  };
  const bool v5 = config.contains("rope_parameters") && config["rope_parameters"].is_object();
  const nlohmann::json& rope = v5 ? config["rope_parameters"] : config;
  const std::string rope_key = v5 ? "rope_parameters." : "";
  HOIST_ASSIGN_OR_RETURN(m->rope_theta, hf::Number(rope, path, "rope_theta", 10000.0));
  if (!(m->rope_theta > 0)) return bad(rope_key + "rope_theta", "must be > 0");
  const nlohmann::json* scaling = nullptr;
  if (v5) {
    scaling = &config["rope_parameters"];
  } else if (config.contains("rope_scaling") && config["rope_scaling"].is_object()) {
    scaling = &config["rope_scaling"];
  } else if (config.contains("rope_scaling") && !config["rope_scaling"].is_null()) {
    return bad("rope_scaling", "is neither null nor an object");
  }
  if (scaling == nullptr) return Status::Ok();
  const std::string where = v5 ? "rope_parameters" : "rope_scaling";
  const std::string where_path = path + " " + where;
  HOIST_ASSIGN_OR_RETURN(std::string type, hf::Text(*scaling, where_path, "rope_type", ""));
  if (type.empty()) {
    HOIST_ASSIGN_OR_RETURN(type, hf::Text(*scaling, where_path, "type", "default"));
  }
  if (type == "llama3") {
    RopeScalingConfig& s = m->rope_scaling;
    s.llama3 = true;
    HOIST_ASSIGN_OR_RETURN(s.factor, hf::Number(*scaling, path, "factor", 8.0));
    HOIST_ASSIGN_OR_RETURN(s.low_freq_factor, hf::Number(*scaling, path, "low_freq_factor", 1.0));
    HOIST_ASSIGN_OR_RETURN(s.high_freq_factor, hf::Number(*scaling, path, "high_freq_factor", 4.0));
    HOIST_RETURN_IF_ERROR(hf::Dimension(*scaling, where_path, "original_max_position_embeddings",
                                        &s.original_max_position_embeddings));
    if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor)) {
      return bad(where, "needs factor > 0 and high_freq_factor > low_freq_factor > 0");
    }
  } else if (type != "default") {
    return bad(where + ".rope_type", "is \"" + type + "\"; hoist computes the default rotary " +
                                         "frequencies or Llama 3's (\"llama3\")");
  }
  return Status::Ok();
}

}  // namespace

Status OnlyAllowed(const nlohmann::json& config, const std::string& path, const char* key,
                   const nlohmann::json& allowed, const std::string& what) {
  if (!config.contains(key) || config[key].is_null() || config[key] == allowed) {
    return Status::Ok();
  }
  return InvalidArgumentError(path + ": " + key + " is " + config[key].dump() + "; " + what);
}

Status ReadWindowSwitch(const nlohmann::json& config, const std::string& path, ModelConfig* m) {
  HOIST_ASSIGN_OR_RETURN(const bool on, hf::Flag(config, path, "use_sliding_window", false));
  int from = 28;
  if (config.contains("max_window_layers") && !config["max_window_layers"].is_null()) {
    const nlohmann::json& layers = config["max_window_layers"];
    if (!layers.is_number_integer() || layers.get<int64_t>() < 0) {
      return InvalidArgumentError(path + ": max_window_layers is " + layers.dump() +
                                  ", not an integer >= 0");
    }
    from = static_cast<int>(std::min<int64_t>(layers.get<int64_t>(), m->n_layer));
  }
  if (!on) {
    m->sliding_layers.assign(static_cast<size_t>(m->n_layer), false);
  } else if (m->sliding_layers.empty()) {
    for (int l = 0; l < m->n_layer; ++l) m->sliding_layers.push_back(l >= from);
  }
  return Status::Ok();
}

void SetNumber(nlohmann::json& config, const char* key, const nlohmann::json& value) {
  if (config.contains(key) && config[key].is_number() && value.is_number() &&
      config[key].get<double>() == value.get<double>()) {
    return;
  }
  config[key] = value;
}

StatusOr<ModelConfig> DecoderFromHf(const nlohmann::json& config, const std::string& path,
                                    const DecoderHfKeys& keys) {
  auto bad = [&](const std::string& key, const std::string& what) {
    return InvalidArgumentError(path + ": " + key + " " + what);
  };
  const char* name = ModelDisplayName(keys.family);
  ModelConfig m;
  m.family = keys.family;
  const std::pair<const char*, int*> dims[] = {
      {"num_hidden_layers", &m.n_layer}, {"num_attention_heads", &m.n_head},
      {"hidden_size", &m.n_embd},        {"intermediate_size", &m.intermediate_size},
      {"vocab_size", &m.vocab_size},     {"max_position_embeddings", &m.n_positions}};
  for (const auto& [key, value] : dims) {
    HOIST_RETURN_IF_ERROR(hf::Dimension(config, path, key, value));
  }
  m.n_kv_head = m.n_head;
  if (config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()) {
    HOIST_RETURN_IF_ERROR(hf::Dimension(config, path, "num_key_value_heads", &m.n_kv_head));
  }
  m.seq_len = m.n_positions;
  if (m.n_head % m.n_kv_head != 0) {
    return bad("num_key_value_heads", "does not divide num_attention_heads");
  }
  // head_dim: where it is hidden_size / num_attention_heads it is left implicit, so that the
  // model compares equal to one described without it.
  int head_dim = keys.head_dim;
  if (config.contains("head_dim") && !config["head_dim"].is_null()) {
    HOIST_RETURN_IF_ERROR(hf::Dimension(config, path, "head_dim", &head_dim));
  }
  if (head_dim == 0 || (m.n_embd % m.n_head == 0 && head_dim == m.n_embd / m.n_head)) {
    if (m.n_embd % m.n_head != 0) {
      return bad("hidden_size", "is not divisible by num_attention_heads, and head_dim is not set");
    }
  } else {
    m.head_size = head_dim;
  }
  if (m.head_dim() % 2 != 0) return bad("head_dim", "is odd: RoPE rotates pairs of its elements");
  HOIST_ASSIGN_OR_RETURN(const std::string act,
                         hf::Text(config, path, keys.activation_key, keys.activations.front()));
  bool known = false;
  for (const std::string& a : keys.activations) known = known || act == a;
  if (!known) {
    return bad(keys.activation_key, "is \"" + act + "\"; " + name + "'s MLP computes \"" +
                                        keys.activations.front() + "\"");
  }
  HOIST_ASSIGN_OR_RETURN(double eps, hf::Number(config, path, "rms_norm_eps", keys.rms_norm_eps));
  if (!(eps > 0)) return bad("rms_norm_eps", "must be > 0");
  m.rms_norm_eps = static_cast<float>(eps);
  HOIST_ASSIGN_OR_RETURN(m.tie_word_embeddings,
                         hf::Flag(config, path, "tie_word_embeddings", keys.tied));
  HOIST_RETURN_IF_ERROR(ReadRope(config, path, &m));
  if (config.contains("sliding_window") && !config["sliding_window"].is_null()) {
    HOIST_RETURN_IF_ERROR(hf::Dimension(config, path, "sliding_window", &m.sliding_window));
  }
  HOIST_ASSIGN_OR_RETURN(m.sliding_layers, hf::LayerTypes(config, path, m.n_layer));
  return m;
}

nlohmann::json DecoderHfConfig(const ModelConfig& model, const nlohmann::json& base,
                               const nlohmann::json& defaults, const DecoderHfKeys& keys) {
  const bool fresh = !base.is_object() || base.empty();
  nlohmann::json config = fresh ? defaults : base;
  if (fresh) config[keys.activation_key] = keys.activations.front();
  config["hidden_size"] = model.n_embd;
  config["intermediate_size"] = model.intermediate_size;
  config["num_hidden_layers"] = model.n_layer;
  config["num_attention_heads"] = model.n_head;
  config["num_key_value_heads"] = model.kv_heads();
  if (fresh || config.contains("head_dim") || model.head_size != 0) {
    config["head_dim"] = model.head_dim();
  }
  config["max_position_embeddings"] = model.positions();
  config["vocab_size"] = model.vocab_size;
  config["rms_norm_eps"] = hf::ShortestDouble(model.rms_norm_eps);
  config["tie_word_embeddings"] = model.tie_word_embeddings;
  if (config.contains("sliding_window") || model.sliding_window != 0) {
    config["sliding_window"] =
        model.sliding_window != 0 ? nlohmann::json(model.sliding_window) : nlohmann::json();
  }
  if (config.contains("layer_types") || !model.sliding_layers.empty()) {
    nlohmann::json types = nlohmann::json::array();
    for (int l = 0; l < model.n_layer; ++l) {
      const bool sliding =
          model.sliding_layers.empty() || model.sliding_layers[static_cast<size_t>(l)];
      types.push_back(sliding ? "sliding_attention" : "full_attention");
    }
    config["layer_types"] = types;
  }
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

ModelFamilySpec DecoderFamilySpec(
    ModelFamily family, const DecoderTraits* traits, std::vector<std::string> architectures,
    StatusOr<ModelConfig> (*from_hf)(const nlohmann::json&, const std::string&),
    nlohmann::json (*to_hf)(const ModelConfig&, const nlohmann::json&)) {
  using M = LoraModule;
  return {
      .family = family,
      .architectures = std::move(architectures),
      .from_hf = from_hf,
      .to_hf = to_hf,
      .hf_tensors =
          [](const ModelConfig& model) {
            std::vector<HfTensorPlace> places;
            for (DecoderHfTensor& t : DecoderHfTensors(model)) {
              places.push_back({std::move(t.name), std::move(t.shape), t.unit, t.offset, false});
            }
            return places;
          },
      .decoder = traits,
      .create = &CreateAs<DecoderModel>,
      .activation_footprint = &DecoderModel::ActivationFootprint,
      .units = [](const ModelConfig& config) { return DecoderLayout::For(config).Units(); },
      // An untied head counted either way.
      .parameter_bound =
          [](const ModelConfig& m) {
            const DecoderTraits& t = TraitsOf(m.family);
            const long double C = m.n_embd, L = m.n_layer, Vp = m.padded_vocab_size();
            const long double hd = m.head_dim(), q = m.n_head * hd;
            const long double qkv = q + 2.0L * m.kv_heads() * hd, I = m.intermediate_size;
            const long double block = C * qkv + q * C + 3 * C * I + 2 * C + (t.qkv_bias ? qkv : 0) +
                                      (t.qk_norm ? 2 * hd : 0) + (t.sandwich_norms ? 2 * C : 0);
            return 2 * Vp * C + L * block + C;
          },
      .lora_candidates = [](const ModelConfig& m) -> std::vector<LoraModule> {
        const int64_t C = m.n_embd, hd = m.head_dim(), q = int64_t{m.n_head} * hd;
        const int64_t kv = int64_t{m.kv_heads()} * hd, qkv = q + 2 * kv;
        const int64_t I = m.intermediate_size;
        return {{M::kQProj, "self_attn.q_proj", C, q, 0, qkv},
                {M::kKProj, "self_attn.k_proj", C, kv, q, qkv},
                {M::kVProj, "self_attn.v_proj", C, kv, q + kv, qkv},
                {M::kOProj, "self_attn.o_proj", q, C, 0, C},
                {M::kGateProj, "mlp.gate_proj", C, I, 0, 2 * I},
                {M::kUpProj, "mlp.up_proj", C, I, I, 2 * I},
                {M::kDownProj, "mlp.down_proj", I, C, 0, C}};
      },
      .block_path = "model.layers.",
      .outside_layers = {"lm_head", "model.embed_tokens"},
      .default_lora_targets = {"q_proj", "v_proj"},
      .fan_in_fan_out = false,
      // q and o 2 C NH hd, k and v 2 C NKV hd, the gated MLP 3 C I.
      .block_matmul_weights =
          [](const ModelConfig& m) {
            const double C = m.n_embd, hd = m.head_dim();
            return 2 * C * m.n_head * hd + 2 * C * m.kv_heads() * hd + 3 * C * m.intermediate_size;
          },
      .last_projection_weights =
          [](const ModelConfig& m) { return static_cast<double>(m.n_embd) * m.intermediate_size; },
  };
}

}  // namespace hoist::runtime
