// The values a chat template computes with, and the Python behaviour of each that Jinja shows a
// template: how a value prints (str and repr), how it is written as JSON (json.dumps, as
// transformers' tojson calls it), its truth, equality and order. Strings are UTF-8 and are
// indexed, sliced and measured in code points, as Python's str is.
//
// Lists and mappings are immutable once built and shared between the values that hold them, as
// the sandbox transformers renders with forbids changing them; a namespace is the one mutable
// value. Values are not thread-safe to share while a namespace in them is being assigned; a
// render owns all the values it makes.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace hoist::runtime::jinja {

// How deeply lists, mappings and namespaces may nest, in input and in what a template builds;
// every function that walks a value recursively stops there, so no value can exhaust the stack.
inline constexpr int kMaxValueDepth = 128;

class Value;
struct Macro;
struct LoopInfo;

struct List {
  std::vector<Value> items;
  bool tuple = false;  // a tuple prints as (a, b); otherwise it behaves as a list
  // What Jinja's select, map, items, reverse, unique ... return: a generator, which iterates as
  // the items do but is always true, has no length, no index, and prints as a generator. Unlike
  // a generator, it can be iterated more than once.
  bool iterator = false;
  int depth = 1;
  bool holds_namespace = false;  // some item is, or holds, a namespace
};

// A mapping with string keys, in insertion order (as Python's dict and a JSON object are).
struct Map {
  std::vector<std::pair<std::string, Value>> entries;
  int depth = 1;
  bool holds_namespace = false;  // some value is, or holds, a namespace
  // The value under `key`, or null.
  const Value* Find(std::string_view key) const;
};

// Jinja's namespace(): attributes a template may assign from inside loops.
struct Namespace {
  Map attrs;
  void Set(const std::string& name, Value value);
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kMap,
    kNamespace,
    kMacro,
    kLoop,
  };

  Value() = default;  // undefined, with no name
  // An undefined value; `name` says what was looked up, for errors ("'x' is undefined").
  static Value Undefined(std::string name);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(std::vector<Value> items, bool tuple = false, bool iterator = false);
  static Value MakeIterator(std::vector<Value> items) {
    return MakeList(std::move(items), false, true);
  }
  static Value MakeMap(std::vector<std::pair<std::string, Value>> entries);
  static Value MakeNamespace(Map attrs);
  static Value MakeMacro(const Macro* macro);
  static Value MakeLoop(std::shared_ptr<const LoopInfo> loop);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  // A list or tuple proper (not a generator).
  bool is_sequence() const { return kind_ == Kind::kList && !as_list().iterator; }
  bool is_map() const { return kind_ == Kind::kMap; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }

  bool as_bool() const { return std::get<bool>(data_); }
  // The integer of an int or a bool.
  int64_t as_int() const {
    return kind_ == Kind::kBool ? (std::get<bool>(data_) ? 1 : 0) : std::get<int64_t>(data_);
  }
  double as_float() const { return std::get<double>(data_); }
  // The number as a double (int, float or bool).
  double as_double() const {
    return kind_ == Kind::kFloat ? as_float() : static_cast<double>(as_int());
  }
  const std::string& as_string() const { return *std::get<StringPtr>(data_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Map& as_map() const { return *std::get<std::shared_ptr<const Map>>(data_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const Macro& as_macro() const { return *std::get<const Macro*>(data_); }
  const LoopInfo& as_loop() const { return *std::get<std::shared_ptr<const LoopInfo>>(data_); }
  // What an undefined value stood for ("" when unknown).
  const std::string& undefined_name() const;
  // The same namespace object (Python's `is`).
  bool SameNamespace(const Value& other) const;

  // How deeply containers nest in this value: 0 for a scalar, 1 for a namespace (which cannot
  // hold another, so what it holds later adds at most kMaxValueDepth).
  int depth() const;
  // Whether this value is, or holds, a namespace; a namespace may not be given one, which keeps
  // namespaces from forming cycles or unbounded chains.
  bool HoldsNamespace() const;
  // Python's truth: false for undefined, none, false, 0, 0.0, "" and empty containers.
  bool Truthy() const;

 private:
  using StringPtr = std::shared_ptr<const std::string>;
  Kind kind_ = Kind::kUndefined;
  std::variant<std::monostate, bool, int64_t, double, StringPtr, std::shared_ptr<const List>,
               std::shared_ptr<const Map>, std::shared_ptr<Namespace>, const Macro*,
               std::shared_ptr<const LoopInfo>>
      data_;
};

// The state of the innermost for loop, as `loop` shows it.
struct LoopInfo {
  int64_t index0 = 0;
  int64_t length = 0;
  int depth0 = 0;
  Value previous;  // undefined on the first iteration
  Value next;      // undefined on the last
};

// The value of a JSON document; objects keep their order. Fails past kMaxValueDepth.
StatusOr<Value> FromJson(const nlohmann::json& json);
StatusOr<Value> FromJson(const nlohmann::ordered_json& json);

// Python's type name of the value, for errors ("str", "list", "dict", "NoneType", ...).
std::string TypeName(const Value& value);

// Appends Python's str(value) (what {{ value }} prints): undefined prints nothing, none
// "None", booleans "True"/"False", floats as repr, containers as repr.
Status AppendStr(const Value& value, std::string* out);
// Appends Python's repr(value): strings quoted and escaped as Python quotes them.
Status AppendRepr(const Value& value, std::string* out);
StatusOr<std::string> Str(const Value& value);

// json.dumps options, as tojson(indent=..., separators=..., ensure_ascii=..., sort_keys=...).
struct JsonStyle {
  int indent = -1;  // -1: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
// Appends json.dumps(value) in `style`. Undefined, namespaces, macros and loops are errors, as
// they are not JSON.
Status AppendJson(const Value& value, const JsonStyle& style, std::string* out);

// Python's repr of a float: the shortest text that reads back as the same double ("0.1",
// "1e-05", "1e+16", "2.0", "inf").
std::string FloatRepr(double f);

// Python's ==: numbers by value (1 == 1.0 == true), containers element by element (mappings
// regardless of order), undefined equal only to undefined.
bool Equals(const Value& a, const Value& b);
// Python's ordering of a and b (-1, 0, 1) for <, <=, >, >=: numbers, strings (by code point) and
// lists of comparable items; anything else is the error Python raises.
StatusOr<int> Compare(const Value& a, const Value& b);

// UTF-8 helpers over code points (all strings in a render are valid UTF-8).
// The byte offset of every code point of `s`, and s.size() at the end.
std::vector<size_t> CodePointOffsets(std::string_view s);
size_t CodePointCount(std::string_view s);
// Decodes the code point at s[*at] and advances *at past it.
uint32_t NextCodePoint(std::string_view s, size_t* at);
void AppendUtf8(uint32_t code_point, std::string* out);
// Python's str.isspace() for one code point.
bool IsPythonSpace(uint32_t code_point);

}  // namespace hoist::runtime::jinja
