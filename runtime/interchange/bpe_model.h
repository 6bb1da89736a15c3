// The BPE model of a byte-level tokenizer: a vocabulary of byte-alphabet strings and the ranked
// merges that build them, as in a Hugging Face tokenizer.json's "model". EncodeWord turns one
// pre-tokenized piece (raw bytes) into token ids the way the tokenizers library's BPE does: every
// byte starts as its own token, then the adjacent pair with the lowest merge rank (the leftmost of
// equals) is merged until no pair has a merge; with ignore_merges a piece that is itself in the
// vocabulary is that one token. Immutable after construction and thread-safe; the word cache is
// the caller's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hoist::runtime {

class BpeModel {
 public:
  // `vocab`: token (byte-alphabet UTF-8) -> id; `merges`: pairs of tokens, in rank order. A merge
  // naming a token not in the vocabulary, or whose concatenation is not in it, and a vocabulary
  // that lacks one of the 256 byte characters, are InvalidArgument naming the field
  // ("merges[i]" / "vocab"); `where` prefixes every message (the file).
  static StatusOr<BpeModel> Create(std::unordered_map<std::string, int32_t> vocab,
                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                   bool ignore_merges, const std::string& where);

  // Appends the ids of the piece `bytes` to `out`.
  void EncodeWord(std::string_view bytes, std::vector<int32_t>* out) const;

  // The token (byte-alphabet UTF-8) of `id`, or nullptr when no token has it.
  const std::string* Token(int32_t id) const;
  std::optional<int32_t> Id(const std::string& token) const;
  // One more than the largest id.
  int32_t id_limit() const { return id_limit_; }
  size_t vocab_entries() const { return vocab_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int32_t merged;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }
  const Merge* FindMerge(int32_t a, int32_t b) const {
    auto it = merges_.find(PairKey(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::unordered_map<std::string, int32_t> vocab_;
  // By id: a vocabulary's ids may leave gaps (any id up to INT32_MAX - 1 is valid), so the table
  // is sized by the tokens, not by the largest id.
  std::unordered_map<int32_t, std::string> id_to_token_;
  int32_t id_limit_ = 0;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256] = {};
  bool ignore_merges_ = false;
};

}  // namespace hoist::runtime
