#include "runtime/config/config_reader.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <limits>
#include <set>

#include "core/json_reader.h"

namespace hoist::runtime::config_internal {
namespace {

using nlohmann::json;

// A value as a user would recognise it in a message, cut short when long.
std::string Excerpt(const json& value) {
  std::string text = value.dump();
  constexpr size_t kMax = 60;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

std::string DescribeFound(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string (" + Excerpt(value) + ")";
    case json::value_t::boolean: return "a boolean (" + Excerpt(value) + ")";
    default: return "a number (" + Excerpt(value) + ")";
  }
}

bool IsAuto(const json& value) {
  return value.is_string() && value.get_ref<const std::string&>() == "auto";
}

// What DeepSpeed's hjson loader accepts beyond JSON and real configs use: `//`, `/* */` and `#`
// comments, and a comma after the last element of an object or array. Each is overwritten with
// spaces (newlines kept), so that the JSON parser's byte offsets, and with them the line and
// column of every later error, are those of the original text.
StatusOr<std::string> BlankHjsonExtras(std::string_view text, std::string_view source_name) {
  std::string out(text);
  // The last character outside comments and whitespace, and for a comma, the one before it.
  size_t last = std::string::npos;
  char before_comma = 0;
  auto blank = [&out](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      if (out[i] != '\n') out[i] = ' ';
    }
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      // A string, escapes included, is copied as it is; an unterminated one is the parser's to
      // report.
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      i = std::min(j, text.size());
      last = i < text.size() ? i : std::string::npos;
      continue;
    }
    if (c == '#' || (c == '/' && i + 1 < text.size() && text[i + 1] == '/')) {
      size_t end = text.find('\n', i);
      if (end == std::string_view::npos) end = text.size();
      blank(i, end);
      i = end;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      size_t end = text.find("*/", i + 2);
      if (end == std::string_view::npos) {
        return InvalidArgumentError(std::string(source_name) + ": the comment opened at " +
                                    JsonWhere(text, i) + " is never closed with */");
      }
      blank(i, end + 2);
      i = end + 1;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == '}' || c == ']') {
      // A trailing comma follows a value; "[,]" or "{,}" stays for the parser to refuse.
      if (last != std::string::npos && out[last] == ',' && before_comma != 0 &&
          before_comma != ',' && before_comma != '{' && before_comma != '[') {
        out[last] = ' ';
      }
    } else if (c == ',') {
      before_comma = last == std::string::npos ? 0 : out[last];
    }
    last = i;
  }
  return out;
}

}  // namespace

void ErrorSource::AddOverride(std::string path, std::string override_text) {
  overrides_.emplace_back(std::move(path), std::move(override_text));
}

namespace {

// Whether `outer` is `inner` or a path above it, segment-wise.
bool Encloses(std::string_view outer, std::string_view inner) {
  if (inner.substr(0, outer.size()) != outer) return false;
  return inner.size() == outer.size() || inner[outer.size()] == '.' || inner[outer.size()] == '[';
}

}  // namespace

bool ErrorSource::Overridden(std::string_view path) const {
  for (const auto& [overridden, text] : overrides_) {
    if (Encloses(overridden, path) || Encloses(path, overridden)) return true;
  }
  return false;
}

std::string ErrorSource::Describe(std::string_view path, std::string_view message) const {
  // A path is attributed to an override when one of the two encloses the other, segment-wise.
  std::string source = source_name_;
  if (!path.empty()) {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      if (Encloses(it->first, path) || Encloses(path, it->first)) {
        source = "--set " + it->second;
        break;
      }
    }
  }
  std::string text = source + ": ";
  if (!path.empty()) text += std::string(path) + ": ";
  text += message;
  return text;
}

Status ErrorSource::Invalid(std::string_view path, std::string_view message) const {
  return InvalidArgumentError(Describe(path, message));
}

Status ErrorSource::Unimplemented(std::string_view path, std::string_view message) const {
  return UnimplementedError(Describe(path, message));
}

namespace {

// The config's JSON: the shared bounded reader (core/json_reader.h) on the text with its
// hjson extras blanked out, which keeps every byte offset, so errors point into the original.
StatusOr<json> ParseHjson(std::string_view text, std::string_view source_name, JsonFault* fault) {
  *fault = JsonFault::kNone;
  HOIST_ASSIGN_OR_RETURN(std::string json_text, BlankHjsonExtras(text, source_name));
  StatusOr<json> root = ParseJson(json_text, source_name, JsonLimits{}, fault);
  if (!root.ok() && *fault == JsonFault::kDuplicateKey) {
    return InvalidArgumentError(root.status().message() + "; keep one");
  }
  if (!root.ok() && *fault == JsonFault::kNotJson) {
    return InvalidArgumentError(
        root.status().message() +
        ". hoist reads JSON with //, /* */ and # comments and trailing commas (as DeepSpeed's "
        "hjson loader does), but keys and strings must be quoted");
  }
  return root;
}

}  // namespace

