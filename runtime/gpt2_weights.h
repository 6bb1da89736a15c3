// GPT-2's weights in the files other tools read and write: its names in a Hugging Face
// checkpoint directory (read and written by runtime/hf_checkpoint.h) and llm.c's checkpoint file
// (gpt2_124M.bin: magic 20240326, version 3 fp32 or 5 bf16).
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
#include "runtime/config.h"
#include "runtime/gpt2.h"
#include "runtime/hf_checkpoint.h"
#include "runtime/safetensors.h"

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

// llm.c's checkpoint header: 256 int32 little-endian, [0] magic, [1] version, [2] max_seq_len,
// [3] vocab_size, [4] num_layers, [5] num_heads, [6] channels, [7] padded_vocab_size, then every
// parameter in llm.c's tensor-major order (ParamLayout::llmc_offsets), fp32 (version 3) or bf16
// (version 5), Linear weights (out, in), wte with its padding rows.
inline constexpr int32_t kLlmcModelMagic = 20240326;

// Opens an llm.c checkpoint (its header checked against its size) as a WeightSource.
StatusOr<std::unique_ptr<WeightSource>> OpenLlmcCheckpoint(const std::string& path,
                                                           FileSystem& fs = FileSystem::Posix());
// Writes `weights` (the flat unit order) as an llm.c checkpoint at `path` (atomically): version 3
// for fp32, 5 for bf16 (fp16 has no llm.c version: InvalidArgument).
Status WriteLlmcCheckpoint(const std::string& path, const ModelConfig& model, const float* weights,
                           DType dtype, FileSystem& fs = FileSystem::Posix());

}  // namespace hoist::runtime
