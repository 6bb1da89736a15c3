#include "runtime/interchange/pretokenizer.h"

#include <array>

#include "runtime/interchange/unicode_text.h"

namespace hoist::runtime {
namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A matcher over decoded code points: Match(i) is the length, in code points, of the match that
// the pattern's regex finds starting at i. Every code point is a letter, a number, a space or
// "other", and each of those starts some alternative, so a match always starts where the last one
// ended and never has length 0: the Isolated split has no gaps between matches.
class Matcher {
 public:
  explicit Matcher(const std::vector<CodePoint>& cps) : cps_(cps), n_(cps.size()) {}

  size_t MatchGpt2(size_t i) const {
    if (size_t m = Contraction(i, /*fold_case=*/false)) return m;
    if (size_t m = OptionalSpaceThenRun(i, kLetter)) return m;
    if (size_t m = OptionalSpaceThenRun(i, kNumber)) return m;
    if (size_t m = OptionalSpaceThenRun(i, kOther)) return m;
    return Whitespace(i);
  }

  size_t MatchLlama3(size_t i) const {
    if (size_t m = Contraction(i, /*fold_case=*/true)) return m;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (i + 1 < n_ && !Has(i, kLineBreak | kLetter | kNumber) && Has(i + 1, kLetter)) {
      return RunEnd(i + 1, kLetter) - i;
    }
    if (Has(i, kLetter)) return RunEnd(i, kLetter) - i;
    // \p{N}{1,3}
    if (Has(i, kNumber)) {
      size_t e = i + 1;
      while (e < n_ && e < i + 3 && Has(e, kNumber)) ++e;
      return e - i;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t start = i;
    if (Is(i, ' ') && IsOther(i + 1)) start = i + 1;
    if (IsOther(start)) {
      size_t e = RunEnd(start, kOther);
      while (e < n_ && Has(e, kLineBreak)) ++e;
      return e - i;
    }
    // \s*[\r\n]+ : ends after the last line break of the whitespace run, if it has one.
    if (Has(i, kSpace)) {
      const size_t e = RunEnd(i, kSpace);
      for (size_t k = e; k > i; --k) {
        if (Has(k - 1, kLineBreak)) return k - i;
      }
    }
    return Whitespace(i);
  }

 private:
  // A class of its own for [^\s\p{L}\p{N}]; never set on a code point.
  static constexpr uint8_t kOther = 0x80;

  bool Has(size_t i, uint8_t classes) const { return i < n_ && (cps_[i].classes & classes); }
  bool IsOther(size_t i) const {
    return i < n_ && !(cps_[i].classes & (kSpace | kLetter | kNumber));
  }
  bool Is(size_t i, uint32_t c) const { return i < n_ && cps_[i].value == c; }
  bool InClass(size_t i, uint8_t cls) const { return cls == kOther ? IsOther(i) : Has(i, cls); }
  size_t RunEnd(size_t i, uint8_t cls) const {
    while (i < n_ && InClass(i, cls)) ++i;
    return i;
  }

  // The contraction's letter at i, lower-cased when folding case as Oniguruma's (?i) does for
  // the letters these contractions use (U+017F LONG S folds to s).
  uint32_t Letter(size_t i, bool fold_case) const {
    if (i >= n_) return 0;
    uint32_t c = cps_[i].value;
    if (!fold_case) return c;
    if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
    if (c == 0x17F) return 's';
    return c;
  }

  // 's|'t|'re|'ve|'m|'ll|'d
  size_t Contraction(size_t i, bool fold_case) const {
    if (!Is(i, '\'')) return 0;
    const uint32_t a = Letter(i + 1, fold_case);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    const uint32_t b = Letter(i + 2, fold_case);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }

  // ' ?X+' for the class X.
  size_t OptionalSpaceThenRun(size_t i, uint8_t cls) const {
    if (Is(i, ' ') && InClass(i + 1, cls)) return RunEnd(i + 1, cls) - i;
    if (InClass(i, cls)) return RunEnd(i, cls) - i;
    return 0;
  }

  // \s+(?!\S)|\s+ : a whitespace run, less its last character when a non-space follows and the
  // run is longer than one (that character then leads the next piece).
  size_t Whitespace(size_t i) const {
    const size_t e = RunEnd(i, kSpace);
    if (e == i) return 1;  // unreachable: every code point starts an alternative
    if (e < n_ && e - i >= 2) return e - 1 - i;
    return e - i;
  }

  const std::vector<CodePoint>& cps_;
  const size_t n_;
};

}  // namespace

std::optional<SplitPattern> SplitPatternFromRegex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  return std::nullopt;
}

std::string_view SplitPatternRegex(SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? kGpt2Regex : kLlama3Regex;
}

void SplitByPattern(SplitPattern pattern, std::string_view text, std::vector<TextPiece>* out) {
  thread_local std::vector<CodePoint> cps;
  DecodeUtf8(text, &cps);
  const Matcher matcher(cps);
  for (size_t i = 0; i < cps.size();) {
    const size_t m = pattern == SplitPattern::kGpt2 ? matcher.MatchGpt2(i) : matcher.MatchLlama3(i);
    const size_t end = i + m;
    out->push_back(TextPiece{cps[i].offset, end < cps.size() ? cps[end].offset : text.size()});
    i = end;
  }
}

namespace {

struct ByteAlphabet {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // indexed by character, up to U+0143
  std::array<std::string, 256> utf8;
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet alphabet = [] {
    ByteAlphabet a;
    a.to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      a.to_char[b] = printable ? static_cast<uint32_t>(b) : next++;
      a.to_byte[a.to_char[b]] = static_cast<int16_t>(b);
      const uint32_t c = a.to_char[b];
      if (c < 0x80) {
        a.utf8[b] = std::string(1, static_cast<char>(c));
      } else {
        a.utf8[b] = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
      }
    }
    return a;
  }();
  return alphabet;
}

}  // namespace

uint32_t ByteToChar(uint8_t byte) { return Alphabet().to_char[byte]; }

std::optional<uint8_t> CharToByte(uint32_t c) {
  const ByteAlphabet& a = Alphabet();
  if (c >= a.to_byte.size() || a.to_byte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(a.to_byte[c]);
}

void AppendByteAlphabet(std::string_view bytes, std::string* out) {
  const ByteAlphabet& a = Alphabet();
  for (unsigned char b : bytes) *out += a.utf8[b];
}

}  // namespace hoist::runtime
