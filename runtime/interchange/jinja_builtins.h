// What a chat template can call and look up: Jinja's filters and tests, the global functions
// transformers gives chat templates (raise_exception aside, which the evaluator handles),
// the Python methods of strings and dicts that templates call, and Jinja's rules for attribute
// access, subscripts, slices, membership and iteration. Each behaves as Jinja 3 and Python do,
// for the arguments templates pass; errors carry no position (the evaluator adds it).
// Stateless functions over a CallContext; thread-safe.
#pragma once

#include <ctime>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/interchange/jinja_value.h"

namespace hoist::runtime::jinja {

// What a builtin may ask of the render that calls it.
class CallContext {
 public:
  virtual ~CallContext() = default;
  // Counts a value of `bytes` made toward the render's limits, refusing one too large.
  virtual Status Spend(size_t bytes) = 0;
  // The local time strftime_now formats.
  virtual std::tm Now() = 0;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Whether the name is one this module implements; the parser refuses any other.
bool IsSupportedFilter(std::string_view name);
bool IsSupportedTest(std::string_view name);
bool IsSupportedMethod(std::string_view name);
bool IsSupportedFunction(std::string_view name);

StatusOr<Value> ApplyFilter(std::string_view name, const Value& value, const CallArgs& args,
                            CallContext& ctx);
StatusOr<bool> ApplyTest(std::string_view name, const Value& value, const CallArgs& args,
                         CallContext& ctx);
// object.name(args...)
StatusOr<Value> CallMethod(const Value& object, std::string_view name, const CallArgs& args,
                           CallContext& ctx);
// namespace(), range(), dict(), strftime_now().
StatusOr<Value> CallFunction(std::string_view name, const CallArgs& args, CallContext& ctx);

// object.name, as Jinja's getattr resolves it: a dict's key, a namespace's attribute, a loop's
// field; undefined where there is none. Undefined objects are an error, as is a method named
// without being called.
StatusOr<Value> GetAttribute(const Value& object, std::string_view name);
// object[key], as Jinja's getitem resolves it.
StatusOr<Value> GetItem(const Value& object, const Value& key);
// object[start:stop:step], each part may be none.
StatusOr<Value> GetSlice(const Value& object, const Value& start, const Value& stop,
                         const Value& step);
// Python's `item in container`.
StatusOr<bool> Contains(const Value& container, const Value& item);
// The items a for loop visits: a list's items, a dict's keys, a string's characters; none for
// undefined.
StatusOr<std::vector<Value>> Iterate(const Value& value);
// The error for using an undefined value, with what it stood for ("'x' is undefined").
Status UndefinedError(const Value& undefined);

// Binds `args` to the parameters `names`, positional arguments first and then keywords, as
// Python binds a call; a parameter with no argument is left undefined. Extra or unknown
// arguments are an error naming `callee`.
StatusOr<std::vector<Value>> BindArgs(const CallArgs& args,
                                      std::initializer_list<std::string_view> names,
                                      std::string_view callee);

}  // namespace hoist::runtime::jinja
