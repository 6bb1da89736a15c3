#include "runtime/interchange/bpe_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "runtime/interchange/unicode_text.h"

namespace hoist::runtime {
namespace {

using nlohmann::json;

// Errors about the file `name`, at the JSON field `field`.
Status Malformed(const std::string& name, const std::string& field, const std::string& what) {
  return InvalidArgumentError("tokenizer '" + name + "': " + field + ": " + what);
}
Status Unsupported(const std::string& name, const std::string& field, const std::string& what) {
  return UnimplementedError("tokenizer '" + name + "': " + field + ": " + what +
                            "; hoist reads byte-level BPE tokenizers as GPT-2 and Llama 3 write "
                            "them");
}

bool IsNullOrAbsent(const json& object, const char* key) {
  return !object.contains(key) || object[key].is_null();
}

// object[key] as a bool, `fallback` when absent or null; anything else is an error naming
// field.key.
StatusOr<bool> Flag(const std::string& name, const json& object, const char* key, bool fallback,
                    const std::string& field) {
  if (IsNullOrAbsent(object, key)) return fallback;
  if (!object[key].is_boolean()) {
    return Malformed(name, field + "." + key,
                     "expected true or false, found " + object[key].dump());
  }
  return object[key].get<bool>();
}

// object[key] as a string, "" when absent or null; anything else is an error naming field.key.
StatusOr<std::string> Text(const std::string& name, const json& object, const char* key,
                           const std::string& field) {
  if (IsNullOrAbsent(object, key)) return std::string();
  if (!object[key].is_string()) {
    return Malformed(name, field + "." + key, "expected a string, found " + object[key].dump());
  }
  return object[key].get<std::string>();
}

// The pre-tokenizer `config` at `field`, as the list of splits it applies. ByteLevel must come
// last, since it turns bytes into the byte alphabet.
Status ReadPreTokenizer(const std::string& name, const json& config, const std::string& field,
                        bool last, std::vector<SplitPattern>* splits) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return Malformed(name, field, "expected an object with a \"type\"");
  }
  const std::string type = config["type"];
  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array() ||
        config["pretokenizers"].empty()) {
      return Malformed(name, field + ".pretokenizers", "expected a non-empty array");
    }
    const json& list = config["pretokenizers"];
    for (size_t i = 0; i < list.size(); ++i) {
      HOIST_RETURN_IF_ERROR(ReadPreTokenizer(name, list[i],
                                             field + ".pretokenizers[" + std::to_string(i) + "]",
                                             last && i + 1 == list.size(), splits));
    }
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    if (!last) return Unsupported(name, field, "ByteLevel before another pre-tokenizer");
    HOIST_ASSIGN_OR_RETURN(const bool prefix_space,
                           Flag(name, config, "add_prefix_space", false, field));
    if (prefix_space) return Unsupported(name, field + ".add_prefix_space", "true");
    HOIST_ASSIGN_OR_RETURN(const bool use_regex, Flag(name, config, "use_regex", true, field));
    if (use_regex) splits->push_back(SplitPattern::kGpt2);
    return Status::Ok();
  }
  if (type == "Split") {
    if (last) return Unsupported(name, field, "a Split without a ByteLevel after it");
    const json& pattern = config.contains("pattern") ? config["pattern"] : json();
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
      return Unsupported(name, field + ".pattern", "only {\"Regex\": ...} patterns are read");
    }
    const std::string regex = pattern["Regex"];
    std::optional<SplitPattern> known = SplitPatternFromRegex(regex);
    if (!known) {
      return Unsupported(
          name, field + ".pattern.Regex",
          "unknown split pattern '" + regex + "'; the known ones are GPT-2's and Llama 3's");
    }
    HOIST_ASSIGN_OR_RETURN(const std::string behavior, Text(name, config, "behavior", field));
    if (behavior != "Isolated") {
      return Unsupported(name, field + ".behavior", "only \"Isolated\" is read");
    }
    HOIST_ASSIGN_OR_RETURN(const bool invert, Flag(name, config, "invert", false, field));
    if (invert) return Unsupported(name, field + ".invert", "true");
    splits->push_back(*known);
    return Status::Ok();
  }
  return Unsupported(name, field + ".type", "pre-tokenizer '" + type + "'");
}

