// The Qwen2 family (transformers' Qwen2ForCausalLM, Qwen2 and Qwen2.5): Llama's block with biases
// on the query, key and value projections (none on o_proj), the head tied or not, and a sliding
// window where use_sliding_window turns it on (runtime/model/decoder.h).
#include "runtime/model/decoder_family.h"

namespace hoist::runtime {

namespace {

constexpr DecoderTraits kQwen2Traits{.qkv_bias = true};

const DecoderHfKeys kQwen2Keys{.family = ModelFamily::kQwen2};

StatusOr<ModelConfig> Qwen2FromHf(const nlohmann::json& config, const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(ModelConfig m, DecoderFromHf(config, path, kQwen2Keys));
  HOIST_RETURN_IF_ERROR(ReadWindowSwitch(config, path, &m));
  return m;
}

nlohmann::json Qwen2HfConfig(const ModelConfig& model, const nlohmann::json& base) {
  // transformers' Qwen2 defaults for the keys its loader reads.
  const nlohmann::json defaults = {{"architectures", {"Qwen2ForCausalLM"}},
                                   {"attention_dropout", 0.0},
                                   {"bos_token_id", nullptr},
                                   {"eos_token_id", nullptr},
                                   {"initializer_range", 0.02},
                                   {"max_window_layers", model.n_layer},
                                   {"model_type", "qwen2"},
                                   {"use_cache", true},
                                   {"use_sliding_window", model.sliding_window != 0}};
  return DecoderHfConfig(model, base, defaults, kQwen2Keys);
}

}  // namespace

const ModelFamilySpec& Qwen2Family() {
  static const ModelFamilySpec spec = DecoderFamilySpec(
      ModelFamily::kQwen2, &kQwen2Traits, {"Qwen2ForCausalLM"}, &Qwen2FromHf, &Qwen2HfConfig);
  return spec;
}

}  // namespace hoist::runtime
