// Parses a chat template into the syntax tree of runtime/interchange/jinja_ast.h, with Jinja2's
// grammar and operator precedence. Every construct the evaluator does not implement is refused
// here, before anything renders, with an Unimplemented error that names it and where it is ("line
// 3:14: the filter 'foo' is not supported"); a malformed template is InvalidArgument, also with its
// line and column. Nesting is bounded (statements and expressions kMaxTemplateNesting deep), so a
// hostile template cannot exhaust the stack of the parser or of the evaluator after it.
// Stateless; thread-safe.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "runtime/interchange/jinja_ast.h"

namespace hoist::runtime::jinja {

// Real templates nest a handful of statements and expressions a dozen levels; this leaves room
// while keeping the evaluator's recursion far from any thread's stack limit.
inline constexpr int kMaxTemplateNesting = 256;
// Real chat templates are a few kilobytes.
inline constexpr size_t kMaxTemplateBytes = size_t{1} << 20;

StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source);

}  // namespace hoist::runtime::jinja
