// The pre-tokenizers of byte-level BPE as Hugging Face tokenizer.json files configure them: text
// is split into pieces by a regular expression (GPT-2's, or Llama 3's), then every byte of a piece
// becomes one character of GPT-2's byte alphabet before BPE merges them. The two known patterns
// are matched by hand-written code that gives the same pieces as the tokenizers library's regex
// engine (leftmost alternative first, greedy, with the Isolated split behaviour), since the
// patterns need \p{L}, \p{N} and a lookahead that std::regex lacks. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hoist::runtime {

enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
};

// The pattern whose regex text is `regex` exactly, or nullopt for any other.
std::optional<SplitPattern> SplitPatternFromRegex(std::string_view regex);
// The regex text of `pattern`.
std::string_view SplitPatternRegex(SplitPattern pattern);

// A piece of a text: bytes [begin, end).
struct TextPiece {
  size_t begin = 0;
  size_t end = 0;
};

// Appends to `out` the pieces of `text` that splitting by `pattern` gives, in order, covering the
// text (any bytes that are not valid UTF-8 count as characters of no class).
void SplitByPattern(SplitPattern pattern, std::string_view text, std::vector<TextPiece>* out);

// GPT-2's reversible map from bytes to printable characters (the "byte alphabet"): printable
// Latin-1 bytes map to themselves, the rest to U+0100 and up, in order.
uint32_t ByteToChar(uint8_t byte);
// The byte of a byte-alphabet character, or nullopt when `c` is not one.
std::optional<uint8_t> CharToByte(uint32_t c);
// The UTF-8 of ByteToChar(byte) for each byte of `bytes`, appended to `out`.
void AppendByteAlphabet(std::string_view bytes, std::string* out);

}  // namespace hoist::runtime
