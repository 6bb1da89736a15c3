#include "runtime/interchange/unicode_text.h"

#include <algorithm>
#include <array>

namespace hoist::runtime {
namespace {

struct CodePointRange {
  uint32_t first;
  uint32_t last;
};

#include "runtime/interchange/unicode_tables.inc"

bool InRanges(uint32_t c, const CodePointRange* begin, const CodePointRange* end) {
  // The first range that ends at or after c contains it, if any does.
  const CodePointRange* it = std::lower_bound(
      begin, end, c, [](const CodePointRange& r, uint32_t v) { return r.last < v; });
  return it != end && it->first <= c;
}

bool IsWhiteSpace(uint32_t c) {
  // The White_Space property, which Oniguruma's \s matches for Unicode text.
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return c >= 0x2000 && c <= 0x200A;
  }
}

uint8_t ComputeClasses(uint32_t c) {
  uint8_t classes = 0;
  if (c > 0x10FFFF) return 0;
  if (InRanges(c, std::begin(kLetterRanges), std::end(kLetterRanges))) classes |= kLetter;
  if (InRanges(c, std::begin(kNumberRanges), std::end(kNumberRanges))) classes |= kNumber;
  if (IsWhiteSpace(c)) classes |= kSpace;
  if (c == '\r' || c == '\n') classes |= kLineBreak;
  return classes;
}

// The first 0x800 code points (ASCII, Latin, Greek, Cyrillic, ...) by table.
const std::array<uint8_t, 0x800>& SmallTable() {
  static const std::array<uint8_t, 0x800> table = [] {
    std::array<uint8_t, 0x800> t{};
    for (uint32_t c = 0; c < t.size(); ++c) t[c] = ComputeClasses(c);
    return t;
  }();
  return table;
}

// The length of the well-formed UTF-8 sequence at the start of `s` (n bytes available), or 0.
int SequenceLength(const unsigned char* s, size_t n, uint32_t* value) {
  const unsigned char b0 = s[0];
  if (b0 < 0x80) {
    *value = b0;
    return 1;
  }
  int length = 0;
  uint32_t c = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (n < static_cast<size_t>(length)) return 0;
  for (int i = 1; i < length; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (s[i] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *value = c;
  return length;
}

}  // namespace

uint8_t UnicodeClasses(uint32_t c) {
  const auto& table = SmallTable();
  return c < table.size() ? table[c] : ComputeClasses(c);
}

void DecodeUtf8(std::string_view text, std::vector<CodePoint>* out) {
  out->clear();
  out->reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const auto& table = SmallTable();
  for (size_t i = 0; i < text.size();) {
    CodePoint cp;
    cp.offset = static_cast<uint32_t>(i);
    const int length = SequenceLength(s + i, text.size() - i, &cp.value);
    if (length == 0) {
      cp.value = 0x110000 + s[i];
      cp.bytes = 1;
      cp.classes = 0;
    } else {
      cp.bytes = static_cast<uint8_t>(length);
      cp.classes = cp.value < table.size() ? table[cp.value] : ComputeClasses(cp.value);
    }
    i += cp.bytes;
    out->push_back(cp);
  }
}

size_t CompleteUtf8Prefix(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  // Look back over at most three continuation bytes for the lead byte of the last sequence.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char b = s[n - back];
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte
    size_t length = 1;
    if ((b & 0xE0) == 0xC0) length = 2;
    if ((b & 0xF0) == 0xE0) length = 3;
    if ((b & 0xF8) == 0xF0) length = 4;
    return length > back ? n - back : n;
  }
  return n;
}

}  // namespace hoist::runtime
