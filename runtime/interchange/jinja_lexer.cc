#include "runtime/interchange/jinja_lexer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace hoist::runtime::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Byte offsets to line:column (1-based; columns count code points). The lexer asks in order of
// offset, so each answer continues from the last one.
class Positions {
 public:
  explicit Positions(std::string_view source) : source_(source) {}
  SourcePos At(size_t offset) {
    if (offset < offset_) {
      offset_ = 0;
      line_ = 1;
      column_ = 1;
    }
    for (; offset_ < offset && offset_ < source_.size(); ++offset_) {
      const unsigned char c = static_cast<unsigned char>(source_[offset_]);
      if (c == '\n') {
        ++line_;
        column_ = 1;
      } else if ((c & 0xc0) != 0x80) {
        ++column_;
      }
    }
    return SourcePos{line_, column_};
  }

 private:
  std::string_view source_;
  size_t offset_ = 0;
  int line_ = 1;
  int column_ = 1;
};

Status LexError(SourcePos pos, const std::string& what) {
  return InvalidArgumentError(Where(pos) + ": " + what);
}

// The length of the Python whitespace run at s[at...].
size_t SpaceRun(std::string_view s, size_t at) {
  size_t end = at;
  while (end < s.size()) {
    size_t next = end;
    if (!IsPythonSpace(NextCodePoint(s, &next))) break;
    end = next;
  }
  return end - at;
}

// (\d+_)*\d+ at s[at...]: its length, or 0.
size_t DigitGroups(std::string_view s, size_t at) {
  size_t i = at;
  if (i >= s.size() || !IsDigit(s[i])) return 0;
  while (true) {
    while (i < s.size() && IsDigit(s[i])) ++i;
    if (i + 1 < s.size() && s[i] == '_' && IsDigit(s[i + 1])) {
      ++i;
      continue;
    }
    return i - at;
  }
}

// Jinja's float_re at s[at...]: its length, or 0.
size_t MatchFloat(std::string_view s, size_t at) {
  if (at > 0 && s[at - 1] == '.') return 0;
  const size_t whole = DigitGroups(s, at);
  if (whole == 0) return 0;
  size_t i = at + whole;
  auto exponent = [&](size_t from) -> size_t {
    if (from >= s.size() || (s[from] != 'e' && s[from] != 'E')) return 0;
    size_t j = from + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const size_t digits = DigitGroups(s, j);
    return digits == 0 ? 0 : j + digits - from;
  };
  size_t fraction = 0;
  if (i < s.size() && s[i] == '.') {
    const size_t digits = DigitGroups(s, i + 1);
    if (digits > 0) fraction = 1 + digits;
  }
  if (const size_t e = exponent(i + fraction); e > 0) return whole + fraction + e;
  return fraction > 0 ? whole + fraction : 0;
}

// Jinja's integer_re at s[at...]: its length, or 0; the value in *value (0 past int64).
size_t MatchInteger(std::string_view s, size_t at, std::string* digits, int* base) {
  auto run = [&](size_t from, auto is_digit) {
    // (_?[digit])+ from `from`.
    size_t i = from;
    while (true) {
      if (i < s.size() && is_digit(s[i])) {
        digits->push_back(s[i]);
        ++i;
      } else if (i + 1 < s.size() && s[i] == '_' && is_digit(s[i + 1])) {
        digits->push_back(s[i + 1]);
        i += 2;
      } else {
        return i;
      }
    }
  };
  digits->clear();
  if (s[at] == '0' && at + 1 < s.size()) {
    const char prefix = static_cast<char>(std::tolower(static_cast<unsigned char>(s[at + 1])));
    if (prefix == 'b' || prefix == 'o' || prefix == 'x') {
      *base = prefix == 'b' ? 2 : (prefix == 'o' ? 8 : 16);
      const size_t end = run(at + 2, [&](char c) {
        if (*base == 2) return c == '0' || c == '1';
        if (*base == 8) return c >= '0' && c <= '7';
        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      });
      if (!digits->empty()) return end - at;
    }
  }
  *base = 10;
  digits->clear();
  if (s[at] >= '1' && s[at] <= '9') {
    digits->push_back(s[at]);
    return run(at + 1, IsDigit) - at;
  }
  if (s[at] == '0') {
    digits->push_back('0');
    return run(at + 1, [](char c) { return c == '0'; }) - at;
  }
  return 0;
}

