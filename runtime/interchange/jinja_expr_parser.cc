#include "runtime/interchange/jinja_expr_parser.h"

#include <algorithm>
#include <utility>

#include "runtime/interchange/jinja_builtins.h"
#include "runtime/interchange/jinja_parser.h"

namespace hoist::runtime::jinja {
namespace {

// The nesting of the tree is measured as it is built: each node is one deeper than its deepest
// child, and a node past kMaxTemplateNesting is refused.
int ExprDepth(const Expr* e) { return e == nullptr ? 0 : e->depth; }

}  // namespace

bool IsName(const Token& t, std::string_view name) {
  return t.kind == TokenKind::kName && t.text == name;
}
bool IsOp(const Token& t, std::string_view op) {
  return t.kind == TokenKind::kOperator && t.text == op;
}

std::string Describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kText: return "text";
    case TokenKind::kVariableBegin: return "'{{'";
    case TokenKind::kVariableEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kName: return "'" + token.text + "'";
    case TokenKind::kString: return "a string";
    case TokenKind::kInteger:
    case TokenKind::kFloat: return "the number " + token.text;
    case TokenKind::kOperator: return "'" + token.text + "'";
    case TokenKind::kEnd: return "the end of the template";
  }
  return "a token";
}

Status SyntaxError(SourcePos pos, const std::string& what) {
  return InvalidArgumentError(Where(pos) + ": " + what);
}
Status Unsupported(SourcePos pos, const std::string& what) {
  return UnimplementedError(Where(pos) + ": " + what + " is not supported");
}

Status TokenStream::Expect(TokenKind kind, const std::string& what) {
  if (Cur().kind != kind) {
    return SyntaxError(Cur().pos, "expected " + what + ", found " + Describe(Cur()));
  }
  Next();
  return Status::Ok();
}

Status TokenStream::ExpectOp(std::string_view op) {
  if (!IsOp(Cur(), op)) {
    return SyntaxError(Cur().pos, "expected '" + std::string(op) + "', found " + Describe(Cur()));
  }
  Next();
  return Status::Ok();
}

Status TokenStream::ExpectName(std::string_view name) {
  if (!IsName(Cur(), name)) {
    return SyntaxError(Cur().pos, "expected '" + std::string(name) + "', found " + Describe(Cur()));
  }
  Next();
  return Status::Ok();
}

Status TokenStream::Nest::Check(SourcePos pos) const {
  if (stream_->nesting_ > kMaxTemplateNesting) {
    return ResourceExhaustedError(Where(pos) + ": statements or expressions nest more than " +
                                  std::to_string(kMaxTemplateNesting) + " levels deep");
  }
  return Status::Ok();
}

StatusOr<ExprPtr> ExprParser::Seal(ExprPtr e) {
  int deepest = 0;
  for (const ExprPtr& x : e->operands) deepest = std::max(deepest, ExprDepth(x.get()));
  for (const ExprPtr& x : e->args) deepest = std::max(deepest, ExprDepth(x.get()));
  for (const auto& kw : e->kwargs) deepest = std::max(deepest, ExprDepth(kw.second.get()));
  e->depth = deepest + 1;
  if (e->depth > kMaxTemplateNesting) {
    return ResourceExhaustedError(Where(e->pos) + ": an expression nests more than " +
                                  std::to_string(kMaxTemplateNesting) + " levels deep");
  }
  return e;
}
ExprPtr ExprParser::NewExpr(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}
StatusOr<ExprPtr> ExprParser::Binary(const std::string& op, ExprPtr left, ExprPtr right,
                                     SourcePos pos) {
  ExprPtr e = NewExpr(ExprKind::kBinary, pos);
  e->op = op;
  e->operands.push_back(std::move(left));
  e->operands.push_back(std::move(right));
  return Seal(std::move(e));
}

bool ExprParser::IsTupleEnd(const char* extra_end) const {
  const Token& t = Cur();
  if (t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd ||
      t.kind == TokenKind::kEnd || IsOp(t, ")")) {
    return true;
  }
  return extra_end != nullptr && IsName(t, extra_end);
}

// An expression, or a tuple of them separated by commas.
StatusOr<ExprPtr> ExprParser::ParseTuple(bool with_condexpr, bool explicit_parens,
                                         const char* extra_end) {
  const SourcePos pos = Cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) HOIST_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end)) break;
    HOIST_ASSIGN_OR_RETURN(ExprPtr item, with_condexpr ? ParseExpression(true) : ParseOr());
    items.push_back(std::move(item));
    if (IsOp(Cur(), ",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) {
      return SyntaxError(Cur().pos, "expected an expression, found " + Describe(Cur()));
    }
  }
  ExprPtr e = NewExpr(ExprKind::kList, pos);
  e->tuple = true;
  e->operands = std::move(items);
  return Seal(std::move(e));
}

