// The families' specs (runtime/model/model_family.h) against the layouts and models they describe:
// the parameter bound is the count (an untied Llama head counted either way), LoRA's candidate
// layers tile the fused matmuls they add to, and a model made through the spec is the family's,
// with the activation bytes its footprint counts.
#include "runtime/model/model_family.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/memory_tracker.h"

namespace hoist::runtime {
namespace {

ModelConfig Gpt2Config() {
  ModelConfig m;
  m.family = ModelFamily::kGpt2;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 300;
  m.seq_len = 8;
  return m;
}

ModelConfig LlamaConfig(bool tied) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.n_layer = 3;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 32;
  m.intermediate_size = 24;  // not the attention's width, so that o_proj and down_proj differ
  m.vocab_size = 200;
  m.seq_len = 8;
  m.tie_word_embeddings = tied;
  return m;
}

// Each later rotary family with what its block adds: Qwen3 a head_dim of its own, Mistral a
// window on every layer, Gemma 2 local and global layers.
ModelConfig RotaryConfig(ModelFamily family, bool tied) {
  ModelConfig m = LlamaConfig(tied);
  m.family = family;
  if (family == ModelFamily::kQwen3) m.head_size = 12;
  if (family == ModelFamily::kMistral) m.sliding_window = 3;
  if (family == ModelFamily::kGemma2) {
    m.sliding_window = 4;
    m.sliding_layers = {true, false, true};
    m.query_pre_attn_scalar = 20;
    m.attn_logit_softcapping = 50;
    m.final_logit_softcapping = 30;
  }
  return m;
}

std::vector<ModelConfig> Configs() {
  std::vector<ModelConfig> configs = {Gpt2Config(), LlamaConfig(false), LlamaConfig(true)};
  for (ModelFamily family :
       {ModelFamily::kQwen2, ModelFamily::kQwen3, ModelFamily::kMistral, ModelFamily::kGemma2}) {
    for (bool tied : {false, true}) configs.push_back(RotaryConfig(family, tied));
  }
  return configs;
}

TEST(ModelFamilySpec, EachFamilyFindsItsOwnSpec) {
  std::set<const ModelFamilySpec*> specs;
  for (ModelFamily family : kModelFamilies) {
    EXPECT_EQ(FamilyOf(family).family, family) << ModelFamilyName(family);
    EXPECT_TRUE(specs.insert(&FamilyOf(family)).second) << ModelFamilyName(family);
    ModelFamily named;
    ASSERT_TRUE(ModelFamilyNamed(ModelFamilyName(family), &named));
    EXPECT_EQ(named, family);
    // GPT-2 is the one family that is not a rotary decoder.
    EXPECT_EQ(FamilyOf(family).decoder == nullptr, family == ModelFamily::kGpt2);
  }
}

TEST(ModelFamilySpec, ParameterBoundIsTheCountOrAnUntiedHeadAbove) {
  for (const ModelConfig& m : Configs()) {
    const long double bound = FamilyOf(m.family).parameter_bound(m);
    const int64_t count = ModelParameterCount(m);
    const bool tied_llama = m.family != ModelFamily::kGpt2 && m.tie_word_embeddings;
    const int64_t head = tied_llama ? int64_t{m.padded_vocab_size()} * m.n_embd : 0;
    EXPECT_EQ(bound, static_cast<long double>(count + head))
        << ModelFamilyName(m.family) << (tied_llama ? " tied" : "");
  }
}

TEST(ModelFamilySpec, LoraCandidatesTileTheMatmulsTheyAddTo) {
  for (const ModelConfig& m : Configs()) {
    const std::vector<LoraModule> candidates = FamilyOf(m.family).lora_candidates(m);
    ASSERT_FALSE(candidates.empty());
    // The candidates that add to one (fused) matmul: the same input width and output width.
    std::map<std::pair<int64_t, int64_t>, std::vector<const LoraModule*>> matmuls;
    std::set<std::string> names;
    for (const LoraModule& c : candidates) {
      EXPECT_TRUE(names.insert(c.name).second) << c.name << " twice";
      ASSERT_GT(c.in, 0) << c.name;
      ASSERT_GT(c.out, 0) << c.name;
      matmuls[{c.in, c.base_out}].push_back(&c);
    }
    for (const auto& [shape, parts] : matmuls) {
      // Disjoint ranges within the product's columns that cover all of them.
      std::vector<bool> covered(static_cast<size_t>(shape.second), false);
      for (const LoraModule* c : parts) {
        ASSERT_GE(c->out_begin, 0) << c->name;
        ASSERT_LE(c->out_begin + c->out, shape.second) << c->name;
        for (int64_t j = c->out_begin; j < c->out_begin + c->out; ++j) {
          EXPECT_FALSE(covered[static_cast<size_t>(j)]) << c->name << " overlaps at " << j;
          covered[static_cast<size_t>(j)] = true;
        }
      }
      for (int64_t j = 0; j < shape.second; ++j) {
        EXPECT_TRUE(covered[static_cast<size_t>(j)])
            << ModelFamilyName(m.family) << ": column " << j << " of a (" << shape.first << " -> "
            << shape.second << ") matmul has no candidate";
      }
    }
    // Every block matmul weight is some candidate's base layer.
    double weights = 0;
    for (const auto& [shape, parts] : matmuls) weights += double(shape.first) * shape.second;
    EXPECT_EQ(weights, FamilyOf(m.family).block_matmul_weights(m)) << ModelFamilyName(m.family);
  }
}

TEST(ModelFamilySpec, CreateMakesTheFamilysModelWithItsFootprint) {
  for (const ModelConfig& m : Configs()) {
    MemoryTracker tracker;
    CpuDevice device(Place::kDevice, &tracker);
    StatusOr<std::unique_ptr<Model>> model = CreateModel(m, 2, 8, &device);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ((*model)->config().family, m.family);
    EXPECT_EQ((*model)->num_parameters(), ModelParameterCount(m));
    EXPECT_EQ(tracker.Snapshot().Current(Place::kDevice, Category::kActivation),
              ModelActivationFootprint(m, 2, 8).device)
        << ModelFamilyName(m.family);
  }
}

}  // namespace
}  // namespace hoist::runtime
