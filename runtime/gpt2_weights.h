// GPT-2's weights in the files other tools read and write: a Hugging Face checkpoint directory
// (config.json with model.safetensors, or model.safetensors.index.json and its shards) and llm.c's
// checkpoint file (gpt2_124M.bin: magic 20240326, version 3 fp32 or 5 bf16).
//
// Names and shapes follow transformers' GPT2LMHeadModel: "transformer.wte.weight" (V, C),
// "transformer.wpe.weight" (n_positions, C), "transformer.h.L.ln_1.weight", ...,
// "transformer.ln_f.bias"; the prefix "transformer." may be absent (files saved from GPT2Model,
// as the hub's gpt2 is). Its attention and MLP weights are Conv1D, stored (in, out): they are
// transposed to hoist's (out, in) on the way in and back on the way out. The LM head is tied to
// wte (an "lm_head.weight" in the file is ignored); the attention-mask buffers old files carry
// ("attn.bias", "attn.masked_bias") are not parameters and are skipped. hoist's wte has Vp rows
// (the vocabulary padded to a multiple of 128): the padding rows read as 0 and are not written.
//
// Reading is by unit (ParamLayout), each tensor read from its file with pread as the unit is
// filled, so a rank holds one unit at a time and never the whole file. Every error names the file
// and the tensor: a missing or unexpected tensor, a wrong shape, a dtype other than F32, BF16 or
// F16, a truncated file, a header that lies (runtime/safetensors.h).
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

// Weights to start a model from, read a unit at a time: a Hugging Face directory or an llm.c
// file. Reads may run from one thread at a time.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The directory or file.
  virtual const std::string& path() const = 0;
  // The model the files describe.
  virtual const ModelConfig& model() const = 0;
  // Writes unit `unit` of ParamLayout::For(model()) into `out` (unit_size floats), as fp32.
  virtual Status FillUnit(int unit, float* out) const = 0;
  // The config.json the weights came with (empty for an llm.c file).
  virtual const nlohmann::json& hf_config() const = 0;
};

// Opens `path`: a directory is a Hugging Face checkpoint (config.json, and the index's shards or
// model.safetensors: every tensor the model needs must be there with its shape, and nothing
// else), a file an llm.c checkpoint (its header checked against its size).
StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(const std::string& path,
                                                         FileSystem& fs = FileSystem::Posix());

// Options of a Hugging Face export.
struct HfExportOptions {
  DType dtype = DType::kFloat32;  // what the safetensors hold
  // Above this many bytes of tensors, the weights are split into model-0000k-of-0000n.safetensors
  // files with model.safetensors.index.json, as transformers' save_pretrained does; 0: one file.
  int64_t max_shard_bytes = 0;
  nlohmann::json base_config;  // see HfConfigText (runtime/hf_config.h)
};

// Writes `weights` (layout.total floats, the flat unit order of ParamLayout::For(model)) as a
// Hugging Face GPT-2 directory `out_dir` (created): config.json and the safetensors. Each file is
// written atomically; an existing directory's files of those names are replaced.
Status WriteHfGpt2(const std::string& out_dir, const ModelConfig& model, const float* weights,
                   const HfExportOptions& options, FileSystem& fs = FileSystem::Posix());

// llm.c's checkpoint header: 256 int32 little-endian, [0] magic, [1] version, [2] max_seq_len,
// [3] vocab_size, [4] num_layers, [5] num_heads, [6] channels, [7] padded_vocab_size, then every
// parameter in llm.c's tensor-major order (ParamLayout::llmc_offsets), fp32 (version 3) or bf16
// (version 5), Linear weights (out, in), wte with its padding rows.
inline constexpr int32_t kLlmcModelMagic = 20240326;

// Writes `weights` (the flat unit order) as an llm.c checkpoint at `path` (atomically): version 3
// for fp32, 5 for bf16 (fp16 has no llm.c version: InvalidArgument).
Status WriteLlmcCheckpoint(const std::string& path, const ModelConfig& model, const float* weights,
                           DType dtype, FileSystem& fs = FileSystem::Posix());

}  // namespace hoist::runtime
