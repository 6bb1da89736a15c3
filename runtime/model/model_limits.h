// The largest model dimensions hoist accepts, checked where a job config or a Hugging Face
// config.json is read, before any of them sizes a count, a loop or an allocation: a config of
// 3,000,000 layers used to abort `hoist estimate` (after a 22 s loop at 100,000), and one of
// 2^31 - 1 to end in std::bad_alloc. Each bound is far above every published model (the largest
// in brackets), so no real config meets one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hoist::runtime {

inline constexpr int64_t kMaxModelLayers = 4096;                    // (126)
inline constexpr int64_t kMaxModelHeads = 1024;                     // (128)
inline constexpr int64_t kMaxModelEmbd = int64_t{1} << 17;          // (25,600)
inline constexpr int64_t kMaxModelIntermediate = int64_t{1} << 20;  // (73,728)
inline constexpr int64_t kMaxModelVocab = int64_t{1} << 30;         // token ids are int32 (256,000)
inline constexpr int64_t kMaxModelPositions = int64_t{1} << 24;     // (10,485,760)
inline constexpr int64_t kMaxModelHeadDim = 4096;                   // (256)

// The bound of the dimension called `key`, in hoist's or Hugging Face's name; 0 for a key that is
// no model dimension.
inline int64_t MaxModelDimension(std::string_view key) {
  if (key == "n_layer" || key == "num_hidden_layers") return kMaxModelLayers;
  if (key == "n_head" || key == "num_attention_heads" || key == "n_kv_head" ||
      key == "num_key_value_heads") {
    return kMaxModelHeads;
  }
  if (key == "n_embd" || key == "hidden_size") return kMaxModelEmbd;
  if (key == "head_dim") return kMaxModelHeadDim;
  if (key == "intermediate_size") return kMaxModelIntermediate;
  if (key == "vocab_size") return kMaxModelVocab;
  if (key == "n_positions" || key == "max_position_embeddings" || key == "seq_len" ||
      key == "original_max_position_embeddings" || key == "sliding_window") {
    return kMaxModelPositions;
  }
  return 0;
}

// `bound` as messages write it: "2^30" for a power of two from 2^16 up, else its digits.
inline std::string ModelBoundText(int64_t bound) {
  if (bound >= (int64_t{1} << 16) && (bound & (bound - 1)) == 0) {
    int exponent = 0;
    while ((int64_t{1} << exponent) < bound) ++exponent;
    return "2^" + std::to_string(exponent);
  }
  return std::to_string(bound);
}

}  // namespace hoist::runtime