// A merge as "a b" (one space) or ["a", "b"].
StatusOr<std::pair<std::string, std::string>> ReadMerge(const std::string& name, const json& merge,
                                                        size_t i) {
  const std::string field = "model.merges[" + std::to_string(i) + "]";
  if (merge.is_string()) {
    const std::string text = merge;
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      return Malformed(name, field, "'" + text + "' is not two tokens separated by one space");
    }
    return std::pair{text.substr(0, space), text.substr(space + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::pair{merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  return Malformed(name, field, "expected \"a b\" or [\"a\", \"b\"]");
}

// The ids of the post-processor `config` at `field` around a single text, appended to *prefix
// and *suffix. TemplateProcessing's "single" template gives them (its SpecialToken entries before
// and after the sequence "A", their ids from "special_tokens"); ByteLevel adds none; Sequence
// applies its processors in order.
Status ReadPostProcessor(const std::string& name, const json& config, const std::string& field,
                         std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return Malformed(name, field, "expected an object with a \"type\"");
  }
  const std::string type = config["type"];
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    if (!config.contains("processors") || !config["processors"].is_array()) {
      return Malformed(name, field + ".processors", "expected an array");
    }
    const json& list = config["processors"];
    for (size_t i = 0; i < list.size(); ++i) {
      HOIST_RETURN_IF_ERROR(ReadPostProcessor(
          name, list[i], field + ".processors[" + std::to_string(i) + "]", prefix, suffix));
    }
    return Status::Ok();
  }
  if (type != "TemplateProcessing") {
    return Unsupported(name, field + ".type", "post-processor '" + type + "'");
  }
  if (!config.contains("single") || !config["single"].is_array()) {
    return Malformed(name, field + ".single", "expected an array of template pieces");
  }
  const json& single = config["single"];
  const json* specials = config.contains("special_tokens") && config["special_tokens"].is_object()
                             ? &config["special_tokens"]
                             : nullptr;
  bool after = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string piece_field = field + ".single[" + std::to_string(i) + "]";
    const json& piece = single[i];
    if (piece.is_object() && piece.contains("Sequence")) {
      if (after) return Malformed(name, piece_field, "a second sequence in a single template");
      after = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") ||
        !piece["SpecialToken"].is_object() || !piece["SpecialToken"].contains("id") ||
        !piece["SpecialToken"]["id"].is_string()) {
      return Malformed(name, piece_field,
                       "expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
    }
    const std::string token = piece["SpecialToken"]["id"];
    if (specials == nullptr || !specials->contains(token) || !(*specials)[token].is_object() ||
        !(*specials)[token].contains("ids") || !(*specials)[token]["ids"].is_array()) {
      return Malformed(name, field + ".special_tokens",
                       "the template's special token '" + token + "' has no \"ids\"");
    }
    for (const json& id : (*specials)[token]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX - 1) {
        return Malformed(name, field + ".special_tokens[\"" + token + "\"].ids",
                         "expected ids in 0.." + std::to_string(INT32_MAX - 1));
      }
      (after ? suffix : prefix)->push_back(id.get<int32_t>());
    }
  }
  if (!after) return Malformed(name, field + ".single", "no {\"Sequence\": ...} for the text");
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Load(const std::string& path,
                                                           FileSystem& fs) {
  StatusOr<std::string> text = ReadFileToString(fs, path, kTokenizerJsonMaxBytes);
  if (!text.ok()) return text.status().WithContext("reading tokenizer '" + path + "'");
  return Parse(*text, path);
}

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Parse(std::string_view text,
                                                            const std::string& name) {
  JsonFault fault;
  StatusOr<json> parsed = ParseJson(text, "tokenizer '" + name + "'",
                                    JsonLimits{kJsonMaxDepth, kTokenizerJsonMaxBytes}, &fault);
  if (!parsed.ok()) {
    if (fault != JsonFault::kNotJson) return parsed.status();
    return InvalidArgumentError(parsed.status().message() + " (the text is " +
                                std::to_string(text.size()) +
                                " bytes); is it truncated? Give a Hugging Face tokenizer.json");
  }
  json root = std::move(parsed).value();
  if (!root.is_object()) return Malformed(name, "(top level)", "expected a JSON object");
  std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer());
  tokenizer->name_ = name;

  if (!IsNullOrAbsent(root, "normalizer")) {
    return Unsupported(name, "normalizer",
                       "a normalizer (" + root["normalizer"].dump().substr(0, 80) + ")");
  }
  if (IsNullOrAbsent(root, "pre_tokenizer")) {
    return Unsupported(name, "pre_tokenizer", "missing; byte-level BPE needs ByteLevel");
  }
  HOIST_RETURN_IF_ERROR(ReadPreTokenizer(name, root["pre_tokenizer"], "pre_tokenizer",
                                         /*last=*/true, &tokenizer->splits_));
  if (tokenizer->splits_.empty()) {
    return Unsupported(name, "pre_tokenizer",
                       "no split pattern (ByteLevel with use_regex false "
                       "and no Split before it)");
  }
  if (IsNullOrAbsent(root, "decoder") || !root["decoder"].is_object() ||
      !root["decoder"].contains("type") || root["decoder"]["type"] != "ByteLevel") {
    return Unsupported(name, "decoder", "expected a ByteLevel decoder");
  }

  if (!root.contains("model") || !root["model"].is_object()) {
    return Malformed(name, "model", "missing; expected the BPE model object");
  }
  const json& model = root["model"];
  if (model.contains("type") && model["type"] != "BPE") {
    return Unsupported(name, "model.type", "model '" + model["type"].dump() + "'");
  }
  if (!IsNullOrAbsent(model, "dropout")) return Unsupported(name, "model.dropout", "BPE dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!IsNullOrAbsent(model, key) && model[key] != "") {
      return Unsupported(name, std::string("model.") + key, model[key].dump());
    }
  }
  if (model.contains("byte_fallback") && model["byte_fallback"] == true) {
    return Unsupported(name, "model.byte_fallback", "true");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Malformed(name, "model.vocab", "missing; expected an object of token: id");
  }
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX - 1) {
      return Malformed(name, "model.vocab[\"" + token + "\"]",
                       "expected an id in 0.." + std::to_string(INT32_MAX - 1));
    }
    vocab.emplace(token, id.get<int32_t>());
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return Malformed(name, "model.merges", "missing; expected an array");
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(model["merges"].size());
  for (size_t i = 0; i < model["merges"].size(); ++i) {
    HOIST_ASSIGN_OR_RETURN(auto merge, ReadMerge(name, model["merges"][i], i));
    merges.push_back(std::move(merge));
  }
  HOIST_ASSIGN_OR_RETURN(const bool ignore_merges,
                         Flag(name, model, "ignore_merges", false, "model"));
  HOIST_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::Create(std::move(vocab), merges, ignore_merges,
                                                        "tokenizer '" + name + "'"));
  tokenizer->model_.emplace(std::move(bpe));
  tokenizer->id_limit_ = tokenizer->model_->id_limit();

  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    if (!root["added_tokens"].is_array())
      return Malformed(name, "added_tokens", "expected an array");
    const json& list = root["added_tokens"];
    std::optional<int32_t> max_added;
    const int32_t model_entries = static_cast<int32_t>(tokenizer->model_->vocab_entries());
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      const json& entry = list[i];
      if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string()) {
        return Malformed(name, field, "expected an object with a string \"content\"");
      }
      for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
        HOIST_ASSIGN_OR_RETURN(const bool set, Flag(name, entry, flag, false, field));
        if (set) return Unsupported(name, field + "." + flag, "true");
      }
      AddedToken token;
      token.content = entry["content"];
      HOIST_ASSIGN_OR_RETURN(const bool special, Flag(name, entry, "special", false, field));
      HOIST_ASSIGN_OR_RETURN(token.normalized, Flag(name, entry, "normalized", !special, field));
      if (token.content.empty()) continue;
      // The id, as the library assigns it: an added token seen before, else the model's, else
      // the next free one.
      auto seen = std::find_if(tokenizer->added_.begin(), tokenizer->added_.end(),
                               [&](const AddedToken& t) { return t.content == token.content; });
      if (seen != tokenizer->added_.end()) continue;
      if (std::optional<int32_t> id = tokenizer->model_->Id(token.content)) {
        token.id = *id;
      } else if (!max_added) {
        token.id = model_entries;
      } else {
        token.id = *max_added >= model_entries ? *max_added + 1 : model_entries;
      }
      max_added = std::max(max_added.value_or(token.id), token.id);
      tokenizer->added_by_id_[token.id] = token.content;
      tokenizer->max_added_bytes_ = std::max(tokenizer->max_added_bytes_, token.content.size());
      tokenizer->added_first_byte_[static_cast<unsigned char>(token.content[0])] = true;
      tokenizer->id_limit_ = std::max(tokenizer->id_limit_, token.id + 1);
      tokenizer->added_.push_back(std::move(token));
    }
  }
  if (!IsNullOrAbsent(root, "post_processor")) {
    // A post-processor this reader does not know matters only to those who ask for its tokens.
    Status read = ReadPostProcessor(name, root["post_processor"], "post_processor",
                                    &tokenizer->special_prefix_, &tokenizer->special_suffix_);
    if (!read.ok()) {
      tokenizer->special_prefix_.clear();
      tokenizer->special_suffix_.clear();
      tokenizer->post_processor_error_ = read;
    }
    for (int32_t id : tokenizer->special_prefix_) {
      tokenizer->id_limit_ = std::max(tokenizer->id_limit_, id + 1);
    }
    for (int32_t id : tokenizer->special_suffix_) {
      tokenizer->id_limit_ = std::max(tokenizer->id_limit_, id + 1);
    }
  }
  return tokenizer;
}

