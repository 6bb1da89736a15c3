#include "runtime/model/gpt2_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/convert.h"
#include "runtime/model/hf_keys.h"
#include "runtime/model/model.h"

namespace hoist::runtime {
namespace {

// transformers' names of the per-block tensors, in its state_dict order, and whether each is a
// Conv1D weight (stored (in, out)).
struct BlockName {
  int tensor;
  const char* suffix;
  bool conv1d;
};
constexpr BlockName kBlockNames[] = {
    {kLn1W, "ln_1.weight", false},           {kLn1B, "ln_1.bias", false},
    {kQkvW, "attn.c_attn.weight", true},     {kQkvB, "attn.c_attn.bias", false},
    {kAttProjW, "attn.c_proj.weight", true}, {kAttProjB, "attn.c_proj.bias", false},
    {kLn2W, "ln_2.weight", false},           {kLn2B, "ln_2.bias", false},
    {kFcW, "mlp.c_fc.weight", true},         {kFcB, "mlp.c_fc.bias", false},
    {kFcProjW, "mlp.c_proj.weight", true},   {kFcProjB, "mlp.c_proj.bias", false},
};
constexpr char kPrefix[] = "transformer.";

// hoist's shape of one layer's slice of `tensor`: (out, in) for the matmul weights.
std::vector<int64_t> HoistShape(const ModelConfig& m, int tensor) {
  const int64_t C = m.n_embd;
  switch (tensor) {
    case kWte: return {m.vocab_size, C};  // the real rows; the padding is hoist's own
    case kWpe: return {m.positions(), C};
    case kQkvW: return {3 * C, C};
    case kQkvB: return {3 * C};
    case kAttProjW: return {C, C};
    case kFcW: return {4 * C, C};
    case kFcB: return {4 * C};
    case kFcProjW: return {C, 4 * C};
    default: return {C};
  }
}

}  // namespace

std::vector<HfGpt2Tensor> HfGpt2Tensors(const ModelConfig& m) {
  std::vector<HfGpt2Tensor> tensors;
  const std::string prefix = kPrefix;
  tensors.push_back({kWte, 0, prefix + "wte.weight", HoistShape(m, kWte), false});
  tensors.push_back({kWpe, 0, prefix + "wpe.weight", HoistShape(m, kWpe), false});
  for (int l = 0; l < m.n_layer; ++l) {
    for (const BlockName& b : kBlockNames) {
      std::vector<int64_t> shape = HoistShape(m, b.tensor);
      if (b.conv1d) std::swap(shape[0], shape[1]);
      tensors.push_back(
          {b.tensor, l, prefix + "h." + std::to_string(l) + "." + b.suffix, shape, b.conv1d});
    }
  }
  tensors.push_back({kLnfW, 0, prefix + "ln_f.weight", HoistShape(m, kLnfW), false});
  tensors.push_back({kLnfB, 0, prefix + "ln_f.bias", HoistShape(m, kLnfB), false});
  return tensors;
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
  for (const auto& [key, value] : dims)
    HOIST_RETURN_IF_ERROR(hf::Dimension(config, path, key, value));
  m.tie_word_embeddings = true;
  m.seq_len = m.n_positions;
  if (m.n_embd % m.n_head != 0) return bad("n_embd", "is not divisible by n_head");
  HOIST_ASSIGN_OR_RETURN(const std::string activation,
                         hf::Text(config, path, "activation_function", "gelu_new"));
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
  HOIST_ASSIGN_OR_RETURN(const bool tied, hf::Flag(config, path, "tie_word_embeddings", true));
  if (!tied) {
    return bad("tie_word_embeddings", "is false; hoist's GPT-2 ties the LM head to wte");
  }
  HOIST_ASSIGN_OR_RETURN(const bool by_layer,
                         hf::Flag(config, path, "scale_attn_by_inverse_layer_idx", false));
  HOIST_ASSIGN_OR_RETURN(const bool upcast,
                         hf::Flag(config, path, "reorder_and_upcast_attn", false));
  HOIST_ASSIGN_OR_RETURN(const bool scaled, hf::Flag(config, path, "scale_attn_weights", true));
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

std::vector<HfTensorPlace> Gpt2HfTensorPlaces(const ModelConfig& model) {
  std::vector<HfTensorPlace> places;
  const ParamLayout layout = ParamLayout::For(model);
  for (HfGpt2Tensor& t : HfGpt2Tensors(model)) {
    const int unit = layout.unit_of(t.tensor, t.layer);
    const int64_t offset =
        layout.Offset(t.tensor, t.layer) - layout.unit_offsets[static_cast<size_t>(unit)];
    places.push_back({std::move(t.name), std::move(t.shape), unit, offset, t.transposed});
  }
  return places;
}

}  // namespace hoist::runtime
