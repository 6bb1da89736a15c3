// Jinja's filters and tests (declared in runtime/interchange/jinja_builtins.h), each as Jinja 3
// defines it.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "runtime/interchange/jinja_builtins.h"
#include "runtime/interchange/jinja_lexer.h"
#include "runtime/interchange/jinja_text.h"

namespace hoist::runtime::jinja {
namespace {

const std::set<std::string_view>& Filters() {
  static const std::set<std::string_view> k = {
      "abs",     "capitalize", "count", "d",      "default", "dictsort",   "first",
      "float",   "indent",     "int",   "items",  "join",    "last",       "length",
      "list",    "lower",      "map",   "max",    "min",     "reject",     "rejectattr",
      "replace", "reverse",    "round", "safe",   "select",  "selectattr", "sort",
      "string",  "sum",        "title", "tojson", "trim",    "unique",     "upper"};
  return k;
}
const std::set<std::string_view>& Tests() {
  static const std::set<std::string_view> k = {
      "boolean", "callable",    "defined", "divisibleby", "eq",        "equalto",
      "==",      "even",        "false",   "float",       "ge",        ">=",
      "gt",      "greaterthan", ">",       "in",          "integer",   "iterable",
      "le",      "<=",          "lower",   "lt",          "lessthan",  "<",
      "mapping", "ne",          "!=",      "none",        "number",    "odd",
      "sameas",  "sequence",    "string",  "true",        "undefined", "upper"};
  return k;
}

StatusOr<std::string> Soft(const Value& v) { return Str(v); }

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
StatusOr<Value> LookupPath(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return GetItem(item, attribute);
  Value current = item;
  const std::string& path = attribute.as_string();
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot == std::string::npos ? dot : dot - begin);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    HOIST_ASSIGN_OR_RETURN(current, GetItem(current, digits ? Value::Int(std::atoll(part.c_str()))
                                                            : Value::String(part)));
    if (dot == std::string::npos) return current;
    begin = dot + 1;
  }
}

// The key a sort, min, max or unique compares by: the attribute, lowercased unless case matters.
StatusOr<Value> SortKey(const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = item;
  if (!attribute.is_undefined() && !attribute.is_none()) {
    HOIST_ASSIGN_OR_RETURN(key, LookupPath(item, attribute));
  }
  if (!case_sensitive && key.is_string()) return Value::String(PyLower(key.as_string()));
  return key;
}

StatusOr<std::vector<Value>> SortedByKey(std::vector<Value> items, const Value& attribute,
                                         bool case_sensitive, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (Value& item : items) {
    HOIST_ASSIGN_OR_RETURN(Value key, SortKey(item, attribute, case_sensitive));
    keyed.emplace_back(std::move(key), std::move(item));
  }
  Status failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    StatusOr<int> order = reverse ? Compare(b.first, a.first) : Compare(a.first, b.first);
    if (!order.ok()) {
      if (failure.ok()) failure = order.status();
      return false;
    }
    return *order == -1;
  });
  HOIST_RETURN_IF_ERROR(failure);
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& entry : keyed) out.push_back(std::move(entry.second));
  return out;
}

// Python's int(text) in base 10, or nothing.
std::optional<int64_t> ParsePythonInt(std::string_view text) {
  text = RStripPythonSpace(LStripPythonSpace(text));
  std::string digits;
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) digits.push_back(text[i++]);
  bool last_digit = false;
  for (; i < text.size(); ++i) {
    if (text[i] >= '0' && text[i] <= '9') {
      digits.push_back(text[i]);
      last_digit = true;
    } else if (text[i] == '_' && last_digit && i + 1 < text.size() && text[i + 1] >= '0' &&
               text[i + 1] <= '9') {
      last_digit = false;
    } else {
      return std::nullopt;
    }
  }
  if (!last_digit) return std::nullopt;
  errno = 0;
  const long long value = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno != 0) return std::nullopt;
  return value;
}

