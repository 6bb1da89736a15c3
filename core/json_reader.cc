#include "core/json_reader.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

namespace hoist {
namespace {

using nlohmann::json;

std::string JoinKey(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// Tracks the keys of every open object while nlohmann's parser runs, to refuse a key written
// twice: the parser itself keeps the last one silently, and a silently dropped value is exactly
// what a strict reader must not allow.
class DuplicateKeyFinder {
 public:
  bool OnEvent(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: frames_.push_back(Frame{false, 0, {}, {}}); break;
      case json::parse_event_t::array_start: frames_.push_back(Frame{true, 0, {}, {}}); break;
      case json::parse_event_t::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second && duplicate_.empty()) {
          duplicate_ = CurrentPath();
        }
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        CountArrayElement();
        break;
      case json::parse_event_t::value: CountArrayElement(); break;
    }
    return true;
  }

  // The path of the first key seen twice, or "" when there was none.
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool is_array;
    size_t index;
    std::set<std::string> keys;
    std::string key;
  };

  void CountArrayElement() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
  }

  std::string CurrentPath() const {
    std::string path;
    for (const Frame& frame : frames_) {
      if (frame.is_array) {
        path.append("[").append(std::to_string(frame.index)).append("]");
      } else {
        path = JoinKey(path, frame.key);
      }
    }
    return path;
  }

  std::vector<Frame> frames_;
  std::string duplicate_;
};

// nlohmann's message after its "[json.exception...] parse error at line L, column C: " prefix,
// which is replaced by our own position.
std::string SyntaxDetail(const std::string& what) {
  size_t at = what.find("syntax error");
  if (at == std::string::npos) {
    // "[json.exception.out_of_range.406] number overflow ..." has no position prefix.
    size_t bracket = what.find("] ");
    at = bracket == std::string::npos ? 0 : bracket + 2;
  }
  return what.substr(at);
}

// The offset of the first '{' or '[' that opens a level deeper than `max_depth`, or npos. Strings
// are skipped as the parser skips them, so for text that parses the count is the parser's; text
// that does not parse is the parser's to refuse.
size_t FirstTooDeep(std::string_view text, int max_depth) {
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      i = j;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return i;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

Status Fail(JsonFault kind, JsonFault* fault, std::string message) {
  if (fault != nullptr) *fault = kind;
  return InvalidArgumentError(std::move(message));
}

}  // namespace

std::string JsonWhere(std::string_view text, size_t index) {
  const std::string_view before = text.substr(0, std::min(index, text.size()));
  const size_t line = 1 + std::count(before.begin(), before.end(), '\n');
  const size_t last_newline = before.rfind('\n');
  const size_t column = last_newline == std::string_view::npos ? index + 1 : index - last_newline;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

StatusOr<json> ParseJson(std::string_view text, std::string_view source, const JsonLimits& limits,
                         JsonFault* fault) {
  if (fault != nullptr) *fault = JsonFault::kNone;
  const std::string name(source);
  if (static_cast<int64_t>(text.size()) > limits.max_bytes) {
    return Fail(JsonFault::kTooLarge, fault,
                name + ": " + std::to_string(text.size()) + " bytes of JSON, more than the " +
                    std::to_string(limits.max_bytes) +
                    " bytes hoist reads from such a document; is it the right file?");
  }
  if (const size_t at = FirstTooDeep(text, limits.max_depth); at != std::string_view::npos) {
    return Fail(JsonFault::kTooDeep, fault,
                name + ": at " + JsonWhere(text, at) + ": objects and arrays nest more than " +
                    std::to_string(limits.max_depth) +
                    " levels deep, the most hoist reads (real files nest a few); is it the "
                    "right file?");
  }
  DuplicateKeyFinder finder;
  const json::parser_callback_t callback = [&finder](int /*depth*/, json::parse_event_t event,
                                                     json& parsed) {
    return finder.OnEvent(event, parsed);
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based offset of the last character read, where the error was noticed.
    const size_t index = e.byte == 0 ? 0 : std::min<size_t>(e.byte - 1, text.size());
    return Fail(
        JsonFault::kNotJson, fault,
        name + ": not valid JSON at " + JsonWhere(text, index) + ": " + SyntaxDetail(e.what()));
  } catch (const json::exception& e) {
    // Only number overflow ("1e400") gets here; nlohmann names the number but not where.
    return Fail(JsonFault::kNotJson, fault, name + ": not valid JSON: " + SyntaxDetail(e.what()));
  }
  if (!finder.duplicate().empty()) {
    return Fail(JsonFault::kDuplicateKey, fault,
                name + ": " + finder.duplicate() + ": the key appears twice in its object");
  }
  return root;
}

StatusOr<json> ReadJsonFile(FileSystem& fs, const std::string& path, const JsonLimits& limits) {
  HOIST_ASSIGN_OR_RETURN(std::string text, ReadFileToString(fs, path, limits.max_bytes));
  return ParseJson(text, path, limits);
}

}  // namespace hoist