StatusOr<json> ParseConfigJson(std::string_view text, std::string_view source_name) {
  JsonFault fault;
  return ParseHjson(text, source_name, &fault);
}

Status ApplyOverride(const std::string& override_text, json* root, ErrorSource* errors) {
  const std::string quoted = "override \"" + override_text + "\"";
  size_t eq = override_text.find('=');
  if (eq == std::string::npos) {
    return InvalidArgumentError(quoted + " has no '='; write it as key.path=value, e.g. " +
                                "optimizer.params.lr=3e-4");
  }
  std::string path = override_text.substr(0, eq);
  std::string value_text = override_text.substr(eq + 1);

  std::vector<std::string> keys;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    keys.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (keys.back().empty()) {
      return InvalidArgumentError(quoted + " has an empty key in \"" + path +
                                  "\"; write it as key.path=value");
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }

  // The value reads as it would in the file (comments, trailing commas, the nesting limit); a
  // value that is not JSON is the text itself.
  JsonFault fault;
  StatusOr<json> parsed = ParseHjson(value_text, quoted, &fault);
  json value;
  if (parsed.ok()) {
    value = std::move(parsed).value();
  } else if (fault == JsonFault::kTooDeep || fault == JsonFault::kTooLarge) {
    return parsed.status();
  } else {
    value = value_text;
  }

  if (root->is_null()) *root = json::object();
  json* node = root;
  std::string walked;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!node->is_object()) {
      return InvalidArgumentError(quoted + ": " + (walked.empty() ? "the config" : walked) +
                                  " is " + DescribeFound(*node) +
                                  ", not an object, so it has no key \"" + keys[i] + "\"");
    }
    walked = JoinPath(walked, keys[i]);
    json& child = (*node)[keys[i]];
    if (i + 1 < keys.size() && child.is_null()) child = json::object();
    node = &child;
  }
  *node = std::move(value);
  errors->AddOverride(path, override_text);
  return Status::Ok();
}

size_t EditDistance(std::string_view a, std::string_view b) {
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance between the first i characters of a and the first j of b.
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string_view ClosestMatch(std::string_view word,
                              const std::vector<std::string_view>& candidates) {
  std::string_view best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (std::string_view candidate : candidates) {
    size_t distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  // Up to about a third of the characters wrong still reads as a misspelling; more is a
  // different word, and suggesting it would mislead.
  size_t longer = std::max(word.size(), best.size());
  if (best.empty() || best_distance * 3 > longer + 1) return {};
  return best;
}

std::string Lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

std::string JoinPath(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  std::string path(parent);
  path += '.';
  path += key;
  return path;
}

Section::Section(const json* object, std::string path, const ErrorSource* errors)
    : object_(object), path_(std::move(path)), errors_(errors) {
  HOIST_CHECK(object_->is_object()) << path_;
}

Status Section::AllowOnly(const std::vector<std::string_view>& allowed) const {
  for (const auto& [key, value] : object_->items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    // Quoted, so that a stray space or a look-alike is visible next to the suggestion.
    std::string message = "unknown key \"" + key + "\"";
    std::string_view suggestion = ClosestMatch(key, allowed);
    if (!suggestion.empty()) {
      message.append("; did you mean \"").append(PathOf(suggestion)).append("\"?");
      auto without_spaces = [](std::string_view text) {
        std::string kept;
        for (char c : text) {
          if (!std::isspace(static_cast<unsigned char>(c))) kept += c;
        }
        return kept;
      };
      if (without_spaces(key) == suggestion) {
        message += " (the two differ only in whitespace)";
      } else if (EditDistance(key, suggestion) == 0) {
        message += " (keys are case-sensitive)";
      }
    } else {
      message += "; the keys valid here are:";
      for (std::string_view valid : allowed) message.append(" ").append(valid);
    }
    return Invalid(key, message);
  }
  return Status::Ok();
}

const json* Section::Find(std::string_view key) const {
  auto it = object_->find(key);
  return it == object_->end() ? nullptr : &*it;
}

bool Section::Has(std::string_view key) const {
  const json* value = Find(key);
  return value != nullptr && !value->is_null();
}

std::vector<std::string> Section::Keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object_->items()) keys.push_back(key);
  return keys;
}

Status Section::WrongType(const json& value, const std::string& path,
                          std::string_view expected) const {
  if (IsAuto(value)) {
    return errors_->Invalid(path,
                            "\"auto\" is a placeholder that the Hugging Face Trainer fills in; "
                            "hoist has no Trainer to fill it in, so write the value itself");
  }
  return errors_->Invalid(path,
                          "expected " + std::string(expected) + ", found " + DescribeFound(value));
}

