// LoRA (Hu et al., 2021) as Hugging Face PEFT defines it: beside a frozen linear layer
// y = x W^T (+ b), a trained pair A (r, in) and B (out, r) adds scaling * dropout(x) A^T B^T,
// scaling = alpha / r (alpha / sqrt(r) with use_rslora). The base model's weights are frozen (a
// ZeroEngine with ZeroOptions::frozen: the compute-type copy alone, partitioned as the stage
// says); the adapters are units of their own, trained, sharded and checkpointed by a second
// engine, and the model computes through both as one store (zero::JoinedParamStore): the base
// model's units first, then one adapter unit per transformer block.
//
// The layers an adapter can target are each block's linear layers, by PEFT's module names:
//   GPT-2: attn.c_attn (the fused q/k/v), attn.c_proj, mlp.c_fc, mlp.c_proj;
//   Llama: self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj.
// hoist fuses Llama's q/k/v and gate/up into one weight each; an adapter on q_proj adds to the
// rows of the fused weight that are q_proj's (LoraModule::out_begin). A block's adapter unit
// holds, for each targeted layer in the order above, A (r, in) then B (out, r), row-major as PEFT
// saves them (GPT-2's Conv1D layers too: PEFT orients their adapters as a Linear's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/model/model_config.h"
#include "zero/partition.h"

namespace hoist::runtime {

// The largest lora_alpha hoist takes. Real adapters use 8 to 512; the scale alpha / r (alpha /
// sqrt(r) with rsLoRA) multiplies every adapter product in fp32, where 1e39 is already infinite.
inline constexpr double kMaxLoraAlpha = 1e6;

// One linear layer of a block that an adapter can target.
struct LoraModule {
  enum Site {
    // GPT-2
    kGpt2Attn,
    kGpt2AttnProj,
    kGpt2Fc,
    kGpt2MlpProj,
    // the rotary families (Llama, Qwen2, Qwen3, Mistral, Gemma 2), by transformers' names
    kQProj,
    kKProj,
    kVProj,
    kOProj,
    kGateProj,
    kUpProj,
    kDownProj,
    kNumSites
  };
  Site site;
  const char* name;   // PEFT's path within a block: "attn.c_attn", "self_attn.q_proj"
  int64_t in = 0;     // A is (r, in)
  int64_t out = 0;    // B is (out, r)
  int64_t out_begin;  // the first output column of the base layer's (fused) product it adds to
  int64_t base_out;   // the base layer's output width: the row stride of its product
};

// Every linear layer of a block of `model`'s family, in the order a block computes them.
std::vector<LoraModule> LoraCandidates(const ModelConfig& model);

// Where the adapters sit in their units.
struct LoraLayout {
  std::vector<LoraModule> modules;  // the targeted layers, in block order
  std::vector<int64_t> a_offset;    // per module: A's offset within a block's adapter unit
  std::vector<int64_t> b_offset;    // per module: B's
  int64_t unit_size = 0;            // elements of one block's adapter unit
  int n_layer = 0;
  int r = 0;
  float scaling = 0.0f;
  float dropout = 0.0f;
  int base_units = 0;  // the base model's units: block l's adapters are unit base_units + l

  // The layout of model.lora over `model`; InvalidArgument (naming lora.target_modules) for a
  // name that matches no layer, one that matches a layer outside the blocks (the head, the
  // embeddings), or one that matches some blocks but not others.
  static StatusOr<LoraLayout> For(const ModelConfig& model);

  // The module index of `site`, or -1 where it has no adapter.
  int Find(LoraModule::Site site) const;
  // The adapter units ("lora.h.<l>"), every element decayed (A and B are 2-D, as AdamW's
  // weight decay in PyTorch applies to every parameter it is given).
  std::vector<zero::UnitSpec> Units() const;
  // The name PEFT saves A (`b` false) or B of module `module` in block `layer` under:
  // "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight",
  // "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight".
  std::string PeftName(ModelFamily family, int layer, int module, bool b) const;
  // The transformers name of the base weight module `module` of block `layer` adds to
  // ("transformer.h.0.attn.c_attn.weight", "model.layers.0.self_attn.q_proj.weight").
  static std::string BaseName(ModelFamily family, int layer, const LoraModule& module);
};

// PEFT's initialisation of one block's adapter unit (`out`: unit_size elements): A as
// torch.nn.Linear's weight (kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zero,
// so that training starts from the base model's outputs. Depends on (seed, layer) alone.
void InitializeLoraUnit(const LoraLayout& layout, int layer, uint64_t seed, float* out);

// The units a run trains: the adapter units with LoRA, else the whole model's (ModelUnits).
std::vector<zero::UnitSpec> TrainedUnits(const ModelConfig& model);

}  // namespace hoist::runtime