// Python's float(text), or nothing.
std::optional<double> ParsePythonFloat(std::string_view text) {
  text = RStripPythonSpace(LStripPythonSpace(text));
  std::string clean;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '_' && i > 0 && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
        i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
      continue;
    }
    if (c == 'x' || c == 'X' || c == 'p' || c == 'P') return std::nullopt;  // no hex floats
    clean.push_back(c);
  }
  if (clean.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return value;
}

StatusOr<Value> ToInt(const Value& value, const Value& fallback) {
  const Value otherwise = fallback.is_undefined() ? Value::Int(0) : fallback;
  switch (value.kind()) {
    case Value::Kind::kInt:
    case Value::Kind::kBool: return Value::Int(value.as_int());
    case Value::Kind::kFloat: {
      const double f = value.as_float();
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) {
        return InvalidArgumentError("cannot convert " + FloatRepr(f) + " to an integer");
      }
      return Value::Int(static_cast<int64_t>(f));
    }
    case Value::Kind::kString: {
      if (std::optional<int64_t> i = ParsePythonInt(value.as_string())) return Value::Int(*i);
      if (std::optional<double> f = ParsePythonFloat(value.as_string())) {
        return ToInt(Value::Float(*f), fallback);
      }
      return otherwise;
    }
    default: return otherwise;
  }
}

StatusOr<Value> ToFloat(const Value& value, const Value& fallback) {
  const Value otherwise = fallback.is_undefined() ? Value::Float(0.0) : fallback;
  if (value.is_number()) return Value::Float(value.as_double());
  if (value.is_string()) {
    if (std::optional<double> f = ParsePythonFloat(value.as_string())) return Value::Float(*f);
  }
  return otherwise;
}

// Python's round(x, digits) for a float: correctly rounded, ties to even.
double RoundHalfEven(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits >= 0 && digits <= 300) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), x);
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / scale) * scale;
}