Status Section::ReadInt(const json& value, const std::string& path, int64_t lo, int64_t hi,
                        int64_t* out) const {
  // Integers arrive however the author spelled them: 8, 8.0, 5e8. Any integral value counts.
  long double number;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    number = static_cast<long double>(value.get<int64_t>());
  } else if (value.is_number_unsigned()) {
    number = static_cast<long double>(value.get<uint64_t>());
  } else if (value.is_number_float()) {
    double d = value.get<double>();
    if (std::trunc(d) != d) {
      return errors_->Invalid(path, "expected an integer, found " + Excerpt(value));
    }
    number = d;
  } else {
    return WrongType(value, path, "an integer");
  }
  if (number < static_cast<long double>(lo) || number > static_cast<long double>(hi)) {
    return errors_->Invalid(path, Excerpt(value) + " is out of range [" + std::to_string(lo) +
                                      ", " + std::to_string(hi) + "]");
  }
  *out = static_cast<int64_t>(number);
  return Status::Ok();
}

Status Section::ReadFloat(const json& value, const std::string& path, float* out) const {
  if (!value.is_number()) return WrongType(value, path, "a number");
  double d = value.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > FLT_MAX) {
    return errors_->Invalid(path, Excerpt(value) + " does not fit in a float");
  }
  // Below fp32's normal range a value is 0 or keeps only a few bits: 1e-300 would be read as 0.
  if (d != 0 && std::fabs(d) < FLT_MIN) {
    return errors_->Invalid(path, Excerpt(value) +
                                      " is below the smallest normal float (1.17549e-38), the "
                                      "precision hoist keeps it in, where it would be 0 or lose "
                                      "its precision");
  }
  *out = static_cast<float>(d);
  return Status::Ok();
}

Status Section::Int(std::string_view key, int64_t* out) const {
  if (!Has(key)) return Status::Ok();
  return ReadInt(*Find(key), PathOf(key), std::numeric_limits<int64_t>::min(),
                 std::numeric_limits<int64_t>::max(), out);
}

Status Section::Int(std::string_view key, int* out) const {
  if (!Has(key)) return Status::Ok();
  int64_t wide = 0;
  HOIST_RETURN_IF_ERROR(ReadInt(*Find(key), PathOf(key), std::numeric_limits<int>::min(),
                                std::numeric_limits<int>::max(), &wide));
  *out = static_cast<int>(wide);
  return Status::Ok();
}

Status Section::UInt(std::string_view key, uint64_t* out) const {
  if (!Has(key)) return Status::Ok();
  const json& value = *Find(key);
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return Status::Ok();
  }
  int64_t signed_value = 0;
  HOIST_RETURN_IF_ERROR(
      ReadInt(value, PathOf(key), 0, std::numeric_limits<int64_t>::max(), &signed_value));
  *out = static_cast<uint64_t>(signed_value);
  return Status::Ok();
}

Status Section::Float(std::string_view key, float* out) const {
  if (!Has(key)) return Status::Ok();
  return ReadFloat(*Find(key), PathOf(key), out);
}

Status Section::Double(std::string_view key, double* out) const {
  if (!Has(key)) return Status::Ok();
  const json& value = *Find(key);
  if (!value.is_number()) return WrongType(value, PathOf(key), "a number");
  *out = value.get<double>();
  return Status::Ok();
}

Status Section::Bool(std::string_view key, bool* out) const {
  if (!Has(key)) return Status::Ok();
  const json& value = *Find(key);
  if (!value.is_boolean()) return WrongType(value, PathOf(key), "true or false");
  *out = value.get<bool>();
  return Status::Ok();
}

Status Section::String(std::string_view key, std::string* out) const {
  if (!Has(key)) return Status::Ok();
  const json& value = *Find(key);
  if (!value.is_string()) return WrongType(value, PathOf(key), "a string");
  *out = value.get<std::string>();
  return Status::Ok();
}

Status Section::FloatPair(std::string_view key, float* first, float* second) const {
  if (!Has(key)) return Status::Ok();
  const json& value = *Find(key);
  if (!value.is_array()) return WrongType(value, PathOf(key), "an array of two numbers");
  if (value.size() != 2) {
    return Invalid(key, "expected an array of two numbers, found " + std::to_string(value.size()) +
                            " elements");
  }
  const std::string path = PathOf(key);
  HOIST_RETURN_IF_ERROR(ReadFloat(value[0], path + "[0]", first));
  return ReadFloat(value[1], path + "[1]", second);
}

StatusOr<Section> Section::Child(std::string_view key) const {
  static const json kEmpty = json::object();
  if (!Has(key)) return Section(&kEmpty, PathOf(key), errors_);
  const json& value = *Find(key);
  if (!value.is_object()) return WrongType(value, PathOf(key), "an object");
  return Section(&value, PathOf(key), errors_);
}

}  // namespace hoist::runtime::config_internal
