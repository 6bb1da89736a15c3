// The expression grammar of a chat template's tags, for the template parser
// (runtime/interchange/jinja_parser.h): Jinja2's precedence (conditional, or, and, not,
// comparisons, + -, ~,
// * / // %, **, unary - +, then subscripts, calls, filters and tests), each node's nesting
// measured as it is built, and the names of filters, tests, methods and functions checked against
// those the evaluator implements. Internal to the parser; one per parse, not thread-safe.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/interchange/jinja_ast.h"
#include "runtime/interchange/jinja_lexer.h"

namespace hoist::runtime::jinja {

// The tokens of a template with a cursor, and the nesting bound every parse function shares.
class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& Cur() const { return tokens_[i_]; }
  const Token& Look() const { return tokens_[std::min(i_ + 1, tokens_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < tokens_.size()) ++i_;
  }
  const std::vector<Token>& tokens() const { return tokens_; }

  // Consumes the current token if it is of `kind` (`what` names it in the error), the operator
  // `op`, or the name `name`.
  Status Expect(TokenKind kind, const std::string& what);
  Status ExpectOp(std::string_view op);
  Status ExpectName(std::string_view name);

  // One level of nesting for as long as it lives; Check fails past kMaxTemplateNesting.
  class Nest {
   public:
    explicit Nest(TokenStream* stream) : stream_(stream) { ++stream_->nesting_; }
    ~Nest() { --stream_->nesting_; }
    Status Check(SourcePos pos) const;

   private:
    TokenStream* stream_;
  };
  int nesting() const { return nesting_; }

 private:
  std::vector<Token> tokens_;
  size_t i_ = 0;
  int nesting_ = 0;
};

bool IsName(const Token& t, std::string_view name);
bool IsOp(const Token& t, std::string_view op);
// How an error names a token: "'endif'", "a string", "the end of the template".
std::string Describe(const Token& token);
// "line L:C: what" as InvalidArgument, and "line L:C: what is not supported" as Unimplemented.
Status SyntaxError(SourcePos pos, const std::string& what);
Status Unsupported(SourcePos pos, const std::string& what);

class ExprParser {
 public:
  // `macro_names` are the macros the template defines, which calls may name besides the global
  // functions. Both pointers must outlive the parser.
  ExprParser(TokenStream* stream, const std::set<std::string>* macro_names)
      : ts_(stream), macro_names_(macro_names) {}

  // An expression, or a tuple of them separated by commas; with_condexpr allows `a if b else c`
  // at the top, explicit_parens an empty tuple; `extra_end` is a name that also ends the tuple
  // ("recursive" after a for loop's list).
  StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens,
                               const char* extra_end = nullptr);
  StatusOr<ExprPtr> ParseExpression(bool with_condexpr);

 private:
  const Token& Cur() const { return ts_->Cur(); }
  const Token& Look() const { return ts_->Look(); }
  void Next() { ts_->Next(); }
  Status ExpectOp(std::string_view op) { return ts_->ExpectOp(op); }

  StatusOr<ExprPtr> Seal(ExprPtr e);
  static ExprPtr NewExpr(ExprKind kind, SourcePos pos);
  StatusOr<ExprPtr> Binary(const std::string& op, ExprPtr left, ExprPtr right, SourcePos pos);
  bool IsTupleEnd(const char* extra_end) const;
  StatusOr<ExprPtr> ParseOr();
  StatusOr<ExprPtr> ParseAnd();
  StatusOr<ExprPtr> ParseNot();
  StatusOr<ExprPtr> ParseCompare();
  template <typename Operand>
  StatusOr<ExprPtr> ParseLeftAssoc(std::initializer_list<std::string_view> ops, Operand next);
  StatusOr<ExprPtr> ParseMath1();
  StatusOr<ExprPtr> ParseConcat();
  StatusOr<ExprPtr> ParseMath2();
  StatusOr<ExprPtr> ParsePow();
  StatusOr<ExprPtr> ParseUnary(bool with_filter);
  StatusOr<ExprPtr> ParsePrimary();
  StatusOr<ExprPtr> ParseList();
  StatusOr<ExprPtr> ParseDict();
  StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  Status ParseCallArgs(Expr* e);
  StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  StatusOr<std::string> ParseDottedName();
  StatusOr<ExprPtr> ParseFilter(ExprPtr node);
  StatusOr<ExprPtr> ParseTest(ExprPtr node);

  TokenStream* ts_;
  const std::set<std::string>* macro_names_;
};

}  // namespace hoist::runtime::jinja