void BpeTokenizer::SplitAddedTokens(std::string_view text, std::vector<Segment>* out) const {
  out->clear();
  // Leftmost-longest matches of the added tokens with the given `normalized` flag in
  // [begin, end), as segments; the text between them stays plain.
  auto split = [&](size_t begin, size_t end, bool normalized, std::vector<Segment>* segments) {
    size_t plain = begin;
    for (size_t at = begin; at < end;) {
      if (!added_first_byte_[static_cast<unsigned char>(text[at])]) {
        ++at;
        continue;
      }
      const AddedToken* best = nullptr;
      for (const AddedToken& token : added_) {
        if (token.normalized != normalized || token.content.size() > end - at) continue;
        if (best != nullptr && token.content.size() <= best->content.size()) continue;
        if (std::memcmp(text.data() + at, token.content.data(), token.content.size()) == 0) {
          best = &token;
        }
      }
      if (best == nullptr) {
        ++at;
        continue;
      }
      if (plain < at) segments->push_back(Segment{plain, at, -1});
      segments->push_back(Segment{at, at + best->content.size(), best->id});
      at += best->content.size();
      plain = at;
    }
    if (plain < end) segments->push_back(Segment{plain, end, -1});
  };
  std::vector<Segment> first;
  split(0, text.size(), /*normalized=*/false, &first);
  for (const Segment& segment : first) {
    if (segment.id >= 0) {
      out->push_back(segment);
    } else {
      split(segment.begin, segment.end, /*normalized=*/true, out);
    }
  }
}