StatusOr<Value> Round(const Value& value, const Value& precision_value, const Value& method_value) {
  const int64_t precision = precision_value.is_undefined() ? 0 : precision_value.as_int();
  const std::string method = method_value.is_string() ? method_value.as_string() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return InvalidArgumentError("round() method must be 'common', 'ceil' or 'floor'");
  }
  if (!value.is_number()) {
    return InvalidArgumentError("round() takes a number, not " + TypeName(value));
  }
  if (method == "common") {
    if (value.kind() != Value::Kind::kFloat) return Value::Int(value.as_int());
    return Value::Float(RoundHalfEven(value.as_float(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = value.as_double() * scale;
  return Value::Float((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

StatusOr<Value> ToJsonFilter(const Value& value, const CallArgs& args, CallContext& ctx) {
  HOIST_ASSIGN_OR_RETURN(
      std::vector<Value> a,
      BindArgs(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson"));
  JsonStyle style;
  style.ensure_ascii = a[0].Truthy();
  std::string indent_text;
  if (a[1].kind() == Value::Kind::kInt) {
    style.indent = static_cast<int>(std::clamp<int64_t>(a[1].as_int(), 0, 64));
  } else if (!a[1].is_undefined() && !a[1].is_none()) {
    return InvalidArgumentError("tojson(indent=...) takes an integer, not " + TypeName(a[1]));
  }
  if (style.indent >= 0) style.item_separator = ",";
  if (a[2].is_list() && a[2].as_list().items.size() == 2 && a[2].as_list().items[0].is_string() &&
      a[2].as_list().items[1].is_string()) {
    style.item_separator = a[2].as_list().items[0].as_string();
    style.key_separator = a[2].as_list().items[1].as_string();
  } else if (!a[2].is_undefined() && !a[2].is_none()) {
    return InvalidArgumentError("tojson(separators=...) takes two strings");
  }
  style.sort_keys = a[3].Truthy();
  std::string out;
  HOIST_RETURN_IF_ERROR(AppendJson(value, style, &out));
  HOIST_RETURN_IF_ERROR(ctx.Spend(out.size()));
  return Value::String(std::move(out));
}

StatusOr<Value> Indent(const Value& value, const CallArgs& args, CallContext& ctx) {
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> a,
                         BindArgs(args, {"width", "first", "blank"}, "indent"));
  std::string indention = "    ";
  if (a[0].is_string()) {
    indention = a[0].as_string();
  } else if (a[0].kind() == Value::Kind::kInt) {
    indention = std::string(static_cast<size_t>(std::clamp<int64_t>(a[0].as_int(), 0, 256)), ' ');
  }
  HOIST_ASSIGN_OR_RETURN(std::string s, Soft(value));
  s += "\n";  // Jinja's own quirk, so that splitlines keeps a last empty line
  std::vector<std::string> lines = PySplitLines(s, false);
  std::string out;
  if (a[2].Truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (a[1].Truthy()) out = indention + out;
  HOIST_RETURN_IF_ERROR(ctx.Spend(out.size()));
  return Value::String(std::move(out));
}

// select / reject / selectattr / rejectattr.
StatusOr<Value> SelectOrReject(const Value& value, const CallArgs& args, bool with_attribute,
                               bool keep_when, CallContext& ctx) {
  std::vector<Value> rest = args.positional;
  Value attribute;
  if (with_attribute) {
    if (rest.empty()) return InvalidArgumentError("missing the attribute name");
    attribute = rest.front();
    rest.erase(rest.begin());
  }
  std::string test;
  if (!rest.empty()) {
    if (!rest.front().is_string()) return InvalidArgumentError("the test name must be a string");
    test = rest.front().as_string();
    rest.erase(rest.begin());
  }
  CallArgs test_args{rest, args.keyword};
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::vector<Value> kept;
  for (const Value& item : items) {
    Value subject = item;
    if (with_attribute) {
      HOIST_ASSIGN_OR_RETURN(subject, LookupPath(item, attribute));
    }
    bool passes = subject.Truthy();
    if (!test.empty()) {
      HOIST_ASSIGN_OR_RETURN(passes, ApplyTest(test, subject, test_args, ctx));
    }
    if (passes == keep_when) kept.push_back(item);
  }
  return Value::MakeIterator(std::move(kept));
}

StatusOr<Value> MapFilter(const Value& value, const CallArgs& args, CallContext& ctx) {
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::vector<Value> out;
  out.reserve(items.size());
  const auto attribute = std::find_if(args.keyword.begin(), args.keyword.end(),
                                      [](const auto& kw) { return kw.first == "attribute"; });
  if (args.positional.empty() && attribute != args.keyword.end()) {
    Value fallback;
    for (const auto& [key, v] : args.keyword) {
      if (key == "default") {
        fallback = v;
      } else if (key != "attribute") {
        return InvalidArgumentError("map() has no parameter '" + key + "'");
      }
    }
    for (const Value& item : items) {
      HOIST_ASSIGN_OR_RETURN(Value v, LookupPath(item, attribute->second));
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::MakeIterator(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return InvalidArgumentError("map() takes a filter name or attribute=...");
  }
  const std::string filter = args.positional[0].as_string();
  if (!IsSupportedFilter(filter)) {
    return UnimplementedError("the filter '" + filter + "' is not supported");
  }
  CallArgs filter_args{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  for (const Value& item : items) {
    HOIST_ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, item, filter_args, ctx));
    out.push_back(std::move(v));
  }
  return Value::MakeIterator(std::move(out));
}

StatusOr<Value> MinMax(const Value& value, const CallArgs& args, bool max) {
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> a,
                         BindArgs(args, {"case_sensitive", "attribute"}, max ? "max" : "min"));
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  HOIST_ASSIGN_OR_RETURN(Value best_key, SortKey(items[0], a[1], a[0].Truthy()));
  for (size_t i = 1; i < items.size(); ++i) {
    HOIST_ASSIGN_OR_RETURN(Value key, SortKey(items[i], a[1], a[0].Truthy()));
    HOIST_ASSIGN_OR_RETURN(const int order, Compare(key, best_key));
    if (max ? order == 1 : order == -1) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

StatusOr<Value> Sum(const Value& value, const CallArgs& args) {
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"attribute", "start"}, "sum"));
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
  for (const Value& item : items) {
    Value v = item;
    if (!a[0].is_undefined() && !a[0].is_none()) {
      HOIST_ASSIGN_OR_RETURN(v, LookupPath(item, a[0]));
    }
    if (!total.is_number() || !v.is_number()) {
      return InvalidArgumentError("sum() adds numbers, not " + TypeName(v));
    }
    if (total.kind() == Value::Kind::kFloat || v.kind() == Value::Kind::kFloat) {
      total = Value::Float(total.as_double() + v.as_double());
    } else {
      int64_t r;
      if (__builtin_add_overflow(total.as_int(), v.as_int(), &r)) {
        return InvalidArgumentError("sum() overflows a 64-bit integer");
      }
      total = Value::Int(r);
    }
  }
  return total;
}

}  // namespace

bool IsSupportedFilter(std::string_view name) { return Filters().count(name) > 0; }
bool IsSupportedTest(std::string_view name) { return Tests().count(name) > 0; }

StatusOr<Value> ApplyFilter(std::string_view name, const Value& value, const CallArgs& args,
                            CallContext& ctx) {
  if (name == "trim") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"chars"}, name));
    HOIST_ASSIGN_OR_RETURN(std::string s, Soft(value));
    std::optional<std::string> chars;
    if (a[0].is_string()) chars = a[0].as_string();
    return Value::String(std::string(PyStrip(s, chars, true, true)));
  }
  if (name == "length" || name == "count") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    switch (value.kind()) {
      case Value::Kind::kUndefined: return Value::Int(0);
      case Value::Kind::kString:
        return Value::Int(static_cast<int64_t>(CodePointCount(value.as_string())));
      case Value::Kind::kList:
        if (value.as_list().iterator) break;
        return Value::Int(static_cast<int64_t>(value.as_list().items.size()));
      case Value::Kind::kMap:
        return Value::Int(static_cast<int64_t>(value.as_map().entries.size()));
      default: break;
    }
    return InvalidArgumentError("object of type '" + TypeName(value) + "' has no len()");
  }
  if (name == "tojson") return ToJsonFilter(value, args, ctx);
  if (name == "string" || name == "safe") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    if (name == "safe") return value;
    HOIST_ASSIGN_OR_RETURN(std::string s, Soft(value));
    HOIST_RETURN_IF_ERROR(ctx.Spend(s.size()));
    return Value::String(std::move(s));
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    HOIST_ASSIGN_OR_RETURN(std::string s, Soft(value));
    if (name == "lower") return Value::String(PyLower(s));
    if (name == "upper") return Value::String(PyUpper(s));
    if (name == "capitalize") return Value::String(PyCapitalize(s));
    // Jinja's title: words begin after a run of spaces, '-', '(', '{', '[' or '<'.
    std::string out;
    bool word_start = true;
    for (char c : s) {
      const bool separator = IsPythonSpace(static_cast<unsigned char>(c)) || c == '-' || c == '(' ||
                             c == '{' || c == '[' || c == '<';
      if (separator) {
        out.push_back(c);
        word_start = true;
      } else {
        out += word_start ? PyUpper(std::string(1, c)) : PyLower(std::string(1, c));
        word_start = false;
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "default" || name == "d") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a,
                           BindArgs(args, {"default_value", "boolean"}, name));
    const Value fallback = a[0].is_undefined() ? Value::String("") : a[0];
    if (value.is_undefined() || (a[1].Truthy() && !value.Truthy())) return fallback;
    return value;
  }
  if (name == "join") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"d", "attribute"}, name));
    HOIST_ASSIGN_OR_RETURN(std::string separator,
                           a[0].is_undefined() ? StatusOr<std::string>(std::string()) : Soft(a[0]));
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (!a[1].is_undefined() && !a[1].is_none()) {
        HOIST_ASSIGN_OR_RETURN(item, LookupPath(item, a[1]));
      }
      if (i > 0) out += separator;
      HOIST_RETURN_IF_ERROR(AppendStr(item, &out));
      HOIST_RETURN_IF_ERROR(ctx.Spend(separator.size() + 16));
    }
    HOIST_RETURN_IF_ERROR(ctx.Spend(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "first" || name == "last") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    if (name == "last" && value.is_list() && value.as_list().iterator) {
      return InvalidArgumentError("'generator' object is not reversible");
    }
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.empty()) {
      return Value::Undefined(std::string("No ") + (name == "first" ? "first" : "last") +
                              " item, sequence was empty.");
    }
    return name == "first" ? items.front() : items.back();
  }
  if (name == "items") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    if (value.is_undefined()) return Value::MakeIterator({});
    if (!value.is_map()) return InvalidArgumentError("Can only get item pairs from a mapping.");
    HOIST_ASSIGN_OR_RETURN(Value pairs, CallMethod(value, "items", {}, ctx));
    return Value::MakeIterator(pairs.as_list().items);
  }
  if (name == "dictsort") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a,
                           BindArgs(args, {"case_sensitive", "by", "reverse"}, name));
    if (!value.is_map()) return InvalidArgumentError("dictsort takes a mapping");
    HOIST_ASSIGN_OR_RETURN(Value pairs, CallMethod(value, "items", {}, ctx));
    const bool by_value = a[1].is_string() && a[1].as_string() == "value";
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> sorted,
                           SortedByKey(pairs.as_list().items, Value::Int(by_value ? 1 : 0),
                                       a[0].Truthy(), a[2].Truthy()));
    return Value::MakeList(std::move(sorted));
  }
  if (name == "list") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    return Value::MakeList(std::move(items));
  }
  if (name == "select" || name == "reject") {
    return SelectOrReject(value, args, false, name == "select", ctx);
  }
  if (name == "selectattr" || name == "rejectattr") {
    return SelectOrReject(value, args, true, name == "selectattr", ctx);
  }
  if (name == "map") return MapFilter(value, args, ctx);
  if (name == "replace") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"old", "new", "count"}, name));
    HOIST_ASSIGN_OR_RETURN(std::string s, Soft(value));
    HOIST_ASSIGN_OR_RETURN(std::string old, Soft(a[0]));
    HOIST_ASSIGN_OR_RETURN(std::string replacement, Soft(a[1]));
    const int64_t count = a[2].kind() == Value::Kind::kInt ? a[2].as_int() : -1;
    const size_t occurrences =
        old.empty() ? CodePointCount(s) + 1 : static_cast<size_t>(PyCount(s, old));
    HOIST_RETURN_IF_ERROR(ctx.Spend(s.size() + occurrences * replacement.size()));
    return Value::String(PyReplace(s, old, replacement, count));
  }
  if (name == "reverse") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    if (!value.is_string() && !value.is_sequence()) {
      return InvalidArgumentError("'" + TypeName(value) + "' object is not reversible");
    }
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::reverse(items.begin(), items.end());
    if (value.is_list()) return Value::MakeIterator(std::move(items));
    std::string out;
    for (const Value& item : items) out += item.as_string();
    return Value::String(std::move(out));
  }
  if (name == "round") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"precision", "method"}, name));
    if (!a[0].is_undefined() && a[0].kind() != Value::Kind::kInt) {
      return InvalidArgumentError("round() precision must be an integer");
    }
    return Round(value, a[0], a[1]);
  }
  if (name == "int") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"default", "base"}, name));
    if (!a[1].is_undefined() && !(a[1].kind() == Value::Kind::kInt && a[1].as_int() == 10)) {
      return UnimplementedError("int(base=...) other than 10 is not supported");
    }
    return ToInt(value, a[0]);
  }
  if (name == "float") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"default"}, name));
    return ToFloat(value, a[0]);
  }
  if (name == "abs") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    if (value.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(value.as_float()));
    if (value.is_number()) {
      if (value.as_int() == INT64_MIN) return InvalidArgumentError("abs() overflows");
      return Value::Int(std::llabs(value.as_int()));
    }
    return InvalidArgumentError("bad operand type for abs(): '" + TypeName(value) + "'");
  }
  if (name == "indent") return Indent(value, args, ctx);
  if (name == "unique") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a,
                           BindArgs(args, {"case_sensitive", "attribute"}, name));
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::vector<Value> seen, out;
    for (const Value& item : items) {
      HOIST_ASSIGN_OR_RETURN(Value key, SortKey(item, a[1], a[0].Truthy()));
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) {
        continue;
      }
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::MakeIterator(std::move(out));
  }
  if (name == "sort") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a,
                           BindArgs(args, {"reverse", "case_sensitive", "attribute"}, name));
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> sorted,
                           SortedByKey(std::move(items), a[2], a[1].Truthy(), a[0].Truthy()));
    return Value::MakeList(std::move(sorted));
  }
  if (name == "sum") return Sum(value, args);
  if (name == "min" || name == "max") return MinMax(value, args, name == "max");
  return UnimplementedError("the filter '" + std::string(name) + "' is not supported");
}

