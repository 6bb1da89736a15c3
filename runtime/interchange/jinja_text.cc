#include "runtime/interchange/jinja_text.h"

#include <algorithm>
#include <climits>

#include "runtime/interchange/jinja_value.h"

namespace hoist::runtime::jinja {
namespace {

bool IsAsciiUpper(char c) { return c >= 'A' && c <= 'Z'; }
bool IsAsciiLower(char c) { return c >= 'a' && c <= 'z'; }
char ToUpper(char c) { return IsAsciiLower(c) ? static_cast<char>(c - 'a' + 'A') : c; }
char ToLower(char c) { return IsAsciiUpper(c) ? static_cast<char>(c - 'A' + 'a') : c; }

struct Cp {
  uint32_t value;
  size_t begin;
  size_t end;
};

std::vector<Cp> Decode(std::string_view s) {
  std::vector<Cp> cps;
  for (size_t at = 0; at < s.size();) {
    const size_t begin = at;
    const uint32_t c = NextCodePoint(s, &at);
    cps.push_back(Cp{c, begin, at});
  }
  return cps;
}

bool IsLineBreak(uint32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

}  // namespace

std::string PyUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ToUpper(c);
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ToLower(c);
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    if (IsAsciiLower(c) || IsAsciiUpper(c)) {
      c = previous_cased ? ToLower(c) : ToUpper(c);
      previous_cased = true;
    } else if (static_cast<unsigned char>(c) < 0x80 ||
               (static_cast<unsigned char>(c) & 0xc0) != 0x80) {
      previous_cased = false;
    }
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out = PyLower(s);
  if (!out.empty()) out[0] = ToUpper(out[0]);
  return out;
}

std::string_view PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                         bool right) {
  std::vector<uint32_t> set;
  if (chars) {
    for (const Cp& cp : Decode(*chars)) set.push_back(cp.value);
  }
  auto strips = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : IsPythonSpace(c);
  };
  const std::vector<Cp> cps = Decode(s);
  size_t first = 0;
  size_t last = cps.size();
  if (left) {
    while (first < last && strips(cps[first].value)) ++first;
  }
  if (right) {
    while (last > first && strips(cps[last - 1].value)) --last;
  }
  if (first == last) return s.substr(0, 0);
  return s.substr(cps[first].begin, cps[last - 1].end - cps[first].begin);
}

StatusOr<std::vector<std::string>> PySplit(std::string_view s,
                                           const std::optional<std::string>& sep, int64_t maxsplit,
                                           bool from_right) {
  int64_t budget = maxsplit < 0 ? INT64_MAX : maxsplit;
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) return InvalidArgumentError("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (budget-- > 0) {
        const size_t k = s.find(*sep, pos);
        if (k == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, k - pos));
        pos = k + sep->size();
      }
      parts.emplace_back(s.substr(pos));
      return parts;
    }
    size_t end = s.size();
    while (budget-- > 0 && end >= sep->size()) {
      const size_t k = s.rfind(*sep, end - sep->size());
      if (k == std::string_view::npos) break;
      parts.emplace_back(s.substr(k + sep->size(), end - k - sep->size()));
      end = k;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  const std::vector<Cp> cps = Decode(s);
  const size_t n = cps.size();
  auto span = [&](size_t i, size_t j) {  // code points [i, j)
    return std::string(s.substr(cps[i].begin, cps[j - 1].end - cps[i].begin));
  };
  if (!from_right) {
    size_t i = 0;
    while (budget-- > 0) {
      while (i < n && IsPythonSpace(cps[i].value)) ++i;
      if (i == n) break;
      const size_t j = i;
      while (i < n && !IsPythonSpace(cps[i].value)) ++i;
      parts.push_back(span(j, i));
    }
    while (i < n && IsPythonSpace(cps[i].value)) ++i;
    if (i < n) parts.push_back(span(i, n));
    return parts;
  }
  size_t i = n;  // one past the code point being looked at
  while (budget-- > 0) {
    while (i > 0 && IsPythonSpace(cps[i - 1].value)) --i;
    if (i == 0) break;
    const size_t j = i;
    while (i > 0 && !IsPythonSpace(cps[i - 1].value)) --i;
    parts.push_back(span(i, j));
  }
  while (i > 0 && IsPythonSpace(cps[i - 1].value)) --i;
  if (i > 0) parts.push_back(span(0, i));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> PySplitLines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  const std::vector<Cp> cps = Decode(s);
  size_t start = 0;  // byte offset of the line
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!IsLineBreak(cps[i].value)) continue;
    const size_t break_begin = cps[i].begin;
    if (cps[i].value == '\r' && i + 1 < cps.size() && cps[i + 1].value == '\n') ++i;
    const size_t end = cps[i].end;
    lines.emplace_back(s.substr(start, (keepends ? end : break_begin) - start));
    start = end;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string PyReplace(std::string_view s, std::string_view old, std::string_view replacement,
                      int64_t count) {
  int64_t budget = count < 0 ? INT64_MAX : count;
  std::string out;
  if (old.empty()) {
    const std::vector<Cp> cps = Decode(s);
    for (const Cp& cp : cps) {
      if (budget > 0) {
        out.append(replacement);
        --budget;
      }
      out.append(s.substr(cp.begin, cp.end - cp.begin));
    }
    if (budget > 0) out.append(replacement);
    return out;
  }
  size_t pos = 0;
  while (budget > 0) {
    const size_t k = s.find(old, pos);
    if (k == std::string_view::npos) break;
    out.append(s.substr(pos, k - pos));
    out.append(replacement);
    pos = k + old.size();
    --budget;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t PyFind(std::string_view s, std::string_view sub, bool from_right) {
  const size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<int64_t>(CodePointCount(s.substr(0, at)));
}

int64_t PyCount(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(CodePointCount(s)) + 1;
  int64_t count = 0;
  for (size_t k = s.find(sub); k != std::string_view::npos; k = s.find(sub, k + sub.size())) {
    ++count;
  }
  return count;
}

}  // namespace hoist::runtime::jinja
