// Attribute access, subscripts, iteration, methods and global functions; the filters and tests
// are in runtime/interchange/jinja_filters.cc.
#include "runtime/interchange/jinja_builtins.h"

#include <algorithm>
#include <optional>
#include <set>

#include "runtime/interchange/jinja_text.h"

namespace hoist::runtime::jinja {
namespace {

const std::set<std::string_view>& DictMethods() {
  static const std::set<std::string_view> k = {"clear",      "copy",   "fromkeys", "get",
                                               "items",      "keys",   "pop",      "popitem",
                                               "setdefault", "update", "values"};
  return k;
}
const std::set<std::string_view>& StrMethods() {
  static const std::set<std::string_view> k = {
      "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
      "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
      "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
      "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
      "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
      "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
      "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
      "swapcase",     "title",       "translate", "upper",      "zfill"};
  return k;
}
const std::set<std::string_view>& ListMethods() {
  static const std::set<std::string_view> k = {"append", "clear",   "copy",   "count",
                                               "extend", "index",   "insert", "pop",
                                               "remove", "reverse", "sort"};
  return k;
}
// The str methods this module implements.
const std::set<std::string_view>& ImplementedStrMethods() {
  static const std::set<std::string_view> k = {
      "strip",      "lstrip",   "rstrip", "split", "rsplit", "splitlines",
      "startswith", "endswith", "upper",  "lower", "title",  "capitalize",
      "replace",    "find",     "rfind",  "count", "join"};
  return k;
}

Status MethodAsValue(const Value& object, std::string_view name) {
  std::string message = "'";
  message.append(name).append("' is a method of ").append(TypeName(object));
  message.append("; hoist renders it only when it is called, as ").append(name).append("(...)");
  return UnimplementedError(std::move(message));
}

Value Missing(const Value& object, std::string_view name) {
  std::string message = "'";
  message.append(TypeName(object)).append(" object' has no attribute '").append(name).append("'");
  return Value::Undefined(std::move(message));
}

StatusOr<std::string> StringArg(const Value& v, std::string_view what) {
  if (!v.is_string()) {
    return InvalidArgumentError(std::string(what) + " must be a string, not " + TypeName(v));
  }
  return v.as_string();
}

// An optional string argument: none and undefined mean absent.
StatusOr<std::optional<std::string>> OptionalString(const Value& v, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  HOIST_ASSIGN_OR_RETURN(std::string s, StringArg(v, what));
  return std::optional<std::string>(std::move(s));
}

StatusOr<int64_t> IntArg(const Value& v, int64_t fallback, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
    return InvalidArgumentError(std::string(what) + " must be an integer, not " + TypeName(v));
  }
  return v.as_int();
}

// The code points [begin, end) of s, Python's indices (negative from the end, clamped).
std::string_view CodePointRange(std::string_view s, int64_t begin, int64_t end) {
  const std::vector<size_t> offsets = CodePointOffsets(s);
  const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  auto clamp = [n](int64_t i) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  begin = clamp(begin);
  end = clamp(end);
  if (end <= begin) return s.substr(0, 0);
  return s.substr(offsets[begin], offsets[end] - offsets[begin]);
}

StatusOr<Value> AffixTest(const std::string& s, std::string_view name, const CallArgs& args) {
  HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"prefix", "start", "end"}, name));
  HOIST_ASSIGN_OR_RETURN(const int64_t start, IntArg(a[1], 0, "the start"));
  HOIST_ASSIGN_OR_RETURN(const int64_t end, IntArg(a[2], INT64_MAX / 2, "the end"));
  const std::string_view within = CodePointRange(s, start, end);
  std::vector<std::string> affixes;
  if (a[0].is_string()) {
    affixes.push_back(a[0].as_string());
  } else if (a[0].is_list() && a[0].as_list().tuple) {
    for (const Value& item : a[0].as_list().items) {
      HOIST_ASSIGN_OR_RETURN(std::string affix, StringArg(item, "each item of the tuple"));
      affixes.push_back(std::move(affix));
    }
  } else {
    return InvalidArgumentError(std::string(name) + " takes a string or a tuple of strings, not " +
                                TypeName(a[0]));
  }
  const bool starts = name == "startswith";
  for (const std::string& affix : affixes) {
    if (affix.size() > within.size()) continue;
    if (starts ? within.substr(0, affix.size()) == affix
               : within.substr(within.size() - affix.size()) == affix) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

StatusOr<Value> StringMethod(const std::string& s, std::string_view name, const CallArgs& args,
                             CallContext& ctx) {
  auto strings = [](std::vector<std::string> parts) {
    std::vector<Value> items;
    items.reserve(parts.size());
    for (std::string& part : parts) items.push_back(Value::String(std::move(part)));
    return Value::MakeList(std::move(items));
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"chars"}, name));
    HOIST_ASSIGN_OR_RETURN(std::optional<std::string> chars, OptionalString(a[0], "chars"));
    return Value::String(std::string(PyStrip(s, chars, name != "rstrip", name != "lstrip")));
  }
  if (name == "split" || name == "rsplit") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"sep", "maxsplit"}, name));
    HOIST_ASSIGN_OR_RETURN(std::optional<std::string> sep, OptionalString(a[0], "sep"));
    HOIST_ASSIGN_OR_RETURN(const int64_t maxsplit, IntArg(a[1], -1, "maxsplit"));
    HOIST_ASSIGN_OR_RETURN(std::vector<std::string> parts,
                           PySplit(s, sep, maxsplit, name == "rsplit"));
    HOIST_RETURN_IF_ERROR(ctx.Spend(s.size() + parts.size() * sizeof(Value)));
    return strings(std::move(parts));
  }
  if (name == "splitlines") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"keepends"}, name));
    HOIST_RETURN_IF_ERROR(ctx.Spend(s.size()));
    return strings(PySplitLines(s, a[0].Truthy()));
  }
  if (name == "startswith" || name == "endswith") return AffixTest(s, name, args);
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    if (name == "upper") return Value::String(PyUpper(s));
    if (name == "lower") return Value::String(PyLower(s));
    if (name == "title") return Value::String(PyTitle(s));
    return Value::String(PyCapitalize(s));
  }
  if (name == "replace") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"old", "new", "count"}, name));
    HOIST_ASSIGN_OR_RETURN(std::string old, StringArg(a[0], "old"));
    HOIST_ASSIGN_OR_RETURN(std::string replacement, StringArg(a[1], "new"));
    HOIST_ASSIGN_OR_RETURN(const int64_t count, IntArg(a[2], -1, "count"));
    const size_t occurrences =
        old.empty() ? CodePointCount(s) + 1 : static_cast<size_t>(PyCount(s, old));
    HOIST_RETURN_IF_ERROR(ctx.Spend(s.size() + occurrences * replacement.size()));
    return Value::String(PyReplace(s, old, replacement, count));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"sub"}, name));
    HOIST_ASSIGN_OR_RETURN(std::string sub, StringArg(a[0], "sub"));
    if (name == "count") return Value::Int(PyCount(s, sub));
    return Value::Int(PyFind(s, sub, name == "rfind"));
  }
  if (name == "join") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"iterable"}, name));
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      HOIST_ASSIGN_OR_RETURN(std::string item, StringArg(items[i], "each item joined"));
      if (i > 0) out += s;
      out += item;
      HOIST_RETURN_IF_ERROR(ctx.Spend(item.size() + s.size()));
    }
    return Value::String(std::move(out));
  }
  return UnimplementedError("the str method '" + std::string(name) + "' is not supported");
}

