// Hugging Face checkpoint directories, for every family hoist computes: config.json with
// model.safetensors, or model.safetensors.index.json and its shards, in fp32, bf16 or fp16,
// mapped by name onto the model's units (HfTensorPlaces: GPT-2's names in
// runtime/model/gpt2_weights.h, Llama's in runtime/model/decoder.h). Reading is by unit, each
// tensor read from its file with pread as the unit is filled, so a rank holds one unit at a time
// and never the whole file. Every error names the file and the tensor: a missing or unexpected
// tensor, a wrong shape, a dtype other than F32, BF16 or F16, a truncated file, a header that lies
// (runtime/interchange/safetensors.h).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/file_system.h"
#include "core/status.h"
#include "runtime/model/hf_keys.h"
#include "runtime/model/model_config.h"

namespace hoist::runtime {

// Every tensor of `model`'s family's state_dict, in its order (the order the shards are cut in).
std::vector<HfTensorPlace> HfTensorPlaces(const ModelConfig& model);

// Weights to start a model from, read a unit at a time: a Hugging Face directory or an llm.c
// file. Reads may run from one thread at a time.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The directory or file.
  virtual const std::string& path() const = 0;
  // The model the files describe.
  virtual const ModelConfig& model() const = 0;
  // Writes elements [begin, begin + count) of unit `unit` of ModelUnits(model()) into `out`, as
  // fp32; elements past the unit's end (a partition's padding) are 0. Reads only the bytes of the
  // files that hold the range (a whole tensor for a transposed one), so a rank that owns a shard
  // of a unit reads that shard.
  virtual Status FillRange(int unit, int64_t begin, int64_t count, float* out) const = 0;
  // The whole unit (its size in floats).
  Status FillUnit(int unit, float* out) const;
  // The config.json the weights came with (empty for an llm.c file).
  virtual const nlohmann::json& hf_config() const = 0;
  // The paths of the files the weights and their config are read from
  // (runtime/checkpoint/base_identity.h records them): path() itself for a single file.
  virtual std::vector<std::string> files() const { return {path()}; }
};

// Opens `path`: a directory is a Hugging Face checkpoint (config.json, and the index's shards or
// model.safetensors: every tensor the model needs must be there with its shape, and nothing
// else), a file an llm.c checkpoint (runtime/model/gpt2_weights.h; its header checked against its
// size).
StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(const std::string& path,
                                                         FileSystem& fs = FileSystem::Posix());

// Options of a Hugging Face export.
struct HfExportOptions {
  DType dtype = DType::kFloat32;  // what the safetensors hold
  // Above this many bytes of tensors, the weights are split into model-0000k-of-0000n.safetensors
  // files with model.safetensors.index.json, as transformers' save_pretrained does; 0: one file.
  int64_t max_shard_bytes = 0;
  nlohmann::json base_config;  // see HfConfigText (runtime/interchange/hf_config.h)
};

// Writes `weights` (ModelParameterCount(model) floats, the flat unit order of ModelUnits(model))
// as a Hugging Face directory `out_dir` (created): config.json and the safetensors, named and
// shaped as transformers' GPT2LMHeadModel or LlamaForCausalLM keeps them. The directory is
// replaced whole (runtime/interchange/export_staging.h): a failure or a kill at any point leaves
// the earlier export or this one, never a mixture. The other files of an existing directory are
// kept, but not the weights of an earlier export (model.safetensors, model-*-of-*.safetensors and
// the index), so that no reader picks up stale weights.
Status WriteHfCheckpoint(const std::string& out_dir, const ModelConfig& model, const float* weights,
                         const HfExportOptions& options, FileSystem& fs = FileSystem::Posix());

}  // namespace hoist::runtime