StatusOr<ExprPtr> ExprParser::ParseExpression(bool with_condexpr) {
  TokenStream::Nest nest(ts_);
  HOIST_RETURN_IF_ERROR(nest.Check(Cur().pos));
  if (!with_condexpr) return ParseOr();
  HOIST_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (IsName(Cur(), "if")) {
    const SourcePos pos = Cur().pos;
    Next();
    HOIST_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (IsName(Cur(), "else")) {
      Next();
      HOIST_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
    }
    ExprPtr cond = NewExpr(ExprKind::kCondExpr, pos);
    cond->operands.push_back(std::move(test));
    cond->operands.push_back(std::move(expr));
    cond->operands.push_back(std::move(otherwise));
    HOIST_ASSIGN_OR_RETURN(expr, Seal(std::move(cond)));
  }
  return expr;
}

StatusOr<ExprPtr> ExprParser::ParseOr() {
  HOIST_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName(Cur(), "or")) {
    const SourcePos pos = Cur().pos;
    Next();
    HOIST_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    HOIST_ASSIGN_OR_RETURN(left, Binary("or", std::move(left), std::move(right), pos));
  }
  return left;
}

StatusOr<ExprPtr> ExprParser::ParseAnd() {
  HOIST_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName(Cur(), "and")) {
    const SourcePos pos = Cur().pos;
    Next();
    HOIST_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    HOIST_ASSIGN_OR_RETURN(left, Binary("and", std::move(left), std::move(right), pos));
  }
  return left;
}

StatusOr<ExprPtr> ExprParser::ParseNot() {
  if (!IsName(Cur(), "not")) return ParseCompare();
  TokenStream::Nest nest(ts_);
  HOIST_RETURN_IF_ERROR(nest.Check(Cur().pos));
  ExprPtr e = NewExpr(ExprKind::kUnary, Cur().pos);
  e->op = "not";
  Next();
  HOIST_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  e->operands.push_back(std::move(operand));
  return Seal(std::move(e));
}

StatusOr<ExprPtr> ExprParser::ParseCompare() {
  const SourcePos pos = Cur().pos;
  HOIST_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr e = NewExpr(ExprKind::kCompare, pos);
  e->operands.push_back(std::move(first));
  while (true) {
    const Token& t = Cur();
    std::string op;
    if (t.kind == TokenKind::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                           t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text;
      Next();
    } else if (IsName(t, "in")) {
      op = "in";
      Next();
    } else if (IsName(t, "not") && IsName(Look(), "in")) {
      op = "notin";
      Next();
      Next();
    } else {
      break;
    }
    HOIST_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    e->ops.push_back(op);
    e->operands.push_back(std::move(operand));
  }
  if (e->ops.empty()) return std::move(e->operands[0]);
  return Seal(std::move(e));
}

template <typename Operand>
StatusOr<ExprPtr> ExprParser::ParseLeftAssoc(std::initializer_list<std::string_view> ops,
                                             Operand next) {
  HOIST_ASSIGN_OR_RETURN(ExprPtr left, next());
  while (Cur().kind == TokenKind::kOperator &&
         std::find(ops.begin(), ops.end(), Cur().text) != ops.end()) {
    const std::string op = Cur().text;
    const SourcePos pos = Cur().pos;
    Next();
    HOIST_ASSIGN_OR_RETURN(ExprPtr right, next());
    HOIST_ASSIGN_OR_RETURN(left, Binary(op, std::move(left), std::move(right), pos));
  }
  return left;
}
StatusOr<ExprPtr> ExprParser::ParseMath1() {
  return ParseLeftAssoc({"+", "-"}, [this] { return ParseConcat(); });
}
StatusOr<ExprPtr> ExprParser::ParseConcat() {
  return ParseLeftAssoc({"~"}, [this] { return ParseMath2(); });
}
StatusOr<ExprPtr> ExprParser::ParseMath2() {
  return ParseLeftAssoc({"*", "/", "//", "%"}, [this] { return ParsePow(); });
}
StatusOr<ExprPtr> ExprParser::ParsePow() {
  return ParseLeftAssoc({"**"}, [this] { return ParseUnary(true); });
}

