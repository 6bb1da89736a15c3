// The Gemma 2 family (transformers' Gemma2ForCausalLM): GeGLU (the tanh GELU), RMSNorms that
// scale by (1 + w) in fp32 before and after both the attention and the MLP, the embedding's
// output times sqrt(hidden_size), attention scores scaled by query_pre_attn_scalar^-1/2 and
// soft-capped (attn_logit_softcapping), local (sliding-window) and global layers alternating as
// layer_types says (the even layers local where it is absent), the final logits soft-capped
// (final_logit_softcapping), and the head tied to the embedding (runtime/model/decoder.h).
#include <cmath>
#include <string>
#include <utility>

#include "runtime/model/decoder_family.h"
#include "runtime/model/hf_keys.h"

namespace hoist::runtime {

namespace {

constexpr DecoderTraits kGemma2Traits{
    .sandwich_norms = true, .unit_offset_norm = true, .gelu_gate = true, .scaled_embedding = true};

const DecoderHfKeys kGemma2Keys{.family = ModelFamily::kGemma2,
                                .activation_key = "hidden_activation",
                                .activations = {"gelu_pytorch_tanh", "gelu_new"},
                                .head_dim = 256,
                                .tied = true};

StatusOr<ModelConfig> Gemma2FromHf(const nlohmann::json& config, const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(ModelConfig m, DecoderFromHf(config, path, kGemma2Keys));
  HOIST_RETURN_IF_ERROR(
      OnlyAllowed(config, path, "attention_bias", false, "hoist's Gemma 2 has no biases"));
  if (!m.tie_word_embeddings) {
    return InvalidArgumentError(path +
                                ": tie_word_embeddings is false; Gemma 2's head is the "
                                "embedding");
  }
  // A cap left out is transformers' default; a null one, none.
  auto cap = [&](const char* key, double fallback) -> StatusOr<double> {
    if (config.contains(key) && config[key].is_null()) return 0.0;
    return hf::Number(config, path, key, fallback);
  };
  HOIST_ASSIGN_OR_RETURN(m.query_pre_attn_scalar,
                         hf::Number(config, path, "query_pre_attn_scalar", 256.0));
  HOIST_ASSIGN_OR_RETURN(const double attn_cap, cap("attn_logit_softcapping", 50.0));
  HOIST_ASSIGN_OR_RETURN(const double final_cap, cap("final_logit_softcapping", 30.0));
  for (const auto& [key, value] : {std::pair{"query_pre_attn_scalar", m.query_pre_attn_scalar},
                                   std::pair{"attn_logit_softcapping", attn_cap},
                                   std::pair{"final_logit_softcapping", final_cap}}) {
    if (!(value >= 0) || !std::isfinite(value) || value > 1e30) {
      return InvalidArgumentError(path + ": " + key + " is " + std::to_string(value) +
                                  "; it must be a finite number >= 0");
    }
  }
  m.attn_logit_softcapping = static_cast<float>(attn_cap);
  m.final_logit_softcapping = static_cast<float>(final_cap);
  if (!config.contains("sliding_window")) m.sliding_window = 4096;  // transformers' default
  if (m.sliding_layers.empty()) {                                   // local, global, local, ...
    for (int l = 0; l < m.n_layer; ++l) m.sliding_layers.push_back(l % 2 == 0);
  }
  return m;
}

nlohmann::json Gemma2HfConfig(const ModelConfig& model, const nlohmann::json& base) {
  // transformers' Gemma 2 defaults for the keys its loader reads.
  const nlohmann::json defaults = {{"architectures", {"Gemma2ForCausalLM"}},
                                   {"attention_bias", false},
                                   {"attention_dropout", 0.0},
                                   {"bos_token_id", 2},
                                   {"eos_token_id", 1},
                                   {"hidden_act", "gelu_pytorch_tanh"},
                                   {"initializer_range", 0.02},
                                   {"model_type", "gemma2"},
                                   {"pad_token_id", 0},
                                   {"use_cache", true}};
  nlohmann::json config = DecoderHfConfig(model, base, defaults, kGemma2Keys);
  auto cap = [](float value) {
    return value > 0 ? nlohmann::json(hf::ShortestDouble(value)) : nlohmann::json();
  };
  SetNumber(config, "query_pre_attn_scalar", model.query_pre_attn_scalar);
  SetNumber(config, "attn_logit_softcapping", cap(model.attn_logit_softcapping));
  SetNumber(config, "final_logit_softcapping", cap(model.final_logit_softcapping));
  return config;
}

}  // namespace

const ModelFamilySpec& Gemma2Family() {
  static const ModelFamilySpec spec = DecoderFamilySpec(
      ModelFamily::kGemma2, &kGemma2Traits, {"Gemma2ForCausalLM"}, &Gemma2FromHf, &Gemma2HfConfig);
  return spec;
}

}  // namespace hoist::runtime
