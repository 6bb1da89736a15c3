// The JSON machinery under ParseConfig (runtime/config/config.h): parsing with line and column,
// `--set` overrides, and typed reads of one JSON object that name the key path in every error.
// Internal to runtime/config*.cc; other modules use runtime/config/config.h.
//
// All types here are used by one thread at a time; a Section borrows the JSON it reads and the
// ErrorSource it reports through, both of which must outlive it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"

namespace hoist::runtime::config_internal {

// Says where a key's value came from in error messages: the config file, or the `--set`
// override that wrote it (or an enclosing or enclosed path).
class ErrorSource {
 public:
  explicit ErrorSource(std::string source_name) : source_name_(std::move(source_name)) {}

  // Records that `override_text` set the dotted `path`; later records take precedence.
  void AddOverride(std::string path, std::string override_text);

  // True when a `--set` override wrote `path`, an object enclosing it or a key inside it.
  bool Overridden(std::string_view path) const;

  // "<source>: <path>: <message>"; an empty path leaves out its part.
  Status Invalid(std::string_view path, std::string_view message) const;
  Status Unimplemented(std::string_view path, std::string_view message) const;

 private:
  std::string Describe(std::string_view path, std::string_view message) const;

  std::string source_name_;
  std::vector<std::pair<std::string, std::string>> overrides_;  // (path, text)
};

// The deepest nesting of objects and arrays a config may have: the shared bound of every JSON
// hoist reads (core/json_reader.h). Real configs nest 4 levels.
inline constexpr size_t kMaxNestingDepth = kJsonMaxDepth;

// Parses JSON (RFC 8259, each key once) plus what DeepSpeed's hjson loader accepts and real
// configs use: `//`, `/* */` and `#` comments, and trailing commas, within the bounds of
// ParseJson (core/json_reader.h). An error names the line and column.
StatusOr<nlohmann::json> ParseConfigJson(std::string_view text, std::string_view source_name);

// Applies one "a.b.c=value" override to `root`, creating missing (or null) intermediate objects.
// The value is JSON (as ParseConfigJson reads it) if it parses as JSON, else the text itself as
// a string; a value nested too deep is an error. Records the path in
// `errors`. A malformed override (no '=', an empty key segment, a path through a non-object) is
// an InvalidArgument error naming it.
Status ApplyOverride(const std::string& override_text, nlohmann::json* root, ErrorSource* errors);

// Optimal-string-alignment distance (insertions, deletions, substitutions and adjacent
// transpositions each cost 1), compared case-insensitively.
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a plausible misspelling, else "".
std::string_view ClosestMatch(std::string_view word,
                              const std::vector<std::string_view>& candidates);

// "optimizer.params" + "lr" -> "optimizer.params.lr"; "" + "lr" -> "lr".
std::string JoinPath(std::string_view parent, std::string_view key);
// `text` in ASCII lower case (DeepSpeed matches type names and dtype spellings case-blind).
std::string Lower(std::string_view text);

// Typed reads of the keys of one JSON object at `path`. Absent and null keys leave the output
// untouched (the default applies). Every error names the full key path.
class Section {
 public:
  // `object` must be a JSON object.
  Section(const nlohmann::json* object, std::string path, const ErrorSource* errors);

  const std::string& path() const { return path_; }
  std::string PathOf(std::string_view key) const { return JoinPath(path_, key); }
  const ErrorSource& errors() const { return *errors_; }

  // An error for the first key not in `allowed`, with the closest allowed key as a suggestion.
  Status AllowOnly(const std::vector<std::string_view>& allowed) const;

  // True when `key` is present with a non-null value.
  bool Has(std::string_view key) const;
  // The value of a present key, else nullptr.
  const nlohmann::json* Find(std::string_view key) const;
  // Keys in the object's order.
  std::vector<std::string> Keys() const;

  Status Int(std::string_view key, int64_t* out) const;
  Status Int(std::string_view key, int* out) const;
  Status UInt(std::string_view key, uint64_t* out) const;
  Status Float(std::string_view key, float* out) const;
  Status Double(std::string_view key, double* out) const;
  Status Bool(std::string_view key, bool* out) const;
  Status String(std::string_view key, std::string* out) const;
  // Two numbers [a, b], each reported as `key[i]` on error.
  Status FloatPair(std::string_view key, float* first, float* second) const;
  // The object at `key`; an absent or null key gives a Section over an empty object.
  StatusOr<Section> Child(std::string_view key) const;

  Status Invalid(std::string_view key, std::string_view message) const {
    return errors_->Invalid(PathOf(key), message);
  }

 private:
  // Type checks shared by the numeric getters, with `path` naming the value.
  Status ReadInt(const nlohmann::json& value, const std::string& path, int64_t lo, int64_t hi,
                 int64_t* out) const;
  Status ReadFloat(const nlohmann::json& value, const std::string& path, float* out) const;
  Status WrongType(const nlohmann::json& value, const std::string& path,
                   std::string_view expected) const;

  const nlohmann::json* object_;
  std::string path_;
  const ErrorSource* errors_;
};

}  // namespace hoist::runtime::config_internal
