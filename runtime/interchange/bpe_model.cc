#include "runtime/interchange/bpe_model.h"

#include <queue>

#include "runtime/interchange/pretokenizer.h"

namespace hoist::runtime {

StatusOr<BpeModel> BpeModel::Create(std::unordered_map<std::string, int32_t> vocab,
                                    const std::vector<std::pair<std::string, std::string>>& merges,
                                    bool ignore_merges, const std::string& where) {
  BpeModel model;
  model.ignore_merges_ = ignore_merges;
  int32_t limit = 0;
  for (const auto& [token, id] : vocab) {
    if (id < 0) {
      return InvalidArgumentError(where + ": model.vocab: token '" + token + "' has id " +
                                  std::to_string(id) + "; ids must not be negative");
    }
    limit = std::max(limit, id + 1);
  }
  model.id_limit_ = limit;
  model.id_to_token_.reserve(vocab.size());
  for (const auto& [token, id] : vocab) model.id_to_token_.emplace(id, token);
  for (int b = 0; b < 256; ++b) {
    std::string one;
    AppendByteAlphabet(std::string_view(reinterpret_cast<const char*>(&b), 1), &one);
    auto it = vocab.find(one);
    if (it == vocab.end()) {
      return InvalidArgumentError(where + ": model.vocab lacks the token '" + one + "' of byte " +
                                  std::to_string(b) +
                                  "; a byte-level BPE vocabulary has all 256 byte characters");
    }
    model.byte_ids_[b] = it->second;
  }
  model.merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    const std::string field =
        where + ": model.merges[" + std::to_string(i) + "] (\"" + a + "\", \"" + b + "\")";
    auto left = vocab.find(a);
    auto right = vocab.find(b);
    if (left == vocab.end() || right == vocab.end()) {
      return InvalidArgumentError(field + ": '" + (left == vocab.end() ? a : b) +
                                  "' is not in model.vocab");
    }
    auto merged = vocab.find(a + b);
    if (merged == vocab.end()) {
      return InvalidArgumentError(field + ": the merged token '" + a + b +
                                  "' is not in model.vocab");
    }
    // A pair listed twice keeps its last rank, as the tokenizers library's map does.
    model.merges_[PairKey(left->second, right->second)] =
        Merge{static_cast<uint32_t>(i), merged->second};
  }
  model.vocab_ = std::move(vocab);
  return model;
}

const std::string* BpeModel::Token(int32_t id) const {
  auto it = id_to_token_.find(id);
  return it == id_to_token_.end() ? nullptr : &it->second;
}

std::optional<int32_t> BpeModel::Id(const std::string& token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::EncodeWord(std::string_view bytes, std::vector<int32_t>* out) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    std::string word;
    AppendByteAlphabet(bytes, &word);
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (bytes.size() == 1) {
    out->push_back(byte_ids_[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  // Symbols in a doubly linked list; a merged-away symbol has id -1. Candidate merges wait in a
  // queue ordered by (rank, position); one that no longer matches its pair is skipped when it
  // comes out, as in the tokenizers library's Word::merge_all.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  const int32_t n = static_cast<int32_t>(bytes.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] =
        Symbol{byte_ids_[static_cast<unsigned char>(bytes[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const Merge* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      queue.push(Candidate{m->rank, i, m->merged});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.id < 0 || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    const Merge* m = FindMerge(left.id, right.id);
    if (m == nullptr || m->merged != top.merged) continue;
    symbols[left.next].id = -1;
    left.id = top.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* p = FindMerge(symbols[left.prev].id, left.id)) {
        queue.push(Candidate{p->rank, left.prev, p->merged});
      }
    }
    if (left.next >= 0) {
      if (const Merge* p = FindMerge(left.id, symbols[left.next].id)) {
        queue.push(Candidate{p->rank, top.pos, p->merged});
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace hoist::runtime