StatusOr<Value> DictMethod(const Map& map, std::string_view name, const CallArgs& args,
                           CallContext& ctx) {
  if (name == "get") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"key", "default"}, name));
    if (a[0].is_string()) {
      if (const Value* found = map.Find(a[0].as_string())) return *found;
    }
    return a[1].is_undefined() ? Value::None() : a[1];
  }
  if (name == "items" || name == "keys" || name == "values") {
    HOIST_RETURN_IF_ERROR(BindArgs(args, {}, name).status());
    HOIST_RETURN_IF_ERROR(ctx.Spend(map.entries.size() * sizeof(Value)));
    std::vector<Value> items;
    items.reserve(map.entries.size());
    for (const auto& [key, value] : map.entries) {
      if (name == "keys") {
        items.push_back(Value::String(key));
      } else if (name == "values") {
        items.push_back(value);
      } else {
        items.push_back(Value::MakeList({Value::String(key), value}, /*tuple=*/true));
      }
    }
    return Value::MakeList(std::move(items));
  }
  return UnimplementedError("the dict method '" + std::string(name) +
                            "' is not supported (dicts are read-only in a chat template)");
}

bool IsIndex(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
}

}  // namespace

bool IsSupportedMethod(std::string_view name) {
  return ImplementedStrMethods().count(name) > 0 || name == "get" || name == "items" ||
         name == "keys" || name == "values" || name == "cycle";
}

