// Python's str methods over UTF-8 text, as chat templates call them (.strip(), .split(), ...)
// and as Jinja's string filters use them. Whitespace is Unicode's (str.isspace()); case mapping
// covers ASCII letters only, other letters keep their case. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hoist::runtime::jinja {

std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
// str.title(): the first cased letter of each run upper, the rest lower.
std::string PyTitle(std::string_view s);
// str.capitalize(): the first character upper, the rest lower.
std::string PyCapitalize(std::string_view s);

// str.strip / lstrip / rstrip: of whitespace when `chars` is empty, else of those characters.
std::string_view PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                         bool right);

// str.split(sep, maxsplit) and str.rsplit: on runs of whitespace when `sep` is empty; a given
// separator may not be "" (Python's ValueError). maxsplit < 0: no limit.
StatusOr<std::vector<std::string>> PySplit(std::string_view s,
                                           const std::optional<std::string>& sep, int64_t maxsplit,
                                           bool from_right);
// str.splitlines(keepends).
std::vector<std::string> PySplitLines(std::string_view s, bool keepends);

// str.replace(old, new, count); count < 0: every occurrence.
std::string PyReplace(std::string_view s, std::string_view old, std::string_view replacement,
                      int64_t count);
// str.find / str.rfind: the code point index of `sub`, or -1.
int64_t PyFind(std::string_view s, std::string_view sub, bool from_right);
// str.count(sub): non-overlapping occurrences.
int64_t PyCount(std::string_view s, std::string_view sub);

}  // namespace hoist::runtime::jinja
