// The Mistral family (transformers' MistralForCausalLM): Llama's block with sliding-window
// attention on every layer where config.json sets sliding_window (a query attends the
// sliding_window latest positions, itself included), and a head_dim of its own where set
// (runtime/model/decoder.h).
#include "runtime/model/decoder_family.h"

namespace hoist::runtime {

namespace {

constexpr DecoderTraits kMistralTraits{};

const DecoderHfKeys kMistralKeys{.family = ModelFamily::kMistral};

StatusOr<ModelConfig> MistralFromHf(const nlohmann::json& config, const std::string& path) {
  return DecoderFromHf(config, path, kMistralKeys);
}

nlohmann::json MistralHfConfig(const ModelConfig& model, const nlohmann::json& base) {
  // transformers' Mistral defaults for the keys its loader reads.
  const nlohmann::json defaults = {{"architectures", {"MistralForCausalLM"}},
                                   {"attention_dropout", 0.0},
                                   {"bos_token_id", 1},
                                   {"eos_token_id", 2},
                                   {"initializer_range", 0.02},
                                   {"model_type", "mistral"},
                                   {"sliding_window", nullptr},
                                   {"use_cache", true}};
  return DecoderHfConfig(model, base, defaults, kMistralKeys);
}

}  // namespace

const ModelFamilySpec& MistralFamily() {
  static const ModelFamilySpec spec =
      DecoderFamilySpec(ModelFamily::kMistral, &kMistralTraits, {"MistralForCausalLM"},
                        &MistralFromHf, &MistralHfConfig);
  return spec;
}

}  // namespace hoist::runtime