// Decodes a string literal's body as Python's unicode-escape does.
Status DecodeString(std::string_view body, SourcePos pos, std::string* out) {
  out->clear();
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out->push_back(c);
      continue;
    }
    const char e = body[++i];
    auto hex = [&](int count) -> StatusOr<uint32_t> {
      uint32_t value = 0;
      for (int k = 1; k <= count; ++k) {
        const size_t at = i + static_cast<size_t>(k);
        if (at >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[at]))) {
          return LexError(pos, std::string("a \\") + e + " escape in a string is cut short");
        }
        const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(body[at])));
        value = value * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
      }
      i += static_cast<size_t>(count);
      return value;
    };
    switch (e) {
      case '\n': break;
      case '\\': out->push_back('\\'); break;
      case '\'': out->push_back('\''); break;
      case '"': out->push_back('"'); break;
      case 'a': out->push_back('\a'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'v': out->push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        HOIST_ASSIGN_OR_RETURN(const uint32_t cp, hex(e == 'x' ? 2 : (e == 'u' ? 4 : 8)));
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
          return LexError(pos, "a string escapes a code point that UTF-8 cannot hold");
        }
        AppendUtf8(cp, out);
        break;
      }
      case 'N': return LexError(pos, "\\N{...} escapes in strings are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t value = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            value = value * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          AppendUtf8(value, out);
        } else {
          out->push_back('\\');
          out->push_back(e);
        }
    }
  }
  return Status::Ok();
}

constexpr std::array<std::string_view, 26> kOperators = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
    "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};

class Lexer {
 public:
  explicit Lexer(std::string_view source) : s_(source), positions_(source) {}

  StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      const size_t tag = FindTag(pos);
      if (tag == std::string_view::npos) {
        EmitText(pos, s_.substr(pos));
        break;
      }
      const char kind = s_[tag + 1];
      const char sign =
          tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : '\0';
      const size_t raw_end = kind == '%' ? MatchRawBegin(tag) : 0;
      EmitText(pos, StripBefore(s_.substr(pos, tag - pos), sign, kind != '{', line_starting));
      size_t at = tag + 2 + (sign != '\0' ? 1 : 0);
      if (raw_end > 0) {
        HOIST_ASSIGN_OR_RETURN(pos, LexRaw(tag, raw_end, &line_starting));
        continue;
      }
      if (kind == '#') {
        HOIST_ASSIGN_OR_RETURN(pos, SkipComment(tag, at, &line_starting));
        continue;
      }
      HOIST_ASSIGN_OR_RETURN(pos, LexTag(tag, at, kind == '%', &line_starting));
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", 0, 0, positions_.At(s_.size())});
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string_view::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string_view::npos;
  }

  // The text before a tag, with the tag's whitespace control applied.
  std::string_view StripBefore(std::string_view text, char sign, bool block_or_comment,
                               bool line_starting) const {
    if (sign == '-') return RStripPythonSpace(text);
    if (sign == '+' || !block_or_comment) return text;
    const size_t last_newline = text.rfind('\n');
    const size_t line_start = last_newline == std::string_view::npos ? 0 : last_newline + 1;
    if (line_start == 0 && !line_starting) return text;
    const std::string_view tail = text.substr(line_start);
    if (!tail.empty() && SpaceRun(tail, 0) == tail.size()) return text.substr(0, line_start);
    return text;
  }

  void EmitText(size_t offset, std::string_view text) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenKind::kText, std::string(text), 0, 0, positions_.At(offset)});
  }

  // After a tag's closing delimiter at `end` (just past it), with the closing sign: skips what the
  // sign or trim_blocks drops and returns where text resumes.
  size_t SkipAfter(size_t end, char sign, bool trim_newline, bool* line_starting) const {
    size_t next = end;
    if (sign == '-') {
      next += SpaceRun(s_, end);
    } else if (sign != '+' && trim_newline && next < s_.size() && s_[next] == '\n') {
      ++next;
    }
    *line_starting = next > end && s_[next - 1] == '\n';
    return next;
  }

  // {%[-+]?\s*raw\s*(-%}\s*|%}) at `tag`: the offset just past it, or 0.
  size_t MatchRawBegin(size_t tag) const {
    size_t i = tag + 2;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ++i;
    i += SpaceRun(s_, i);
    if (s_.substr(i, 3) != "raw") return 0;
    i += 3;
    if (i < s_.size() && IsNameChar(s_[i])) return 0;
    i += SpaceRun(s_, i);
    if (s_.substr(i, 3) == "-%}") return i + 3 + SpaceRun(s_, i + 3);
    if (s_.substr(i, 2) == "%}") return i + 2;
    return 0;
  }

  StatusOr<size_t> LexRaw(size_t tag, size_t body, bool* line_starting) {
    for (size_t i = s_.find("{%", body); i != std::string_view::npos; i = s_.find("{%", i + 1)) {
      size_t j = i + 2;
      const char sign = j < s_.size() && (s_[j] == '-' || s_[j] == '+') ? s_[j] : '\0';
      if (sign != '\0') ++j;
      j += SpaceRun(s_, j);
      if (s_.substr(j, 6) != "endraw") continue;
      j += 6;
      j += SpaceRun(s_, j);
      char end_sign = '\0';
      if (j < s_.size() && (s_[j] == '-' || s_[j] == '+')) end_sign = s_[j++];
      if (s_.substr(j, 2) != "%}") continue;
      EmitText(body, StripBefore(s_.substr(body, i - body), sign, true, false));
      return SkipAfter(j + 2, end_sign, true, line_starting);
    }
    return LexError(positions_.At(tag), "{% raw %} has no {% endraw %}");
  }

  StatusOr<size_t> SkipComment(size_t tag, size_t at, bool* line_starting) {
    const size_t close = s_.find("#}", at);
    if (close == std::string_view::npos) {
      return LexError(positions_.At(tag), "a comment {# has no closing #}");
    }
    const char sign =
        close > at && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : '\0';
    return SkipAfter(close + 2, sign, true, line_starting);
  }

  StatusOr<size_t> LexTag(size_t tag, size_t at, bool block, bool* line_starting) {
    tokens_.push_back(Token{block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", 0, 0,
                            positions_.At(tag)});
    std::vector<char> brackets;
    size_t i = at;
    while (true) {
      if (brackets.empty()) {
        // The closing delimiter, with its sign.
        const std::string_view close = block ? "%}" : "}}";
        char sign = '\0';
        size_t j = i;
        if (j < s_.size() && (s_[j] == '-' || (block && s_[j] == '+'))) sign = s_[j++];
        if (s_.substr(j, 2) == close) {
          tokens_.push_back(Token{block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", 0, 0,
                                  positions_.At(i)});
          return SkipAfter(j + 2, sign, block, line_starting);
        }
      }
      if (i >= s_.size()) {
        return LexError(positions_.At(tag), std::string("the tag ") + (block ? "{%" : "{{") +
                                                " is never closed with " + (block ? "%}" : "}}"));
      }
      if (const size_t space = SpaceRun(s_, i); space > 0) {
        i += space;
        continue;
      }
      const SourcePos pos = positions_.At(i);
      Token token;
      token.pos = pos;
      std::string digits;
      int base = 10;
      if (const size_t n = MatchFloat(s_, i); n > 0) {
        std::string text;
        for (char c : s_.substr(i, n)) {
          if (c != '_') text.push_back(c);
        }
        token.kind = TokenKind::kFloat;
        token.number = std::strtod(text.c_str(), nullptr);
        token.text = text;
        i += n;
      } else if (const size_t m = MatchInteger(s_, i, &digits, &base); m > 0) {
        token.kind = TokenKind::kInteger;
        token.text = std::string(s_.substr(i, m));
        errno = 0;
        const unsigned long long value = std::strtoull(digits.c_str(), nullptr, base);
        if (errno != 0 || value > static_cast<unsigned long long>(INT64_MAX)) {
          return LexError(pos, "the integer " + token.text + " is larger than 2^63 - 1");
        }
        token.integer = static_cast<int64_t>(value);
        i += m;
      } else if (IsNameStart(s_[i])) {
        size_t j = i;
        while (j < s_.size() && IsNameChar(s_[j])) ++j;
        token.kind = TokenKind::kName;
        token.text = std::string(s_.substr(i, j - i));
        i = j;
      } else if (s_[i] == '\'' || s_[i] == '"') {
        const char quote = s_[i];
        size_t j = i + 1;
        while (j < s_.size() && s_[j] != quote) j += s_[j] == '\\' ? 2 : 1;
        if (j >= s_.size()) return LexError(pos, "a string is never closed");
        token.kind = TokenKind::kString;
        HOIST_RETURN_IF_ERROR(DecodeString(s_.substr(i + 1, j - i - 1), pos, &token.text));
        i = j + 1;
      } else {
        const auto op = std::find_if(kOperators.begin(), kOperators.end(), [&](std::string_view o) {
          return s_.substr(i, o.size()) == o;
        });
        if (op == kOperators.end()) {
          size_t next = i;
          NextCodePoint(s_, &next);
          return LexError(pos,
                          "unexpected character '" + std::string(s_.substr(i, next - i)) + "'");
        }
        token.kind = TokenKind::kOperator;
        token.text = std::string(*op);
        i += op->size();
        const char c = token.text[0];
        if (token.text.size() == 1 && (c == '(' || c == '[' || c == '{')) {
          brackets.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
        } else if (token.text.size() == 1 && (c == ')' || c == ']' || c == '}')) {
          if (brackets.empty()) return LexError(pos, std::string("unexpected '") + c + "'");
          if (brackets.back() != c) {
            return LexError(
                pos, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
          }
          brackets.pop_back();
        }
      }
      tokens_.push_back(std::move(token));
    }
  }

  std::string_view s_;
  Positions positions_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string Where(SourcePos pos) {
  return "line " + std::to_string(pos.line) + ":" + std::to_string(pos.column);
}

std::string NormalizeTemplateSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

StatusOr<std::vector<Token>> Tokenize(std::string_view source) { return Lexer(source).Run(); }

std::string_view RStripPythonSpace(std::string_view s) {
  size_t keep = 0;
  for (size_t at = 0; at < s.size();) {
    if (!IsPythonSpace(NextCodePoint(s, &at))) keep = at;
  }
  return s.substr(0, keep);
}

std::string_view LStripPythonSpace(std::string_view s) { return s.substr(SpaceRun(s, 0)); }

}  // namespace hoist::runtime::jinja
