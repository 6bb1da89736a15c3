// The Qwen3 family (transformers' Qwen3ForCausalLM): Llama's block with an RMSNorm over each
// query and each key head (q_norm, k_norm, before the rotation), no biases, a head_dim of its own
// (128 where config.json leaves it out), and a sliding window where use_sliding_window turns it
// on (runtime/model/decoder.h).
#include "runtime/model/decoder_family.h"

namespace hoist::runtime {

namespace {

constexpr DecoderTraits kQwen3Traits{.qk_norm = true};

const DecoderHfKeys kQwen3Keys{.family = ModelFamily::kQwen3, .head_dim = 128};

StatusOr<ModelConfig> Qwen3FromHf(const nlohmann::json& config, const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(ModelConfig m, DecoderFromHf(config, path, kQwen3Keys));
  HOIST_RETURN_IF_ERROR(
      OnlyAllowed(config, path, "attention_bias", false, "hoist's Qwen3 has no biases"));
  HOIST_RETURN_IF_ERROR(ReadWindowSwitch(config, path, &m));
  return m;
}

nlohmann::json Qwen3HfConfig(const ModelConfig& model, const nlohmann::json& base) {
  // transformers' Qwen3 defaults for the keys its loader reads.
  const nlohmann::json defaults = {{"architectures", {"Qwen3ForCausalLM"}},
                                   {"attention_bias", false},
                                   {"attention_dropout", 0.0},
                                   {"bos_token_id", nullptr},
                                   {"eos_token_id", nullptr},
                                   {"initializer_range", 0.02},
                                   {"max_window_layers", model.n_layer},
                                   {"model_type", "qwen3"},
                                   {"use_cache", true},
                                   {"use_sliding_window", model.sliding_window != 0}};
  return DecoderHfConfig(model, base, defaults, kQwen3Keys);
}

}  // namespace

const ModelFamilySpec& Qwen3Family() {
  static const ModelFamilySpec spec = DecoderFamilySpec(
      ModelFamily::kQwen3, &kQwen3Traits, {"Qwen3ForCausalLM"}, &Qwen3FromHf, &Qwen3HfConfig);
  return spec;
}

}  // namespace hoist::runtime