void BpeTokenizer::FirstSplit(std::string_view text, std::vector<TextPiece>* out) const {
  SplitByPattern(splits_.front(), text, out);
}

std::vector<TextPiece> BpeTokenizer::LaterSplits(std::string_view piece) const {
  // Later splits apply within each piece of the earlier ones.
  std::vector<TextPiece> current{TextPiece{0, piece.size()}};
  std::vector<TextPiece> next;
  for (size_t s = 1; s < splits_.size(); ++s) {
    next.clear();
    for (const TextPiece& p : current) {
      const size_t before = next.size();
      SplitByPattern(splits_[s], piece.substr(p.begin, p.end - p.begin), &next);
      for (size_t k = before; k < next.size(); ++k) {
        next[k].begin += p.begin;
        next[k].end += p.begin;
      }
    }
    current.swap(next);
  }
  return current;
}

std::vector<std::string> BpeTokenizer::PreTokenize(std::string_view text) const {
  std::vector<TextPiece> first;
  FirstSplit(text, &first);
  std::vector<std::string> pieces;
  for (const TextPiece& p : first) {
    const std::string_view piece = text.substr(p.begin, p.end - p.begin);
    for (const TextPiece& q : LaterSplits(piece)) {
      pieces.emplace_back();
      AppendByteAlphabet(piece.substr(q.begin, q.end - q.begin), &pieces.back());
    }
  }
  return pieces;
}

void BpeTokenizer::EncodePiece(std::string_view piece, WordCache* cache,
                               std::vector<int32_t>* out) const {
  constexpr size_t kCacheEntries = 1 << 16;
  for (const TextPiece& p : LaterSplits(piece)) {
    const std::string_view word = piece.substr(p.begin, p.end - p.begin);
    if (cache == nullptr || word.size() > 64) {
      model_->EncodeWord(word, out);
      continue;
    }
    auto it = cache->find(std::string(word));
    if (it == cache->end()) {
      if (cache->size() >= kCacheEntries) cache->clear();
      std::vector<int32_t> ids;
      model_->EncodeWord(word, &ids);
      it = cache->emplace(std::string(word), std::move(ids)).first;
    }
    out->insert(out->end(), it->second.begin(), it->second.end());
  }
}

void BpeTokenizer::EncodeText(std::string_view text, WordCache* cache,
                              std::vector<int32_t>* out) const {
  std::vector<TextPiece> pieces;
  FirstSplit(text, &pieces);
  for (const TextPiece& p : pieces) EncodePiece(text.substr(p.begin, p.end - p.begin), cache, out);
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  std::vector<Segment> segments;
  SplitAddedTokens(text, &segments);
  WordCache cache;
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      EncodeText(text.substr(segment.begin, segment.end - segment.begin), &cache, &ids);
    }
  }
  return ids;
}

