// Renders a parsed chat template (runtime/interchange/jinja_parser.h) with Jinja2's semantics:
// scoping (a for loop's iterations and a macro's body have their own variables; set inside them
// does not leak out, a namespace does), Python's operators and truth, undefined values that print
// as nothing and fail when used, loop.* and break/continue, and {% generation %} blocks whose
// rendered byte ranges are reported as transformers reports assistant spans.
//
// Every render is bounded: by steps (each expression, statement and loop iteration is one, and
// every 32 bytes of a value made is one more), by the size of the output and of any one value, and
// by how deeply it recurses, so a hostile template ends with ResourceExhausted rather than a hang
// or a crash (the deepest render the bounds allow, like the deepest parse, fits in 1 MiB of stack).
// Errors name the line and column of the expression that failed.
//
// Stateless functions; a render allocates per call, and one Template may render on many threads.
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/interchange/jinja_ast.h"

namespace hoist::runtime::jinja {

struct RenderLimits {
  // Real templates take tens of steps per message.
  int64_t max_steps = 10'000'000;
  // The output, and any one string or list a template makes.
  size_t max_output_bytes = size_t{64} << 20;
  // Nested evaluation (expressions, statements, macro calls) at any moment.
  int max_recursion = 1000;
};

struct RenderOutput {
  std::string text;
  // The [begin, end) byte ranges of `text` rendered inside {% generation %} blocks, in order.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

// Renders `tmpl` with `variables` as its context. `now` is the local time strftime_now formats
// (the machine's clock when absent).
StatusOr<RenderOutput> RenderTemplate(const Template& tmpl,
                                      const std::vector<std::pair<std::string, Value>>& variables,
                                      const std::optional<std::tm>& now,
                                      const RenderLimits& limits);

}  // namespace hoist::runtime::jinja
