// Splits a chat template into text and the tokens of its tags, as Jinja2's lexer does with the
// settings transformers renders chat templates with: trim_blocks (the first newline after a block
// or comment tag is dropped), lstrip_blocks (spaces and tabs before a block or comment tag on its
// own line are dropped), "-" and "+" whitespace control on every tag, comments dropped, and
// {% raw %} kept as text. Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runtime/interchange/jinja_ast.h"

namespace hoist::runtime::jinja {

enum class TokenKind {
  kText,           // template text between tags (text holds it)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // text holds the decoded value
  kInteger,  // integer holds it
  kFloat,    // number holds it
  kOperator,
  kEnd,  // end of the template
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t integer = 0;
  double number = 0;
  SourcePos pos;
};

// The source as Jinja reads it: every \r\n and \r becomes \n, and one final newline is dropped
// (keep_trailing_newline is off).
std::string NormalizeTemplateSource(std::string_view source);

// The tokens of a normalized source, ending with kEnd. Errors name the line and column.
StatusOr<std::vector<Token>> Tokenize(std::string_view source);

// Python's str.rstrip() / str.strip() of whitespace (Unicode's, as str.isspace() has it).
std::string_view RStripPythonSpace(std::string_view s);
std::string_view LStripPythonSpace(std::string_view s);

}  // namespace hoist::runtime::jinja
