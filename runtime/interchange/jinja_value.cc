#include "runtime/interchange/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/interchange/jinja_ast.h"

namespace hoist::runtime::jinja {
namespace {

Status TooDeep() {
  return ResourceExhaustedError("a value nests more than " + std::to_string(kMaxValueDepth) +
                                " lists, mappings or namespaces deep");
}

int ChildDepth(const Value& v) { return v.depth(); }

// Python's str.isprintable() for a code point above ASCII, as far as it matters for repr: the
// control, format, separator and private-use characters that repr escapes. Unassigned code
// points, which Python also escapes, print as they are.
bool IsPrintableNonAscii(uint32_t c) {
  if (c < 0xa0 || c == 0xa0 || c == 0xad) return false;
  if (IsPythonSpace(c) || c == 0x2028 || c == 0x2029) return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x180e) {
    return false;
  }
  if ((c >= 0x200b && c <= 0x200f) || (c >= 0x202a && c <= 0x202e)) return false;
  if ((c >= 0x2060 && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f)) return false;
  if (c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb)) return false;
  if ((c >= 0xe000 && c <= 0xf8ff) || c >= 0xf0000) return false;
  if (c == 0xe0001 || (c >= 0xe0020 && c <= 0xe007f)) return false;
  return true;
}

void AppendHex(uint32_t value, int digits, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4)
    out->push_back(kHex[(value >> shift) & 0xf]);
}

void AppendStringRepr(std::string_view s, std::string* out) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out->push_back(quote);
  for (size_t at = 0; at < s.size();) {
    const size_t start = at;
    const uint32_t c = NextCodePoint(s, &at);
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c < 0x20 || c == 0x7f) {
      out->append("\\x");
      AppendHex(c, 2, out);
    } else if (c < 0x7f || IsPrintableNonAscii(c)) {
      out->append(s.substr(start, at - start));
    } else if (c < 0x100) {
      out->append("\\x");
      AppendHex(c, 2, out);
    } else if (c < 0x10000) {
      out->append("\\u");
      AppendHex(c, 4, out);
    } else {
      out->append("\\U");
      AppendHex(c, 8, out);
    }
  }
  out->push_back(quote);
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t at = 0; at < s.size();) {
    const size_t start = at;
    const uint32_t c = NextCodePoint(s, &at);
    switch (c) {
      case '"': out->append("\\\""); continue;
      case '\\': out->append("\\\\"); continue;
      case '\n': out->append("\\n"); continue;
      case '\r': out->append("\\r"); continue;
      case '\t': out->append("\\t"); continue;
      case '\b': out->append("\\b"); continue;
      case '\f': out->append("\\f"); continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c >= 0x10000) {
        const uint32_t v = c - 0x10000;
        out->append("\\u");
        AppendHex(0xd800 + (v >> 10), 4, out);
        out->append("\\u");
        AppendHex(0xdc00 + (v & 0x3ff), 4, out);
      } else {
        out->append("\\u");
        AppendHex(c, 4, out);
      }
    } else {
      out->append(s.substr(start, at - start));
    }
  }
  out->push_back('"');
}

Status AppendReprAt(const Value& value, int depth, std::string* out);

Status AppendItemsRepr(const List& list, int depth, std::string* out) {
  if (list.iterator) {
    out->append("<generator object>");
    return Status::Ok();
  }
  out->push_back(list.tuple ? '(' : '[');
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i > 0) out->append(", ");
    HOIST_RETURN_IF_ERROR(AppendReprAt(list.items[i], depth + 1, out));
  }
  if (list.tuple && list.items.size() == 1) out->push_back(',');
  out->push_back(list.tuple ? ')' : ']');
  return Status::Ok();
}

Status AppendMapRepr(const Map& map, int depth, std::string* out) {
  out->push_back('{');
  for (size_t i = 0; i < map.entries.size(); ++i) {
    if (i > 0) out->append(", ");
    AppendStringRepr(map.entries[i].first, out);
    out->append(": ");
    HOIST_RETURN_IF_ERROR(AppendReprAt(map.entries[i].second, depth + 1, out));
  }
  out->push_back('}');
  return Status::Ok();
}

Status AppendReprAt(const Value& value, int depth, std::string* out) {
  if (depth > 2 * kMaxValueDepth + 2) return TooDeep();
  switch (value.kind()) {
    case Value::Kind::kUndefined: out->append("Undefined"); return Status::Ok();
    case Value::Kind::kString: AppendStringRepr(value.as_string(), out); return Status::Ok();
    case Value::Kind::kList: return AppendItemsRepr(value.as_list(), depth, out);
    case Value::Kind::kMap: return AppendMapRepr(value.as_map(), depth, out);
    case Value::Kind::kNamespace:
      out->append("<Namespace ");
      HOIST_RETURN_IF_ERROR(AppendMapRepr(value.as_namespace().attrs, depth, out));
      out->append(">");
      return Status::Ok();
    default: return AppendStr(value, out);
  }
}

