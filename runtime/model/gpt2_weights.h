// GPT-2's weights in a Hugging Face checkpoint directory: its names there and its config.json
// (read and written by runtime/interchange/hf_checkpoint.h; llm.c's checkpoint file is
// runtime/interchange/llmc_checkpoint.h).
//
// Names and shapes follow transformers' GPT2LMHeadModel: "transformer.wte.weight" (V, C),
// "transformer.wpe.weight" (n_positions, C), "transformer.h.L.ln_1.weight", ...,
// "transformer.ln_f.bias"; the prefix "transformer." may be absent (files saved from GPT2Model,
// as the hub's gpt2 is). Its attention and MLP weights are Conv1D, stored (in, out): they are
// transposed to hoist's (out, in) on the way in and back on the way out. The LM head is tied to
// wte (an "lm_head.weight" in the file is ignored); the attention-mask buffers old files carry
// ("attn.bias", "attn.masked_bias") are not parameters and are skipped. hoist's wte has Vp rows
// (the vocabulary padded to a multiple of 128): the padding rows read as 0 and are not written.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/file_system.h"
#include "core/status.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/hf_keys.h"
#include "runtime/model/model_config.h"

namespace hoist::runtime {

// Where a weight tensor of hoist's layout lives in a Hugging Face GPT-2 checkpoint.
struct HfGpt2Tensor {
  int tensor = 0;              // ParamTensor
  int layer = 0;               // for the per-block tensors
  std::string name;            // "transformer.h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // as stored: Conv1D weights (in, out), wte (V, C)
  bool transposed = false;     // stored (in, out); hoist keeps (out, in)
};
// Every tensor in transformers' state_dict order (wte, wpe, each block's 12, ln_f).
std::vector<HfGpt2Tensor> HfGpt2Tensors(const ModelConfig& model);
// Those as HfTensorPlaces (GPT-2's ModelFamilySpec::hf_tensors).
std::vector<HfTensorPlace> Gpt2HfTensorPlaces(const ModelConfig& model);

// GPT-2's config.json (ModelFamilySpec::from_hf and to_hf): n_layer, n_head, n_embd,
// vocab_size, n_positions; the tanh GELU, layernorm eps 1e-5, a tied head, n_inner 4 n_embd and
// the plain scaled attention are checked, since hoist's GPT-2 computes only those.
StatusOr<ModelConfig> Gpt2FromHf(const nlohmann::json& config, const std::string& path);
nlohmann::json Gpt2HfConfig(const ModelConfig& model, const nlohmann::json& base);

}  // namespace hoist::runtime