StatusOr<ExprPtr> ExprParser::ParseUnary(bool with_filter) {
  TokenStream::Nest nest(ts_);
  HOIST_RETURN_IF_ERROR(nest.Check(Cur().pos));
  ExprPtr node;
  if (IsOp(Cur(), "-") || IsOp(Cur(), "+")) {
    ExprPtr e = NewExpr(ExprKind::kUnary, Cur().pos);
    e->op = Cur().text;
    Next();
    HOIST_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    e->operands.push_back(std::move(operand));
    HOIST_ASSIGN_OR_RETURN(node, Seal(std::move(e)));
  } else {
    HOIST_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  HOIST_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    HOIST_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

StatusOr<ExprPtr> ExprParser::ParsePrimary() {
  const Token& t = Cur();
  ExprPtr e = NewExpr(ExprKind::kLiteral, t.pos);
  switch (t.kind) {
    case TokenKind::kName:
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        e->value = Value::Bool(t.text[0] == 't' || t.text[0] == 'T');
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::None();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      Next();
      return Seal(std::move(e));
    case TokenKind::kString: {
      std::string text;
      while (Cur().kind == TokenKind::kString) {
        text += Cur().text;
        Next();
      }
      e->value = Value::String(std::move(text));
      return Seal(std::move(e));
    }
    case TokenKind::kInteger:
      e->value = Value::Int(t.integer);
      Next();
      return Seal(std::move(e));
    case TokenKind::kFloat:
      e->value = Value::Float(t.number);
      Next();
      return Seal(std::move(e));
    case TokenKind::kOperator:
      if (t.text == "(") {
        Next();
        HOIST_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true, true));
        HOIST_RETURN_IF_ERROR(ExpectOp(")"));
        return inner;
      }
      if (t.text == "[") return ParseList();
      if (t.text == "{") return ParseDict();
      break;
    default: break;
  }
  return SyntaxError(t.pos, "unexpected " + Describe(t));
}

StatusOr<ExprPtr> ExprParser::ParseList() {
  ExprPtr e = NewExpr(ExprKind::kList, Cur().pos);
  Next();  // [
  while (!IsOp(Cur(), "]")) {
    if (!e->operands.empty()) {
      HOIST_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(Cur(), "]")) break;
    }
    HOIST_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
    e->operands.push_back(std::move(item));
  }
  Next();  // ]
  return Seal(std::move(e));
}

StatusOr<ExprPtr> ExprParser::ParseDict() {
  ExprPtr e = NewExpr(ExprKind::kDict, Cur().pos);
  Next();  // {
  while (!IsOp(Cur(), "}")) {
    if (!e->operands.empty()) {
      HOIST_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(Cur(), "}")) break;
    }
    HOIST_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
    HOIST_RETURN_IF_ERROR(ExpectOp(":"));
    HOIST_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
    e->operands.push_back(std::move(key));
    e->operands.push_back(std::move(value));
  }
  Next();  // }
  return Seal(std::move(e));
}

StatusOr<ExprPtr> ExprParser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(Cur(), ".") || IsOp(Cur(), "[")) {
      HOIST_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp(Cur(), "(")) {
      HOIST_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> ExprParser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp(Cur(), "|")) {
      HOIST_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    } else if (IsName(Cur(), "is")) {
      HOIST_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp(Cur(), "(")) {
      HOIST_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> ExprParser::ParseSubscript(ExprPtr node) {
  const SourcePos pos = Cur().pos;
  if (IsOp(Cur(), ".")) {
    Next();
    ExprPtr e = NewExpr(ExprKind::kGetAttr, Cur().pos);
    if (Cur().kind == TokenKind::kName) {
      e->name = Cur().text;
    } else if (Cur().kind == TokenKind::kInteger) {
      e->kind = ExprKind::kGetItem;
      ExprPtr index = NewExpr(ExprKind::kLiteral, Cur().pos);
      index->value = Value::Int(Cur().integer);
      HOIST_ASSIGN_OR_RETURN(index, Seal(std::move(index)));
      e->operands.push_back(std::move(node));
      e->operands.push_back(std::move(index));
      Next();
      return Seal(std::move(e));
    } else {
      return SyntaxError(Cur().pos, "expected an attribute name, found " + Describe(Cur()));
    }
    Next();
    e->operands.push_back(std::move(node));
    return Seal(std::move(e));
  }
  Next();                      // [
  std::vector<ExprPtr> parts;  // start, stop, step of a slice
  bool slice = false;
  ExprPtr index;
  auto slice_end = [this] { return IsOp(Cur(), "]") || IsOp(Cur(), ","); };
  if (IsOp(Cur(), ":")) {
    slice = true;
    parts.push_back(nullptr);
  } else {
    HOIST_ASSIGN_OR_RETURN(index, ParseExpression(true));
    if (IsOp(Cur(), ":")) {
      slice = true;
      parts.push_back(std::move(index));
    }
  }
  if (slice) {
    Next();  // the first :
    if (IsOp(Cur(), ":") || slice_end()) {
      parts.push_back(nullptr);
    } else {
      HOIST_ASSIGN_OR_RETURN(ExprPtr stop, ParseExpression(true));
      parts.push_back(std::move(stop));
    }
    if (IsOp(Cur(), ":")) {
      Next();
      if (slice_end()) {
        parts.push_back(nullptr);
      } else {
        HOIST_ASSIGN_OR_RETURN(ExprPtr step, ParseExpression(true));
        parts.push_back(std::move(step));
      }
    } else {
      parts.push_back(nullptr);
    }
  }
  if (IsOp(Cur(), ",")) return Unsupported(Cur().pos, "a subscript with several indexes");
  HOIST_RETURN_IF_ERROR(ExpectOp("]"));
  ExprPtr e = NewExpr(slice ? ExprKind::kSlice : ExprKind::kGetItem, pos);
  e->operands.push_back(std::move(node));
  if (slice) {
    for (ExprPtr& part : parts) e->operands.push_back(std::move(part));
  } else {
    e->operands.push_back(std::move(index));
  }
  return Seal(std::move(e));
}

Status ExprParser::ParseCallArgs(Expr* e) {
  HOIST_RETURN_IF_ERROR(ExpectOp("("));
  bool require_comma = false;
  while (!IsOp(Cur(), ")")) {
    if (require_comma) {
      HOIST_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(Cur(), ")")) break;
    }
    if (IsOp(Cur(), "*") || IsOp(Cur(), "**")) {
      return Unsupported(Cur().pos, "argument unpacking with * or **");
    }
    if (Cur().kind == TokenKind::kName && IsOp(Look(), "=")) {
      const std::string key = Cur().text;
      Next();
      Next();
      HOIST_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      e->kwargs.emplace_back(key, std::move(value));
    } else {
      if (!e->kwargs.empty()) {
        return SyntaxError(Cur().pos, "a positional argument after a keyword argument");
      }
      HOIST_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      e->args.push_back(std::move(value));
    }
    require_comma = true;
  }
  Next();  // )
  return Status::Ok();
}