bool IsSupportedFunction(std::string_view name) {
  return name == "raise_exception" || name == "strftime_now" || name == "namespace" ||
         name == "range" || name == "dict";
}

Status UndefinedError(const Value& undefined) {
  const std::string& what = undefined.undefined_name();
  return InvalidArgumentError(what.empty() ? "a value is undefined" : what);
}

StatusOr<std::vector<Value>> BindArgs(const CallArgs& args,
                                      std::initializer_list<std::string_view> names,
                                      std::string_view callee) {
  std::vector<Value> slots(names.size());
  std::vector<bool> bound(names.size(), false);
  if (args.positional.size() > names.size()) {
    return InvalidArgumentError(std::string(callee) + "() takes at most " +
                                std::to_string(names.size()) + " arguments, got " +
                                std::to_string(args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    slots[i] = args.positional[i];
    bound[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return InvalidArgumentError(std::string(callee) + "() has no parameter '" + key + "'");
    }
    const size_t i = static_cast<size_t>(it - names.begin());
    if (bound[i]) {
      return InvalidArgumentError(std::string(callee) + "() got '" + key + "' twice");
    }
    slots[i] = value;
    bound[i] = true;
  }
  return slots;
}

StatusOr<Value> GetAttribute(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined: return UndefinedError(object);
    case Value::Kind::kMap: {
      if (DictMethods().count(name) > 0) return MethodAsValue(object, name);
      const Value* found = object.as_map().Find(name);
      return found != nullptr ? *found : Missing(object, name);
    }
    case Value::Kind::kNamespace: {
      const Value* found = object.as_namespace().attrs.Find(name);
      return found != nullptr ? *found : Missing(object, name);
    }
    case Value::Kind::kLoop: {
      const LoopInfo& loop = object.as_loop();
      if (name == "index0") return Value::Int(loop.index0);
      if (name == "index") return Value::Int(loop.index0 + 1);
      if (name == "revindex0") return Value::Int(loop.length - loop.index0 - 1);
      if (name == "revindex") return Value::Int(loop.length - loop.index0);
      if (name == "first") return Value::Bool(loop.index0 == 0);
      if (name == "last") return Value::Bool(loop.index0 + 1 == loop.length);
      if (name == "length") return Value::Int(loop.length);
      if (name == "depth0") return Value::Int(loop.depth0);
      if (name == "depth") return Value::Int(loop.depth0 + 1);
      if (name == "previtem") return loop.previous;
      if (name == "nextitem") return loop.next;
      if (name == "cycle" || name == "changed") return MethodAsValue(object, name);
      return Missing(object, name);
    }
    case Value::Kind::kString:
      if (StrMethods().count(name) > 0) return MethodAsValue(object, name);
      return Missing(object, name);
    case Value::Kind::kList:
      if (ListMethods().count(name) > 0) return MethodAsValue(object, name);
      return Missing(object, name);
    default: return Missing(object, name);
  }
}

StatusOr<Value> GetItem(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined: return UndefinedError(object);
    case Value::Kind::kMap:
      if (key.is_string()) {
        if (const Value* found = object.as_map().Find(key.as_string())) return *found;
        return GetAttribute(object, key.as_string());
      }
      return Value::Undefined("'dict object' has no item of type " + TypeName(key));
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (key.is_string()) return GetAttribute(object, key.as_string());
      if (object.is_list() && object.as_list().iterator) return Missing(object, "[]");
      if (!IsIndex(key)) return Missing(object, "[" + TypeName(key) + "]");
      int64_t i = key.as_int();
      if (object.is_list()) {
        const auto& items = object.as_list().items;
        const int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) {
          return Value::Undefined(TypeName(object) + " object has no element " +
                                  std::to_string(key.as_int()));
        }
        return items[static_cast<size_t>(i)];
      }
      const std::string& s = object.as_string();
      const std::vector<size_t> offsets = CodePointOffsets(s);
      const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
      if (i < 0) i += n;
      if (i < 0 || i >= n) {
        return Value::Undefined("str object has no element " + std::to_string(key.as_int()));
      }
      return Value::String(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
    case Value::Kind::kNamespace:
    case Value::Kind::kLoop:
      if (key.is_string()) return GetAttribute(object, key.as_string());
      return Missing(object, "[" + TypeName(key) + "]");
    default: return Missing(object, "[" + TypeName(key) + "]");
  }
}

