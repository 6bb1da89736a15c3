// The `model` section of the config (runtime/config/config_model.cc). Internal to
// runtime/config*.cc.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/config/config_reader.h"

namespace hoist::runtime::config_internal {

// Reads `model` into `model`: model_type ("gpt2" or "llama"), the dimensions under hoist's names
// (n_layer, n_head, n_embd, n_kv_head, n_positions) or Hugging Face's (num_hidden_layers,
// num_attention_heads, hidden_size, num_key_value_heads, max_position_embeddings), vocab_size,
// intermediate_size, rope_theta, rope_scaling, rms_norm_eps, tie_word_embeddings, seq_len,
// attention. With `config` (a config.json) or `init_from` (a checkpoint) the model is theirs, and
// a key the job also sets must agree; seq_len, the training context, may be shorter than the
// model's positions. Where `init_from` (or `config`) comes from a `--set` override, the config
// file's disagreeing keys give way to it instead, with a line in `notices`.
Status ReadModel(const Section& top, ModelConfig* model, std::vector<std::string>* notices);

// Reads the `lora` section into model->lora (runtime/config/config_lora.cc), after ReadModel: the
// targets are checked against the model's layers.
Status ReadLora(const Section& top, ModelConfig* model);

}  // namespace hoist::runtime::config_internal
