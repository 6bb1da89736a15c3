// Text generation from a trained checkpoint: the model is rebuilt from the config stored in the
// checkpoint's manifest, its parameters loaded, and tokens drawn one at a time from the softmax of
// the last position's logits (temperature, top-k), the context being the last seq_len tokens.
// Blocks; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace hoist::runtime {

struct SampleOptions {
  std::string checkpoint;  // a step directory, or a checkpoint dir (its `latest` is used)
  std::string prompt;      // text; empty starts from a newline
  std::string tokenizer;   // a tokenizer.json to encode and decode with; empty: byte-level
  int max_new_tokens = 256;
  float temperature = 1.0f;  // 0 means greedy
  int top_k = 0;             // 0 means the whole vocabulary
  uint64_t seed = 1337;
};

// The generated tokens (without the prompt's). The prompt is encoded with options.tokenizer
// (runtime/interchange/bpe_tokenizer.h) or byte-level without one; a model whose vocabulary is
// larger than 256 needs a tokenizer. Tokenizer errors name its file.
StatusOr<std::vector<int32_t>> Sample(const SampleOptions& options);
// The prompt followed by the generated tokens, decoded with the same tokenizer.
StatusOr<std::string> SampleText(const SampleOptions& options);

// Picks a token from `logits` (V values) with temperature and top-k, using a uniform draw u in
// [0, 1). Exposed for tests.
int32_t PickToken(const float* logits, int V, float temperature, int top_k, double u);

}  // namespace hoist::runtime