StatusOr<bool> ApplyTest(std::string_view name, const Value& value, const CallArgs& args,
                         CallContext& ctx) {
  (void)ctx;
  if (!IsSupportedTest(name)) {
    return UnimplementedError("the test '" + std::string(name) + "' is not supported");
  }
  using Kind = Value::Kind;
  const Kind kind = value.kind();
  if (name == "defined") return kind != Kind::kUndefined;
  if (name == "undefined") return kind == Kind::kUndefined;
  if (name == "none") return kind == Kind::kNone;
  if (name == "boolean") return kind == Kind::kBool;
  if (name == "true") return kind == Kind::kBool && value.as_bool();
  if (name == "false") return kind == Kind::kBool && !value.as_bool();
  if (name == "integer") return kind == Kind::kInt;
  if (name == "float") return kind == Kind::kFloat;
  if (name == "number") return value.is_number();
  if (name == "string") return kind == Kind::kString;
  if (name == "mapping") return kind == Kind::kMap;
  if (name == "callable") return kind == Kind::kMacro;
  if (name == "iterable") {
    return kind == Kind::kString || kind == Kind::kList || kind == Kind::kMap ||
           kind == Kind::kUndefined || kind == Kind::kLoop;
  }
  if (name == "sequence") {
    return kind == Kind::kString || value.is_sequence() || kind == Kind::kMap ||
           kind == Kind::kUndefined;
  }
  if (name == "lower" || name == "upper") {
    if (kind != Kind::kString) return false;
    const std::string& s = value.as_string();
    bool cased = false;
    for (char c : s) {
      if (c >= 'a' && c <= 'z') {
        if (name == "upper") return false;
        cased = true;
      } else if (c >= 'A' && c <= 'Z') {
        if (name == "lower") return false;
        cased = true;
      }
    }
    return cased;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    Value divisor = Value::Int(2);
    if (name == "divisibleby") {
      HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"num"}, name));
      divisor = a[0];
    }
    if (!value.is_number() || !divisor.is_number()) {
      return InvalidArgumentError("the test '" + std::string(name) + "' takes numbers");
    }
    if (value.kind() == Kind::kFloat || divisor.kind() == Kind::kFloat) {
      if (divisor.as_double() == 0) return InvalidArgumentError("float modulo by zero");
      const double r = std::fmod(value.as_double(), divisor.as_double());
      return name == "odd" ? r != 0 : r == 0;
    }
    if (divisor.as_int() == 0) return InvalidArgumentError("integer modulo by zero");
    const int64_t r = value.as_int() % divisor.as_int();
    return name == "odd" ? r != 0 : r == 0;
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"other"}, name));
  const Value& other = a[0];
  if (name == "in") return Contains(other, value);
  if (name == "eq" || name == "equalto" || name == "==") return Equals(value, other);
  if (name == "ne" || name == "!=") return !Equals(value, other);
  if (name == "sameas") {
    if (kind == Kind::kNamespace) return value.SameNamespace(other);
    return value.kind() == other.kind() && Equals(value, other);
  }
  HOIST_ASSIGN_OR_RETURN(const int order, Compare(value, other));
  if (order == 2) return false;  // nan
  if (name == "lt" || name == "lessthan" || name == "<") return order < 0;
  if (name == "le" || name == "<=") return order <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return order > 0;
  return order >= 0;  // ge, >=
}

}  // namespace hoist::runtime::jinja
