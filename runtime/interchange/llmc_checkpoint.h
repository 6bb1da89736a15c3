// llm.c's GPT-2 checkpoint file (gpt2_124M.bin: magic 20240326, version 3 fp32 or 5 bf16), read
// as a WeightSource and written from the flat unit order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/file_system.h"
#include "core/status.h"
#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/model/model_config.h"

namespace hoist::runtime {

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
