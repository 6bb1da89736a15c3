// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json, as GPT-2's and Llama 3's are
// written: model "BPE" (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges), the
// ByteLevel pre-tokenizer with GPT-2's split (use_regex true) or Llama 3's Sequence of
// Split(Regex, Isolated) and ByteLevel(use_regex false), added tokens, and the ByteLevel decoder.
//
// Encode gives the ids that the tokenizers library's `encode(text, add_special_tokens=False)`
// gives: added tokens (special ones such as <|endoftext|> too) are found in the text first,
// leftmost-longest, those marked normalized: false before those marked normalized: true, and
// become their ids; the rest is pre-tokenized and merged. A post-processor (a BOS token a
// template adds) is not applied. An added token takes its id from the model's vocabulary when it
// is there, else the next free id, as the library assigns them (not the file's "id").
// Input that is not valid UTF-8, which the library cannot take, is tokenized byte by byte where it
// is invalid.
//
// Everything else a tokenizer.json may configure (a normalizer, another model or pre-tokenizer, an
// unknown split pattern, BPE dropout, subword prefixes, lstrip/rstrip/single_word added tokens)
// is an error naming the file and the field, as is a malformed file. Immutable after Load and
// thread-safe; Encode and the stream encoder allocate per call.
//
// The post-processor (TemplateProcessing, alone or in a Sequence with ByteLevel) is read for the
// ids it puts around a single text, special_prefix() and special_suffix(), which
// `tokenizer(text)` adds and Encode does not; another post-processor, or a malformed one, leaves
// them empty and CheckPostProcessor says why (Encode and Decode do not need it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"
#include "runtime/interchange/bpe_model.h"
#include "runtime/interchange/pretokenizer.h"

namespace hoist::runtime {

class BpeTokenizer {
 public:
  // Reads the tokenizer.json at `path`. Errors name the file and the field.
  static StatusOr<std::unique_ptr<BpeTokenizer>> Load(const std::string& path,
                                                      FileSystem& fs = FileSystem::Posix());
  // The same from the file's text; `name` stands for the file in errors.
  static StatusOr<std::unique_ptr<BpeTokenizer>> Parse(std::string_view json,
                                                       const std::string& name);

  std::vector<int32_t> Encode(std::string_view text) const;

  // The pre-tokenizer's pieces of `text` in the byte alphabet, as the library's
  // pre_tokenizer.pre_tokenize_str gives them (added tokens are not taken out first).
  std::vector<std::string> PreTokenize(std::string_view text) const;

  // The bytes the ids stand for (the ByteLevel decoder): a token of byte characters gives those
  // bytes, any other token (an added token such as <|endoftext|>) its own text. Ids that no token
  // has are skipped, as the library skips them. Unlike the library, bytes that do not form valid
  // UTF-8 are kept as they are rather than replaced by U+FFFD.
  std::string Decode(std::span<const int32_t> ids) const;

  // Encode, and where each token starts in `text`, then the text's end (ids.size() + 1 offsets
  // into *offsets): every token stands for a contiguous run of the text's bytes.
  std::vector<int32_t> Encode(std::string_view text, std::vector<int64_t>* offsets) const;

  // The ids the post-processor adds before and after a single text (Llama 3: <|begin_of_text|>
  // before, nothing after); empty without one.
  const std::vector<int32_t>& special_prefix() const { return special_prefix_; }
  const std::vector<int32_t>& special_suffix() const { return special_suffix_; }
  // Whether those are what the post-processor adds: an error naming the file and the field for a
  // post-processor that was not read.
  const Status& CheckPostProcessor() const { return post_processor_error_; }

  // The id of the added token whose text is `content` (a special token such as <|im_start|>,
  // which Encode gives as that one id wherever the text holds it), or nothing.
  std::optional<int32_t> AddedTokenId(std::string_view content) const;

  // One more than the largest id a token has: what a model's vocab_size must cover, and what
  // decides whether a token shard needs 32-bit tokens.
  int32_t id_limit() const { return id_limit_; }

 private:
  friend class BpeStreamEncoder;
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool normalized = false;
  };
  // A segment of text: either an added token (id >= 0) or plain text (id -1).
  struct Segment {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;
  };
  // A word cache for EncodeText, bounded; the caller owns it.
  using WordCache = std::unordered_map<std::string, std::vector<int32_t>>;

  BpeTokenizer() = default;
  // The added tokens and the plain text between them, in order, covering `text`.
  void SplitAddedTokens(std::string_view text, std::vector<Segment>* out) const;
  // The first pre-tokenizer split of plain text (where streaming may cut), appended to `out`.
  void FirstSplit(std::string_view text, std::vector<TextPiece>* out) const;
  // The pieces of the later splits within one piece of the first.
  std::vector<TextPiece> LaterSplits(std::string_view piece) const;
  // The ids of one first-split piece: the later splits, then BPE.
  void EncodePiece(std::string_view piece, WordCache* cache, std::vector<int32_t>* out) const;
  void EncodeText(std::string_view text, WordCache* cache, std::vector<int32_t>* out) const;

  std::string name_;
  std::optional<BpeModel> model_;
  std::vector<SplitPattern> splits_;  // applied in order; never empty
  std::vector<AddedToken> added_;     // in file order
  std::unordered_map<int32_t, std::string> added_by_id_;
  size_t max_added_bytes_ = 0;
  bool added_first_byte_[256] = {};  // whether some added token starts with the byte
  int32_t id_limit_ = 0;
  std::vector<int32_t> special_prefix_, special_suffix_;
  Status post_processor_error_;
};

// Encodes a text that arrives in chunks, giving the same ids as BpeTokenizer::Encode of the whole
// text, without holding it all: it keeps back only what the next chunk could still change (the
// last few pre-tokenizer pieces, a character cut in two, the start of an added token). A piece
// longer than 1 MiB (a run of letters or spaces with no split) is cut there, the one place the
// ids may differ from the library's. Not thread-safe; borrows the tokenizer, which must outlive it.
class BpeStreamEncoder {
 public:
  explicit BpeStreamEncoder(const BpeTokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // Appends to `out` the ids that `chunk` makes final.
  void Add(std::string_view chunk, std::vector<int32_t>* out);
  // Appends the remaining ids; the encoder is then empty and may start a new text.
  void Finish(std::vector<int32_t>* out);

  static constexpr size_t kMaxHeldBytes = size_t{1} << 20;

 private:
  void Process(bool final, std::vector<int32_t>* out);
  void EncodeHeldText(bool final, std::vector<int32_t>* out);

  const BpeTokenizer& tokenizer_;
  std::string pending_;  // raw text not yet split at added tokens
  std::string text_;     // plain text of the current segment not yet encoded
  BpeTokenizer::WordCache cache_;
  std::vector<BpeTokenizer::Segment> segments_;
  std::vector<TextPiece> pieces_;
};

}  // namespace hoist::runtime
