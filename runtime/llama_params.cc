// Llama's parameters: LlamaLayout (where each tensor lives), the Hugging Face names that map onto
// it, and the initialisation of a unit's values (runtime/llama.h).
#include <cstring>
#include <string>
#include <vector>

#include "runtime/llama.h"  // declares what this file defines
#include "runtime/unit_layout.h"
#include "runtime/weight_init.h"

namespace hoist::runtime {

namespace {

constexpr int kEmbeddingTensors[] = {kLlamaEmbedTokens};
constexpr int kBlockTensors[] = {kLlamaInputNorm, kLlamaQkv,    kLlamaOProj,
                                 kLlamaPostNorm,  kLlamaGateUp, kLlamaDown};
constexpr int kFinalTensors[] = {kLlamaFinalNorm, kLlamaLmHead};

}  // namespace

LlamaLayout LlamaLayout::For(const ModelConfig& m) {
  const int64_t C = m.n_embd, Vp = m.padded_vocab_size(), hd = m.head_dim();
  const int64_t NH = m.n_head, NKV = m.kv_heads(), I = m.intermediate_size;
  LlamaLayout layout;
  layout.n_layer = m.n_layer;
  layout.tied = m.tie_word_embeddings;
  layout.shapes = {std::vector<int64_t>{Vp, C},
                   {C},
                   {(NH + 2 * NKV) * hd, C},
                   {C, NH * hd},
                   {C},
                   {2 * I, C},
                   {C, I},
                   {C},
                   {layout.tied ? 0 : Vp, C}};
  for (int t = 0; t < kNumLlamaTensors; ++t) {
    int64_t n = 1;
    for (int64_t d : layout.shapes[t]) n *= d;
    layout.unit_sizes[t] = n;
  }
  auto place = [&](const auto& tensors) {
    int64_t offset = 0;
    for (int t : tensors) {
      layout.local_offsets[t] = offset;
      offset += layout.unit_sizes[t];
    }
    return offset;
  };
  const int64_t embedding = place(kEmbeddingTensors);
  const int64_t block = place(kBlockTensors);
  const int64_t final_unit = place(kFinalTensors);
  layout.unit_offsets.push_back(0);
  layout.unit_offsets.push_back(embedding);
  for (int l = 0; l < m.n_layer; ++l) {
    layout.unit_offsets.push_back(layout.unit_offsets.back() + block);
  }
  layout.unit_offsets.push_back(layout.unit_offsets.back() + final_unit);
  layout.total = layout.unit_offsets.back();
  return layout;
}

const char* LlamaLayout::Name(int tensor) {
  static const char* kNames[kNumLlamaTensors] = {
      "embed_tokens", "input_layernorm", "qkv",  "o_proj", "post_attention_layernorm",
      "gate_up",      "down_proj",       "norm", "lm_head"};
  return kNames[tensor];
}

bool LlamaLayout::Decayed(int tensor) {
  return tensor != kLlamaInputNorm && tensor != kLlamaPostNorm && tensor != kLlamaFinalNorm;
}

bool LlamaLayout::PerBlock(int tensor) { return tensor >= kLlamaInputNorm && tensor <= kLlamaDown; }

int LlamaLayout::unit_of(int tensor, int layer) const {
  if (tensor == kLlamaEmbedTokens) return 0;
  if (PerBlock(tensor)) return 1 + layer;
  return n_layer + 1;
}

int64_t LlamaLayout::Offset(int tensor, int layer) const {
  return unit_offsets[unit_of(tensor, layer)] + local_offsets[tensor];
}

std::vector<zero::UnitSpec> LlamaLayout::Units() const {
  return LayoutUnits(*this, kEmbeddingTensors, kBlockTensors, kFinalTensors,
                     tied ? "final norm" : "final norm and head");
}

std::vector<LlamaHfTensor> LlamaHfTensors(const ModelConfig& config) {
  const LlamaLayout layout = LlamaLayout::For(config);
  const int64_t C = config.n_embd, V = config.vocab_size, hd = config.head_dim();
  const int64_t NH = config.n_head, NKV = config.kv_heads(), I = config.intermediate_size;
  std::vector<LlamaHfTensor> tensors;
  auto add = [&](std::string name, std::vector<int64_t> shape, int tensor, int layer,
                 int64_t rows_before) {
    LlamaHfTensor t;
    t.name = std::move(name);
    t.unit = layout.unit_of(tensor, layer < 0 ? 0 : layer);
    t.offset = layout.local_offsets[tensor] + rows_before * (shape.size() == 2 ? shape[1] : 0);
    t.shape = std::move(shape);
    t.tensor = tensor;
    t.layer = layer;
    tensors.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", {V, C}, kLlamaEmbedTokens, -1, 0);
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", {NH * hd, C}, kLlamaQkv, l, 0);
    add(p + "self_attn.k_proj.weight", {NKV * hd, C}, kLlamaQkv, l, NH * hd);
    add(p + "self_attn.v_proj.weight", {NKV * hd, C}, kLlamaQkv, l, (NH + NKV) * hd);
    add(p + "self_attn.o_proj.weight", {C, NH * hd}, kLlamaOProj, l, 0);
    add(p + "mlp.gate_proj.weight", {I, C}, kLlamaGateUp, l, 0);
    add(p + "mlp.up_proj.weight", {I, C}, kLlamaGateUp, l, I);
    add(p + "mlp.down_proj.weight", {C, I}, kLlamaDown, l, 0);
    add(p + "input_layernorm.weight", {C}, kLlamaInputNorm, l, 0);
    add(p + "post_attention_layernorm.weight", {C}, kLlamaPostNorm, l, 0);
  }
  add("model.norm.weight", {C}, kLlamaFinalNorm, -1, 0);
  if (!config.tie_word_embeddings) add("lm_head.weight", {V, C}, kLlamaLmHead, -1, 0);
  return tensors;
}

void InitializeLlamaUnit(const ModelConfig& config, int unit, uint64_t seed, float* out) {
  const LlamaLayout layout = LlamaLayout::For(config);
  InitializeLlamaRange(config, unit, seed, 0, layout.unit_size(unit), out);
}

void InitializeLlamaRange(const ModelConfig& config, int unit, uint64_t seed, int64_t begin,
                          int64_t count, float* out) {
  const LlamaLayout layout = LlamaLayout::For(config);
  const int L = config.n_layer;
  const int64_t C = config.n_embd, V = config.vocab_size;
  const double kStd = 0.02;  // LlamaConfig's initializer_range
  UnitWindow window(out, begin, count);
  const int layer = unit - 1;  // for block units
  auto fill_normal = [&](int tensor, int64_t n) {
    // One stream per (tensor, layer), so any unit can be drawn on its own.
    const uint64_t slice = static_cast<uint64_t>(tensor) * 1000003u +
                           static_cast<uint64_t>(LlamaLayout::PerBlock(tensor) ? layer : 0);
    window.Normal(layout.local_offsets[tensor], n, seed ^ (slice * 0x9E3779B97F4A7C15ull), kStd);
  };
  auto fill_ones = [&](int tensor) {
    window.Fill(layout.local_offsets[tensor], layout.unit_sizes[tensor], 1.0f);
  };
  if (unit == 0) {
    fill_normal(kLlamaEmbedTokens, V * C);  // the padded rows stay 0
  } else if (unit <= L) {
    for (int t : {kLlamaQkv, kLlamaOProj, kLlamaGateUp, kLlamaDown}) {
      fill_normal(t, layout.unit_sizes[t]);
    }
    fill_ones(kLlamaInputNorm);
    fill_ones(kLlamaPostNorm);
  } else {
    fill_ones(kLlamaFinalNorm);
    if (!layout.tied) fill_normal(kLlamaLmHead, V * C);
  }
}

}  // namespace hoist::runtime
