// The byte-level tokenizer: every byte of UTF-8 (or any) text is one token, 0..255, so any input
// round-trips exactly and the vocabulary is 256. It is what the demo model uses, and `hoist data
// tokenize` without --tokenizer (with one, see runtime/interchange/bpe_tokenizer.h). Decoding
// accepts any int32 a sampler may produce: ids outside 0..255 are rendered as "<|id|>" instead of
// failing. Stateless; every function is thread-safe.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hoist::runtime {

inline constexpr int kByteVocabSize = 256;

// One token per byte of `text`, in order.
std::vector<uint16_t> EncodeBytes(std::string_view text);

// The bytes of `token`, or "<|token|>" when it is not a byte (below 0 or above 255).
std::string DecodeToken(int32_t token);

// The concatenation of DecodeToken over `tokens`.
std::string DecodeTokens(std::span<const int32_t> tokens);

struct TokenizeOptions {
  // A Hugging Face tokenizer.json (runtime/interchange/bpe_tokenizer.h); empty: byte-level.
  std::string tokenizer_path;
  // Where the progress line goes (rewritten in place with '\r', ended with a newline), or null.
  std::ostream* progress = nullptr;
};

// `hoist data tokenize FILE -o OUT.bin [--tokenizer tokenizer.json]`: tokenizes the file at
// `input_path` into a token shard at `output_path` (written atomically, see TokenShardWriter):
// uint16 tokens when every id of the tokenizer fits 16 bits (always, byte-level), else uint32.
// The input is read in chunks of 1 MiB and the tokens are written as they come, so memory does
// not grow with the file. A missing input is NotFound, an empty one InvalidArgument; both name
// the file; tokenizer errors name the tokenizer file. Blocks on file I/O.
Status TokenizeFile(const std::string& input_path, const std::string& output_path,
                    const TokenizeOptions& options = {});

}  // namespace hoist::runtime