std::optional<int32_t> BpeTokenizer::AddedTokenId(std::string_view content) const {
  for (const AddedToken& token : added_) {
    if (token.content == content) return token.id;
  }
  return std::nullopt;
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids) const {
  std::string bytes;
  std::vector<CodePoint> cps;
  for (int32_t id : ids) {
    auto added = added_by_id_.find(id);
    const std::string* token = added != added_by_id_.end() ? &added->second : model_->Token(id);
    if (token == nullptr) continue;
    DecodeUtf8(*token, &cps);
    const size_t start = bytes.size();
    bool all_bytes = true;
    for (const CodePoint& cp : cps) {
      std::optional<uint8_t> byte = CharToByte(cp.value);
      if (!byte) {
        all_bytes = false;
        break;
      }
      bytes.push_back(static_cast<char>(*byte));
    }
    if (!all_bytes) {
      bytes.resize(start);
      bytes += *token;
    }
  }
  return bytes;
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text,
                                          std::vector<int64_t>* offsets) const {
  std::vector<int32_t> ids;
  offsets->clear();
  std::vector<Segment> segments;
  SplitAddedTokens(text, &segments);
  WordCache cache;
  std::vector<CodePoint> cps;
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      offsets->push_back(static_cast<int64_t>(segment.begin));
      continue;
    }
    const size_t first = ids.size();
    EncodeText(text.substr(segment.begin, segment.end - segment.begin), &cache, &ids);
    // The model's tokens of plain text are in the byte alphabet: a character a byte.
    auto at = static_cast<int64_t>(segment.begin);
    for (size_t i = first; i < ids.size(); ++i) {
      offsets->push_back(at);
      const std::string* token = model_->Token(ids[i]);
      if (token == nullptr) continue;
      DecodeUtf8(*token, &cps);
      at += static_cast<int64_t>(cps.size());
    }
  }
  offsets->push_back(static_cast<int64_t>(text.size()));
  return ids;
}

void BpeStreamEncoder::Add(std::string_view chunk, std::vector<int32_t>* out) {
  pending_.append(chunk);
  Process(/*final=*/false, out);
}

void BpeStreamEncoder::Finish(std::vector<int32_t>* out) {
  Process(/*final=*/true, out);
  EncodeHeldText(/*final=*/true, out);
  pending_.clear();
  text_.clear();
}

void BpeStreamEncoder::Process(bool final, std::vector<int32_t>* out) {
  // An added token that starts before `cut` lies wholly in pending_, and so does any token that
  // could overlap it (twice the longest), so the segments that start before it are final.
  const size_t margin = 2 * tokenizer_.max_added_bytes_;
  const size_t cut = final ? pending_.size() : pending_.size() - std::min(pending_.size(), margin);
  tokenizer_.SplitAddedTokens(pending_, &segments_);
  size_t consumed = 0;
  for (const BpeTokenizer::Segment& segment : segments_) {
    if (segment.begin >= cut && !final) break;
    if (segment.id >= 0) {
      EncodeHeldText(/*final=*/true, out);
      out->push_back(segment.id);
      consumed = segment.end;
    } else {
      const size_t end = final ? segment.end : std::min(segment.end, cut);
      text_.append(pending_, segment.begin, end - segment.begin);
      consumed = end;
      EncodeHeldText(/*final=*/false, out);
    }
  }
  pending_.erase(0, consumed);
}

void BpeStreamEncoder::EncodeHeldText(bool final, std::vector<int32_t>* out) {
  if (text_.empty()) return;
  // Without more text, the last pieces may still grow or split differently (a contraction, a
  // whitespace run before a line break), so the last three are held back; they start where the
  // pattern would start a match in the whole text, since matching has no look-behind.
  constexpr size_t kHeldPieces = 3;
  const size_t complete = final ? text_.size() : CompleteUtf8Prefix(text_);
  pieces_.clear();
  tokenizer_.FirstSplit(std::string_view(text_).substr(0, complete), &pieces_);
  size_t emit = pieces_.size();
  if (!final) {
    emit = pieces_.size() > kHeldPieces ? pieces_.size() - kHeldPieces : 0;
    if (emit == 0 && text_.size() > kMaxHeldBytes && !pieces_.empty()) {
      emit = pieces_.size() > 1 ? pieces_.size() - 1 : 1;
    }
  }
  for (size_t i = 0; i < emit; ++i) {
    const TextPiece& p = pieces_[i];
    tokenizer_.EncodePiece(std::string_view(text_).substr(p.begin, p.end - p.begin), &cache_, out);
  }
  const size_t consumed = emit == 0 ? 0 : pieces_[emit - 1].end;
  text_.erase(0, final ? text_.size() : consumed);
}

}  // namespace hoist::runtime