StatusOr<Value> GetSlice(const Value& object, const Value& start_value, const Value& stop_value,
                         const Value& step_value) {
  if (object.is_undefined()) return UndefinedError(object);
  if (!object.is_sequence() && !object.is_string()) return Missing(object, "[:]");
  for (const Value* part : {&start_value, &stop_value, &step_value}) {
    if (!part->is_none() && !part->is_undefined() && !IsIndex(*part)) {
      return Value::Undefined("slice indices must be integers or None");
    }
  }
  const bool has_start = IsIndex(start_value), has_stop = IsIndex(stop_value);
  const int64_t step = IsIndex(step_value) ? step_value.as_int() : 1;
  if (step == 0) return InvalidArgumentError("slice step cannot be zero");
  std::vector<size_t> offsets;
  int64_t n;
  if (object.is_list()) {
    n = static_cast<int64_t>(object.as_list().items.size());
  } else {
    offsets = CodePointOffsets(object.as_string());
    n = static_cast<int64_t>(offsets.size()) - 1;
  }
  auto adjust = [&](int64_t i) {
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = has_start ? adjust(start_value.as_int()) : (step < 0 ? n - 1 : 0);
  const int64_t stop = has_stop ? adjust(stop_value.as_int()) : (step < 0 ? -1 : n);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
  if (object.is_list()) {
    std::vector<Value> items;
    items.reserve(picked.size());
    for (int64_t i : picked) items.push_back(object.as_list().items[static_cast<size_t>(i)]);
    return Value::MakeList(std::move(items), object.as_list().tuple);
  }
  const std::string& s = object.as_string();
  if (step == 1) {
    if (picked.empty()) return Value::String("");
    return Value::String(
        s.substr(offsets[picked.front()], offsets[picked.back() + 1] - offsets[picked.front()]));
  }
  std::string out;
  for (int64_t i : picked) out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
  return Value::String(std::move(out));
}

StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kMap: return item.is_string() && container.as_map().Find(item.as_string());
    case Value::Kind::kList:
      for (const Value& v : container.as_list().items) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return InvalidArgumentError("'in <string>' requires a string as left operand, not " +
                                    TypeName(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    default:
      return InvalidArgumentError("argument of type '" + TypeName(container) + "' is not iterable");
  }
}

StatusOr<std::vector<Value>> Iterate(const Value& value) {
  std::vector<Value> items;
  switch (value.kind()) {
    case Value::Kind::kUndefined: return items;
    case Value::Kind::kList: return value.as_list().items;
    case Value::Kind::kMap:
      items.reserve(value.as_map().entries.size());
      for (const auto& entry : value.as_map().entries) items.push_back(Value::String(entry.first));
      return items;
    case Value::Kind::kString: {
      const std::string& s = value.as_string();
      for (size_t at = 0; at < s.size();) {
        const size_t begin = at;
        NextCodePoint(s, &at);
        items.push_back(Value::String(s.substr(begin, at - begin)));
      }
      return items;
    }
    default: return InvalidArgumentError("'" + TypeName(value) + "' object is not iterable");
  }
}

StatusOr<Value> CallMethod(const Value& object, std::string_view name, const CallArgs& args,
                           CallContext& ctx) {
  switch (object.kind()) {
    case Value::Kind::kUndefined: return UndefinedError(object);
    case Value::Kind::kString: return StringMethod(object.as_string(), name, args, ctx);
    case Value::Kind::kMap: {
      if (DictMethods().count(name) > 0) return DictMethod(object.as_map(), name, args, ctx);
      break;
    }
    case Value::Kind::kLoop:
      if (name == "cycle") {
        if (args.positional.empty()) return InvalidArgumentError("no items for cycling given");
        const int64_t n = static_cast<int64_t>(args.positional.size());
        return args.positional[static_cast<size_t>(object.as_loop().index0 % n)];
      }
      break;
    default: break;
  }
  return InvalidArgumentError("a " + TypeName(object) + " has no method '" + std::string(name) +
                              "'");
}

StatusOr<Value> CallFunction(std::string_view name, const CallArgs& args, CallContext& ctx) {
  if (name == "namespace" || name == "dict") {
    if (args.positional.size() > 1) {
      return InvalidArgumentError(std::string(name) + "() takes at most one positional argument");
    }
    std::vector<std::pair<std::string, Value>> entries;
    auto put = [&](const std::string& key, const Value& value) -> Status {
      if (name == "namespace" && !key.empty() && key[0] == '_') {
        return InvalidArgumentError("a namespace attribute may not start with '_': '" + key + "'");
      }
      for (auto& entry : entries) {
        if (entry.first == key) {
          entry.second = value;
          return Status::Ok();
        }
      }
      entries.emplace_back(key, value);
      return Status::Ok();
    };
    if (!args.positional.empty()) {
      if (!args.positional[0].is_map()) {
        return InvalidArgumentError(std::string(name) + "() takes a mapping, not " +
                                    TypeName(args.positional[0]));
      }
      if (name == "namespace" && args.positional[0].HoldsNamespace()) {
        return UnimplementedError("a namespace holding another namespace is not supported");
      }
      for (const auto& [key, value] : args.positional[0].as_map().entries) {
        HOIST_RETURN_IF_ERROR(put(key, value));
      }
    }
    for (const auto& [key, value] : args.keyword) {
      if (name == "namespace" && value.HoldsNamespace()) {
        return UnimplementedError("a namespace holding another namespace is not supported");
      }
      HOIST_RETURN_IF_ERROR(put(key, value));
    }
    if (name == "dict") return Value::MakeMap(std::move(entries));
    Map attrs;
    attrs.entries = std::move(entries);
    return Value::MakeNamespace(std::move(attrs));
  }
  if (name == "range") {
    if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
      return InvalidArgumentError("range() takes one to three integers");
    }
    int64_t bounds[3] = {0, 0, 1};
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (!IsIndex(args.positional[i])) {
        return InvalidArgumentError("range() takes integers, not " + TypeName(args.positional[i]));
      }
    }
    if (args.positional.size() == 1) {
      bounds[1] = args.positional[0].as_int();
    } else {
      bounds[0] = args.positional[0].as_int();
      bounds[1] = args.positional[1].as_int();
      if (args.positional.size() == 3) bounds[2] = args.positional[2].as_int();
    }
    const int64_t start = bounds[0], stop = bounds[1], step = bounds[2];
    if (step == 0) return InvalidArgumentError("range() arg 3 must not be zero");
    const __int128 span =
        step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 magnitude = step > 0 ? step : -static_cast<__int128>(step);
    const __int128 count = span <= 0 ? 0 : (span + magnitude - 1) / magnitude;
    // Jinja's sandbox refuses longer ranges (MAX_RANGE).
    constexpr int64_t kMaxRange = 100000;
    if (count > kMaxRange) {
      return ResourceExhaustedError("range() of " + std::to_string(static_cast<int64_t>(count)) +
                                    " items, more than the " + std::to_string(kMaxRange) +
                                    " Jinja's sandbox allows");
    }
    HOIST_RETURN_IF_ERROR(ctx.Spend(static_cast<size_t>(count) * sizeof(Value)));
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k)
      items.push_back(Value::Int(start + k * step));
    return Value::MakeList(std::move(items));
  }
  if (name == "strftime_now") {
    HOIST_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"format"}, name));
    HOIST_ASSIGN_OR_RETURN(std::string format, StringArg(a[0], "the format"));
    if (format.size() > 256) return InvalidArgumentError("strftime_now() format too long");
    const std::tm now = ctx.Now();
    std::string out(1024, '\0');
    const size_t n =
        format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &now);
    if (n == 0 && !format.empty()) {
      return InvalidArgumentError("strftime_now(\"" + format + "\") gives no text or too much");
    }
    out.resize(n);
    return Value::String(std::move(out));
  }
  return UnimplementedError("the function '" + std::string(name) + "' is not supported");
}

}  // namespace hoist::runtime::jinja
