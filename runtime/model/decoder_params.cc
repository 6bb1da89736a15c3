// The rotary families' parameters: DecoderLayout (where each tensor lives), the Hugging Face
// names that map onto it, and the initialisation of a unit's values (runtime/model/decoder.h).
#include <cstring>
#include <string>
#include <vector>

#include "runtime/model/decoder.h"  // declares what this file defines
#include "runtime/model/unit_layout.h"
#include "runtime/model/weight_init.h"

namespace hoist::runtime {

namespace {

constexpr int kEmbeddingTensors[] = {kDecoderEmbedTokens};
constexpr int kBlockTensors[] = {kDecoderInputNorm,   kDecoderQkv,       kDecoderQkvBias,
                                 kDecoderQNorm,       kDecoderKNorm,     kDecoderOProj,
                                 kDecoderAttnOutNorm, kDecoderMlpNorm,   kDecoderGateUp,
                                 kDecoderDown,        kDecoderMlpOutNorm};
constexpr int kFinalTensors[] = {kDecoderFinalNorm, kDecoderLmHead};

// The key of a tensor's random stream: Llama's tensor numbers before the other families came,
// so that a seed draws the weights it always drew.
uint64_t StreamKey(int tensor) {
  switch (tensor) {
    case kDecoderEmbedTokens: return 0;
    case kDecoderQkv: return 2;
    case kDecoderOProj: return 3;
    case kDecoderGateUp: return 5;
    case kDecoderDown: return 6;
    case kDecoderLmHead: return 8;
    default: return 100 + static_cast<uint64_t>(tensor);
  }
}

}  // namespace

DecoderLayout DecoderLayout::For(const ModelConfig& m) {
  const DecoderTraits& traits = TraitsOf(m.family);
  const int64_t C = m.n_embd, Vp = m.padded_vocab_size(), hd = m.head_dim();
  const int64_t NH = m.n_head, NKV = m.kv_heads(), I = m.intermediate_size;
  const int64_t QKV = (NH + 2 * NKV) * hd;
  const int64_t sandwich = traits.sandwich_norms ? C : 0, qk = traits.qk_norm ? hd : 0;
  DecoderLayout layout;
  layout.n_layer = m.n_layer;
  layout.tied = m.tie_word_embeddings;
  layout.shapes = {std::vector<int64_t>{Vp, C},
                   {C},
                   {QKV, C},
                   {traits.qkv_bias ? QKV : 0},
                   {qk},
                   {qk},
                   {C, NH * hd},
                   {sandwich},
                   {C},
                   {2 * I, C},
                   {C, I},
                   {sandwich},
                   {C},
                   {layout.tied ? 0 : Vp, C}};
  for (int t = 0; t < kNumDecoderTensors; ++t) {
    int64_t n = 1;
    for (int64_t d : layout.shapes[t]) n *= d;
    layout.unit_sizes[t] = n;
  }
  layout.Place(kEmbeddingTensors, kBlockTensors, kFinalTensors);
  return layout;
}

const char* DecoderLayout::Name(int tensor) {
  static const char* kNames[kNumDecoderTensors] = {
      "embed_tokens", "input_layernorm", "qkv",       "qkv_bias",
      "q_norm",       "k_norm",          "o_proj",    "attention_output_norm",
      "mlp_norm",     "gate_up",         "down_proj", "mlp_output_norm",
      "norm",         "lm_head"};
  return kNames[tensor];
}

bool DecoderLayout::Decayed(int tensor) {
  switch (tensor) {
    case kDecoderEmbedTokens:
    case kDecoderQkv:
    case kDecoderOProj:
    case kDecoderGateUp:
    case kDecoderDown:
    case kDecoderLmHead: return true;
    default: return false;
  }
}

bool DecoderLayout::PerBlock(int tensor) {
  return tensor >= kDecoderInputNorm && tensor <= kDecoderMlpOutNorm;
}

std::vector<zero::UnitSpec> DecoderLayout::Units() const {
  return LayoutUnits(*this, kEmbeddingTensors, kBlockTensors, kFinalTensors,
                     tied ? "final norm" : "final norm and head");
}

std::vector<DecoderHfTensor> DecoderHfTensors(const ModelConfig& config) {
  const DecoderLayout layout = DecoderLayout::For(config);
  const DecoderTraits& traits = TraitsOf(config.family);
  const int64_t C = config.n_embd, V = config.vocab_size, hd = config.head_dim();
  const int64_t NH = config.n_head, NKV = config.kv_heads(), I = config.intermediate_size;
  std::vector<DecoderHfTensor> tensors;
  auto add = [&](std::string name, std::vector<int64_t> shape, int tensor, int layer,
                 int64_t rows_before) {
    DecoderHfTensor t;
    t.name = std::move(name);
    t.unit = layout.unit_of(tensor, layer < 0 ? 0 : layer);
    const int64_t row = shape.size() == 2 ? shape[1] : 1;
    t.offset = layout.local_offsets[tensor] + rows_before * row;
    t.shape = std::move(shape);
    t.tensor = tensor;
    t.layer = layer;
    tensors.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", {V, C}, kDecoderEmbedTokens, -1, 0);
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    add(a + "q_proj.weight", {NH * hd, C}, kDecoderQkv, l, 0);
    add(a + "k_proj.weight", {NKV * hd, C}, kDecoderQkv, l, NH * hd);
    add(a + "v_proj.weight", {NKV * hd, C}, kDecoderQkv, l, (NH + NKV) * hd);
    if (traits.qkv_bias) {
      add(a + "q_proj.bias", {NH * hd}, kDecoderQkvBias, l, 0);
      add(a + "k_proj.bias", {NKV * hd}, kDecoderQkvBias, l, NH * hd);
      add(a + "v_proj.bias", {NKV * hd}, kDecoderQkvBias, l, (NH + NKV) * hd);
    }
    if (traits.qk_norm) {
      add(a + "q_norm.weight", {hd}, kDecoderQNorm, l, 0);
      add(a + "k_norm.weight", {hd}, kDecoderKNorm, l, 0);
    }
    add(a + "o_proj.weight", {C, NH * hd}, kDecoderOProj, l, 0);
    add(p + "mlp.gate_proj.weight", {I, C}, kDecoderGateUp, l, 0);
    add(p + "mlp.up_proj.weight", {I, C}, kDecoderGateUp, l, I);
    add(p + "mlp.down_proj.weight", {C, I}, kDecoderDown, l, 0);
    add(p + "input_layernorm.weight", {C}, kDecoderInputNorm, l, 0);
    if (traits.sandwich_norms) {
      // Gemma 2's names: the attention's output norm is its post_attention_layernorm.
      add(p + "post_attention_layernorm.weight", {C}, kDecoderAttnOutNorm, l, 0);
      add(p + "pre_feedforward_layernorm.weight", {C}, kDecoderMlpNorm, l, 0);
      add(p + "post_feedforward_layernorm.weight", {C}, kDecoderMlpOutNorm, l, 0);
    } else {
      add(p + "post_attention_layernorm.weight", {C}, kDecoderMlpNorm, l, 0);
    }
  }
  add("model.norm.weight", {C}, kDecoderFinalNorm, -1, 0);
  if (!config.tie_word_embeddings) add("lm_head.weight", {V, C}, kDecoderLmHead, -1, 0);
  return tensors;
}

void InitializeDecoderUnit(const ModelConfig& config, int unit, uint64_t seed, float* out) {
  const DecoderLayout layout = DecoderLayout::For(config);
  InitializeDecoderRange(config, unit, seed, 0, layout.unit_size(unit), out);
}

void InitializeDecoderRange(const ModelConfig& config, int unit, uint64_t seed, int64_t begin,
                            int64_t count, float* out) {
  const DecoderLayout layout = DecoderLayout::For(config);
  const int L = config.n_layer;
  const int64_t C = config.n_embd, V = config.vocab_size;
  const double kStd = 0.02;  // LlamaConfig's initializer_range
  UnitWindow window(out, begin, count);
  const int layer = unit - 1;  // for block units
  auto fill_normal = [&](int tensor, int64_t n) {
    // One stream per (tensor, layer), so any unit can be drawn on its own.
    const uint64_t slice = StreamKey(tensor) * 1000003u +
                           static_cast<uint64_t>(DecoderLayout::PerBlock(tensor) ? layer : 0);
    window.Normal(layout.local_offsets[tensor], n, seed ^ (slice * 0x9E3779B97F4A7C15ull), kStd);
  };
  // A norm scales by w, or by 1 + w where the family's norms do: either way by 1 at first.
  const float norm_init = TraitsOf(config.family).unit_offset_norm ? 0.0f : 1.0f;
  auto fill_norm = [&](int tensor) {
    window.Fill(layout.local_offsets[tensor], layout.unit_sizes[tensor], norm_init);
  };
  if (unit == 0) {
    fill_normal(kDecoderEmbedTokens, V * C);  // the padded rows stay 0
  } else if (unit <= L) {
    for (int t : {kDecoderQkv, kDecoderOProj, kDecoderGateUp, kDecoderDown}) {
      fill_normal(t, layout.unit_sizes[t]);
    }
    // The biases stay 0, as the window starts.
    for (int t : {kDecoderInputNorm, kDecoderQNorm, kDecoderKNorm, kDecoderAttnOutNorm,
                  kDecoderMlpNorm, kDecoderMlpOutNorm}) {
      fill_norm(t);
    }
  } else {
    fill_norm(kDecoderFinalNorm);
    if (!layout.tied) fill_normal(kDecoderLmHead, V * C);
  }
}

}  // namespace hoist::runtime