Status AppendJsonAt(const Value& value, const JsonStyle& style, int depth, std::string* out) {
  if (depth > 2 * kMaxValueDepth + 2) return TooDeep();
  auto newline = [&](int level) {
    if (style.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(style.indent) * level, ' ');
  };
  switch (value.kind()) {
    case Value::Kind::kNone: out->append("null"); return Status::Ok();
    case Value::Kind::kBool: out->append(value.as_bool() ? "true" : "false"); return Status::Ok();
    case Value::Kind::kInt: out->append(std::to_string(value.as_int())); return Status::Ok();
    case Value::Kind::kFloat: {
      const double f = value.as_float();
      if (std::isnan(f)) {
        out->append("NaN");
      } else if (std::isinf(f)) {
        out->append(f > 0 ? "Infinity" : "-Infinity");
      } else {
        out->append(FloatRepr(f));
      }
      return Status::Ok();
    }
    case Value::Kind::kString:
      AppendJsonString(value.as_string(), style.ensure_ascii, out);
      return Status::Ok();
    case Value::Kind::kList: {
      const List& list = value.as_list();
      if (list.iterator) {
        return InvalidArgumentError("Object of type generator is not JSON serializable");
      }
      if (list.items.empty()) {
        out->append("[]");
        return Status::Ok();
      }
      out->push_back('[');
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out->append(style.item_separator);
        newline(depth + 1);
        HOIST_RETURN_IF_ERROR(AppendJsonAt(list.items[i], style, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return Status::Ok();
    }
    case Value::Kind::kMap: {
      const Map& map = value.as_map();
      if (map.entries.empty()) {
        out->append("{}");
        return Status::Ok();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : map.entries) entries.push_back(&entry);
      if (style.sort_keys) {
        std::sort(entries.begin(), entries.end(),
                  [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out->append(style.item_separator);
        newline(depth + 1);
        AppendJsonString(entries[i]->first, style.ensure_ascii, out);
        out->append(style.key_separator);
        HOIST_RETURN_IF_ERROR(AppendJsonAt(entries[i]->second, style, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return Status::Ok();
    }
    default:
      return InvalidArgumentError("Object of type " + TypeName(value) +
                                  " is not JSON serializable");
  }
}

template <typename Json>
StatusOr<Value> FromJsonAt(const Json& json, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  switch (json.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value::Bool(json.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::Int(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = json.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        return InvalidArgumentError("the number " + std::to_string(u) +
                                    " is larger than a chat template can hold (2^63 - 1)");
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::Float(json.template get<double>());
    case nlohmann::json::value_t::string: return Value::String(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) {
        HOIST_ASSIGN_OR_RETURN(Value v, FromJsonAt(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::MakeList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> entries;
      entries.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        HOIST_ASSIGN_OR_RETURN(Value v, FromJsonAt(it.value(), depth + 1));
        entries.emplace_back(it.key(), std::move(v));
      }
      return Value::MakeMap(std::move(entries));
    }
    default: return InvalidArgumentError("binary JSON values have no place in a chat template");
  }
}

// Python's comparison of an int with a double, exactly.
int CompareIntDouble(int64_t i, double d) {
  if (std::isnan(d)) return 2;  // unordered
  if (d >= 9.3e18) return -1;
  if (d <= -9.3e18) return 1;
  const double floor = std::floor(d);
  const int64_t whole = static_cast<int64_t>(floor);
  if (i < whole) return -1;
  if (i > whole) return 1;
  return floor == d ? 0 : -1;
}

// -1, 0, 1, or 2 when unordered (nan).
int CompareNumbers(const Value& a, const Value& b) {
  const bool a_float = a.kind() == Value::Kind::kFloat;
  const bool b_float = b.kind() == Value::Kind::kFloat;
  if (!a_float && !b_float) {
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a_float && b_float) {
    const double x = a.as_float(), y = b.as_float();
    if (std::isnan(x) || std::isnan(y)) return 2;
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (!a_float) return CompareIntDouble(a.as_int(), b.as_float());
  const int r = CompareIntDouble(b.as_int(), a.as_float());
  return r == 2 ? 2 : -r;
}

bool EqualsAt(const Value& a, const Value& b, int depth) {
  if (depth > 2 * kMaxValueDepth + 2) return false;
  if (a.is_number() && b.is_number()) return CompareNumbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.iterator || y.iterator) return &x == &y;
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!EqualsAt(x.items[i], y.items[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kMap: {
      const Map& x = a.as_map();
      const Map& y = b.as_map();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const Value* other = y.Find(key);
        if (other == nullptr || !EqualsAt(value, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return a.SameNamespace(b);
    case Value::Kind::kMacro: return &a.as_macro() == &b.as_macro();
    case Value::Kind::kLoop: return &a.as_loop() == &b.as_loop();
    default: return false;
  }
}

StatusOr<int> CompareAt(const Value& a, const Value& b, int depth) {
  if (depth > 2 * kMaxValueDepth + 2) return TooDeep();
  if (a.is_number() && b.is_number()) {
    const int r = CompareNumbers(a, b);
    // nan orders as neither less nor greater; the caller's operator then yields false.
    return r == 2 ? 2 : r;
  }
  if (a.is_string() && b.is_string()) {
    const int r = a.as_string().compare(b.as_string());
    return r < 0 ? -1 : (r > 0 ? 1 : 0);
  }
  if (a.is_sequence() && b.is_sequence() && a.as_list().tuple == b.as_list().tuple) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.items.size() && i < y.items.size(); ++i) {
      if (EqualsAt(x.items[i], y.items[i], depth + 1)) continue;
      return CompareAt(x.items[i], y.items[i], depth + 1);
    }
    return x.items.size() < y.items.size() ? -1 : (x.items.size() > y.items.size() ? 1 : 0);
  }
  return InvalidArgumentError("cannot order a value of type '" + TypeName(a) +
                              "' and one of type '" + TypeName(b) + "'");
}

}  // namespace

const Value* Map::Find(std::string_view key) const {
  for (const auto& entry : entries) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void Namespace::Set(const std::string& name, Value value) {
  for (auto& entry : attrs.entries) {
    if (entry.first == name) {
      entry.second = std::move(value);
      return;
    }
  }
  attrs.entries.emplace_back(name, std::move(value));
}

Value Value::Undefined(std::string name) {
  Value v;
  v.data_ = std::make_shared<const std::string>(std::move(name));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.data_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::MakeList(std::vector<Value> items, bool tuple, bool iterator) {
  auto list = std::make_shared<List>();
  list->tuple = tuple;
  list->iterator = iterator;
  for (const Value& item : items) {
    list->depth = std::max(list->depth, 1 + ChildDepth(item));
    list->holds_namespace = list->holds_namespace || item.HoldsNamespace();
  }
  list->items = std::move(items);
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::shared_ptr<const List>(std::move(list));
  return v;
}
Value Value::MakeMap(std::vector<std::pair<std::string, Value>> entries) {
  auto map = std::make_shared<Map>();
  for (const auto& entry : entries) {
    map->depth = std::max(map->depth, 1 + ChildDepth(entry.second));
    map->holds_namespace = map->holds_namespace || entry.second.HoldsNamespace();
  }
  map->entries = std::move(entries);
  Value v;
  v.kind_ = Kind::kMap;
  v.data_ = std::shared_ptr<const Map>(std::move(map));
  return v;
}
Value Value::MakeNamespace(Map attrs) {
  auto ns = std::make_shared<Namespace>();
  ns->attrs = std::move(attrs);
  Value v;
  v.kind_ = Kind::kNamespace;
  v.data_ = std::move(ns);
  return v;
}
Value Value::MakeMacro(const Macro* macro) {
  Value v;
  v.kind_ = Kind::kMacro;
  v.data_ = macro;
  return v;
}
Value Value::MakeLoop(std::shared_ptr<const LoopInfo> loop) {
  Value v;
  v.kind_ = Kind::kLoop;
  v.data_ = std::move(loop);
  return v;
}

const std::string& Value::undefined_name() const {
  static const std::string kEmpty;
  const auto* name = std::get_if<StringPtr>(&data_);
  return name != nullptr && *name != nullptr ? **name : kEmpty;
}

bool Value::SameNamespace(const Value& other) const {
  return kind_ == Kind::kNamespace && other.kind_ == Kind::kNamespace &&
         std::get<std::shared_ptr<Namespace>>(data_) ==
             std::get<std::shared_ptr<Namespace>>(other.data_);
}

int Value::depth() const {
  switch (kind_) {
    case Kind::kList: return as_list().depth;
    case Kind::kMap: return as_map().depth;
    case Kind::kNamespace: return 1;
    default: return 0;
  }
}

bool Value::HoldsNamespace() const {
  switch (kind_) {
    case Kind::kList: return as_list().holds_namespace;
    case Kind::kMap: return as_map().holds_namespace;
    case Kind::kNamespace: return true;
    default: return false;
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return as_list().iterator || !as_list().items.empty();
    case Kind::kMap: return !as_map().entries.empty();
    default: return true;
  }
}

StatusOr<Value> FromJson(const nlohmann::json& json) { return FromJsonAt(json, 0); }
StatusOr<Value> FromJson(const nlohmann::ordered_json& json) { return FromJsonAt(json, 0); }

std::string TypeName(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList:
      if (value.as_list().iterator) return "generator";
      return value.as_list().tuple ? "tuple" : "list";
    case Value::Kind::kMap: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kMacro: return "Macro";
    case Value::Kind::kLoop: return "LoopContext";
  }
  return "object";
}

Status AppendStr(const Value& value, std::string* out) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return Status::Ok();
    case Value::Kind::kNone: out->append("None"); return Status::Ok();
    case Value::Kind::kBool: out->append(value.as_bool() ? "True" : "False"); return Status::Ok();
    case Value::Kind::kInt: out->append(std::to_string(value.as_int())); return Status::Ok();
    case Value::Kind::kFloat: out->append(FloatRepr(value.as_float())); return Status::Ok();
    case Value::Kind::kString: out->append(value.as_string()); return Status::Ok();
    case Value::Kind::kMacro:
      out->append("<Macro '" + value.as_macro().name + "'>");
      return Status::Ok();
    case Value::Kind::kLoop: {
      const LoopInfo& loop = value.as_loop();
      out->append("<LoopContext " + std::to_string(loop.index0 + 1) + "/" +
                  std::to_string(loop.length) + ">");
      return Status::Ok();
    }
    default: return AppendReprAt(value, 0, out);
  }
}

Status AppendRepr(const Value& value, std::string* out) { return AppendReprAt(value, 0, out); }

StatusOr<std::string> Str(const Value& value) {
  std::string out;
  HOIST_RETURN_IF_ERROR(AppendStr(value, &out));
  return out;
}

Status AppendJson(const Value& value, const JsonStyle& style, std::string* out) {
  return AppendJsonAt(value, style, 0, out);
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string_view text(buf, static_cast<size_t>(result.ptr - buf));
  std::string out;
  if (!text.empty() && text[0] == '-') {
    out.push_back('-');
    text.remove_prefix(1);
  }
  // text is "d[.ddd]e[+-]xx": the shortest digits and the exponent.
  const size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(text.data() + e + 1 + (text[e + 1] == '+' ? 1 : 0), text.data() + text.size(),
                  exponent);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int point = exponent + 1;  // digits are 0.d1d2... * 10^point
  const int n = static_cast<int>(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (point >= n) {
      out += digits + std::string(static_cast<size_t>(point - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(point)) + "." +
             digits.substr(static_cast<size_t>(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  const int shown = point - 1;
  out += shown < 0 ? "e-" : "e+";
  const std::string magnitude = std::to_string(shown < 0 ? -shown : shown);
  if (magnitude.size() < 2) out += "0";
  out += magnitude;
  return out;
}

bool Equals(const Value& a, const Value& b) { return EqualsAt(a, b, 0); }

StatusOr<int> Compare(const Value& a, const Value& b) { return CompareAt(a, b, 0); }

uint32_t NextCodePoint(std::string_view s, size_t* at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(*at);
  int length = 1;
  uint32_t c = lead;
  if (lead >= 0xf0 && lead < 0xf8) {
    length = 4;
    c = lead & 0x07;
  } else if (lead >= 0xe0) {
    length = 3;
    c = lead & 0x0f;
  } else if (lead >= 0xc0) {
    length = 2;
    c = lead & 0x1f;
  }
  if (length > 1) {
    if (*at + length > s.size()) {
      ++*at;
      return lead;
    }
    for (int k = 1; k < length; ++k) {
      const unsigned char next = byte(*at + k);
      if ((next & 0xc0) != 0x80) {
        ++*at;
        return lead;
      }
      c = (c << 6) | (next & 0x3f);
    }
  }
  *at += length;
  return c;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t at = 0; at < s.size();) {
    offsets.push_back(at);
    NextCodePoint(s, &at);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t CodePointCount(std::string_view s) {
  size_t count = 0;
  for (unsigned char c : s) count += (c & 0xc0) != 0x80;
  return count;
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

bool IsPythonSpace(uint32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

}  // namespace hoist::runtime::jinja
