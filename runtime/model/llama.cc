// The Llama family (transformers' LlamaForCausalLM): the rotary block as it is, with no biases,
// SwiGLU and Llama 3's rope_scaling where config.json sets it (runtime/model/decoder.h).
#include "runtime/model/decoder_family.h"

namespace hoist::runtime {

namespace {

constexpr DecoderTraits kLlamaTraits{};

const DecoderHfKeys kLlamaKeys{.family = ModelFamily::kLlama};

StatusOr<ModelConfig> LlamaFromHf(const nlohmann::json& config, const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(ModelConfig m, DecoderFromHf(config, path, kLlamaKeys));
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    HOIST_RETURN_IF_ERROR(OnlyAllowed(config, path, key, false, "hoist's Llama has no biases"));
  }
  HOIST_RETURN_IF_ERROR(OnlyAllowed(config, path, "pretraining_tp", 1, "only 1 is read"));
  if (m.sliding_window != 0) {
    return InvalidArgumentError(path +
                                ": sliding_window is set; a Llama attends every position "
                                "(a Mistral config.json has model_type \"mistral\")");
  }
  return m;
}

nlohmann::json LlamaHfConfig(const ModelConfig& model, const nlohmann::json& base) {
  // transformers' Llama defaults for the keys its loader reads.
  const nlohmann::json defaults = {{"architectures", {"LlamaForCausalLM"}},
                                   {"attention_bias", false},
                                   {"attention_dropout", 0.0},
                                   {"bos_token_id", 1},
                                   {"eos_token_id", 2},
                                   {"initializer_range", 0.02},
                                   {"mlp_bias", false},
                                   {"model_type", "llama"},
                                   {"pretraining_tp", 1},
                                   {"use_cache", true}};
  return DecoderHfConfig(model, base, defaults, kLlamaKeys);
}

}  // namespace

const ModelFamilySpec& LlamaFamily() {
  static const ModelFamilySpec spec = DecoderFamilySpec(
      ModelFamily::kLlama, &kLlamaTraits, {"LlamaForCausalLM"}, &LlamaFromHf, &LlamaHfConfig);
  return spec;
}

}  // namespace hoist::runtime