StatusOr<ExprPtr> ExprParser::ParseCall(ExprPtr callee) {
  const SourcePos pos = Cur().pos;
  if (callee->kind == ExprKind::kName) {
    if (!IsSupportedFunction(callee->name) && macro_names_->count(callee->name) == 0) {
      return Unsupported(callee->pos, "the function '" + callee->name + "'");
    }
  } else if (callee->kind == ExprKind::kGetAttr) {
    if (!IsSupportedMethod(callee->name)) {
      return Unsupported(callee->pos, "the method '" + callee->name + "'");
    }
  } else {
    return Unsupported(pos, "calling anything but a function, a macro or a method");
  }
  ExprPtr e = NewExpr(ExprKind::kCall, callee->pos);
  e->operands.push_back(std::move(callee));
  HOIST_RETURN_IF_ERROR(ParseCallArgs(e.get()));
  return Seal(std::move(e));
}

// A dotted name after | or is.
StatusOr<std::string> ExprParser::ParseDottedName() {
  if (Cur().kind != TokenKind::kName) {
    return SyntaxError(Cur().pos, "expected a name, found " + Describe(Cur()));
  }
  std::string name = Cur().text;
  Next();
  while (IsOp(Cur(), ".") && Look().kind == TokenKind::kName) {
    Next();
    name += "." + Cur().text;
    Next();
  }
  return name;
}

StatusOr<ExprPtr> ExprParser::ParseFilter(ExprPtr node) {
  Next();  // |
  ExprPtr e = NewExpr(ExprKind::kFilter, Cur().pos);
  HOIST_ASSIGN_OR_RETURN(e->name, ParseDottedName());
  if (!IsSupportedFilter(e->name)) return Unsupported(e->pos, "the filter '" + e->name + "'");
  e->operands.push_back(std::move(node));
  if (IsOp(Cur(), "(")) HOIST_RETURN_IF_ERROR(ParseCallArgs(e.get()));
  return Seal(std::move(e));
}

StatusOr<ExprPtr> ExprParser::ParseTest(ExprPtr node) {
  Next();  // is
  ExprPtr e = NewExpr(ExprKind::kTest, Cur().pos);
  if (IsName(Cur(), "not")) {
    e->negated = true;
    Next();
  }
  e->pos = Cur().pos;
  HOIST_ASSIGN_OR_RETURN(e->name, ParseDottedName());
  if (!IsSupportedTest(e->name)) return Unsupported(e->pos, "the test '" + e->name + "'");
  e->operands.push_back(std::move(node));
  const Token& t = Cur();
  if (IsOp(t, "(")) {
    HOIST_RETURN_IF_ERROR(ParseCallArgs(e.get()));
  } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
              t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat || IsOp(t, "[") ||
              IsOp(t, "{")) &&
             !IsName(t, "else") && !IsName(t, "or") && !IsName(t, "and")) {
    if (IsName(t, "is")) return SyntaxError(t.pos, "tests cannot be chained with 'is'");
    HOIST_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    HOIST_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    e->args.push_back(std::move(arg));
  }
  return Seal(std::move(e));
}

}  // namespace hoist::runtime::jinja
