#include "runtime/interchange/jinja_parser.h"

#include <algorithm>
#include <set>
#include <utility>

#include "runtime/interchange/jinja_expr_parser.h"
#include "runtime/interchange/jinja_lexer.h"

namespace hoist::runtime::jinja {
namespace {

// Statements Jinja has that chat templates do not use.
bool IsRefusedStatement(const std::string& name) {
  static const std::set<std::string> kRefused = {"include", "import", "from",     "extends",
                                                 "block",   "call",   "filter",   "autoescape",
                                                 "do",      "trans",  "pluralize"};
  return kRefused.count(name) > 0;
}

// The statements of a template; their expressions are ExprParser's.
class Parser {
 public:
  // Whether Run parsed a {% generation %} block.
  bool has_generation() const { return has_generation_; }
  explicit Parser(std::vector<Token> tokens) : ts_(std::move(tokens)), exprs_(&ts_, &macro_names_) {
    const std::vector<Token>& t = ts_.tokens();
    for (size_t i = 0; i + 2 < t.size(); ++i) {
      if (t[i].kind == TokenKind::kBlockBegin && IsName(t[i + 1], "macro") &&
          t[i + 2].kind == TokenKind::kName) {
        macro_names_.insert(t[i + 2].text);
      }
    }
  }

  StatusOr<Body> Run() {
    Body body;
    std::string end;
    HOIST_RETURN_IF_ERROR(ParseBody({}, &body, &end));
    return body;
  }

 private:
  const Token& Cur() const { return ts_.Cur(); }
  const Token& Look() const { return ts_.Look(); }
  void Next() { ts_.Next(); }
  Status Expect(TokenKind kind, const std::string& what) { return ts_.Expect(kind, what); }
  Status ExpectOp(std::string_view op) { return ts_.ExpectOp(op); }
  Status ExpectName(std::string_view name) { return ts_.ExpectName(name); }
  Status ExpectBlockEnd() { return Expect(TokenKind::kBlockEnd, "'%}'"); }
  StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens,
                               const char* extra_end = nullptr) {
    return exprs_.ParseTuple(with_condexpr, explicit_parens, extra_end);
  }
  StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    return exprs_.ParseExpression(with_condexpr);
  }

  // Statements until a {% tag %} whose name is in `ends` (left unconsumed, its name in *end), or
  // the end of the template when `ends` is empty.
  Status ParseBody(const std::vector<std::string>& ends, Body* body, std::string* end) {
    TokenStream::Nest nest(&ts_);
    HOIST_RETURN_IF_ERROR(nest.Check(Cur().pos));
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokenKind::kEnd) {
        if (ends.empty()) return Status::Ok();
        return SyntaxError(t.pos, "the template ends where '" + ends.back() + "' was expected");
      }
      if (t.kind == TokenKind::kText) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = StmtKind::kText;
        stmt->pos = t.pos;
        stmt->text = t.text;
        body->push_back(std::move(stmt));
        Next();
        continue;
      }
      if (t.kind == TokenKind::kVariableBegin) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = StmtKind::kOutput;
        stmt->pos = t.pos;
        Next();
        HOIST_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(true, false));
        HOIST_RETURN_IF_ERROR(Expect(TokenKind::kVariableEnd, "'}}'"));
        body->push_back(std::move(stmt));
        continue;
      }
      if (t.kind != TokenKind::kBlockBegin) {
        return SyntaxError(t.pos, "unexpected " + Describe(t));
      }
      const Token& name = Look();
      if (name.kind != TokenKind::kName) {
        return SyntaxError(name.pos, "expected a statement name, found " + Describe(name));
      }
      if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
        *end = name.text;
        Next();  // the {%; the name is the caller's
        return Status::Ok();
      }
      const SourcePos pos = t.pos;
      Next();
      HOIST_ASSIGN_OR_RETURN(StmtPtr stmt, ParseStatement(pos));
      body->push_back(std::move(stmt));
    }
  }

  StatusOr<StmtPtr> ParseStatement(SourcePos pos) {
    const Token name = Cur();
    auto stmt = std::make_unique<Stmt>();
    stmt->pos = pos;
    if (name.text == "if") return ParseIf(std::move(stmt));
    if (name.text == "for") return ParseFor(std::move(stmt));
    if (name.text == "set") return ParseSet(std::move(stmt));
    if (name.text == "macro") return ParseMacro(std::move(stmt));
    if (name.text == "with") return ParseWith(std::move(stmt));
    if (name.text == "generation") {
      if (capture_depth_ > 0) {
        return Unsupported(name.pos, "a generation block inside a macro or a set block");
      }
      if (in_generation_) {
        return Unsupported(name.pos, "a generation block inside another generation block");
      }
      Next();
      HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
      stmt->kind = StmtKind::kGeneration;
      stmt->bodies.emplace_back();
      // The block's body renders apart from the loop around it, so break and continue cannot
      // reach that loop (as in Jinja, where the body is a function of its own).
      const int loops = loop_depth_;
      loop_depth_ = 0;
      in_generation_ = true;
      has_generation_ = true;
      Status body = ParseEnd({"endgeneration"}, &stmt->bodies.back());
      in_generation_ = false;
      loop_depth_ = loops;
      HOIST_RETURN_IF_ERROR(body);
      return stmt;
    }
    if (name.text == "break" || name.text == "continue") {
      if (loop_depth_ == 0) {
        return SyntaxError(name.pos, "'" + name.text + "' outside a for loop");
      }
      Next();
      HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
      stmt->kind = name.text == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      return stmt;
    }
    if (name.text == "print") {
      Next();
      stmt->kind = StmtKind::kOutput;
      HOIST_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(true, false));
      HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
      return stmt;
    }
    if (IsRefusedStatement(name.text)) {
      return Unsupported(name.pos, "the statement '" + name.text + "'");
    }
    if (name.text.rfind("end", 0) == 0 || name.text == "elif" || name.text == "else") {
      return SyntaxError(name.pos, "'" + name.text + "' without the statement it closes");
    }
    return Unsupported(name.pos, "the statement '" + name.text + "'");
  }

  // A body that ends with {% end %} (consumed, with its %}); `end` is the one closing name.
  Status ParseEnd(const std::vector<std::string>& ends, Body* body) {
    std::string found;
    HOIST_RETURN_IF_ERROR(ParseBody(ends, body, &found));
    Next();  // the closing name
    return ExpectBlockEnd();
  }

  StatusOr<StmtPtr> ParseIf(StmtPtr stmt) {
    stmt->kind = StmtKind::kIf;
    Next();  // if
    while (true) {
      HOIST_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, false));
      stmt->conditions.push_back(std::move(cond));
      HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
      stmt->bodies.emplace_back();
      std::string end;
      HOIST_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &stmt->bodies.back(), &end));
      Next();  // the name
      if (end == "elif") continue;
      if (end == "else") {
        HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
        stmt->bodies.emplace_back();
        HOIST_RETURN_IF_ERROR(ParseEnd({"endif"}, &stmt->bodies.back()));
        return stmt;
      }
      HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
      return stmt;
    }
  }

  // name, or name, name, ... (optionally in parentheses) for for and set.
  Status ParseTargets(std::vector<std::string>* targets) {
    const bool parens = IsOp(Cur(), "(");
    if (parens) Next();
    while (true) {
      if (Cur().kind != TokenKind::kName) {
        return SyntaxError(Cur().pos, "expected a variable name, found " + Describe(Cur()));
      }
      targets->push_back(Cur().text);
      Next();
      if (!IsOp(Cur(), ",")) break;
      Next();
      if (parens && IsOp(Cur(), ")")) break;
      if (!parens && Cur().kind != TokenKind::kName) break;
    }
    if (parens) HOIST_RETURN_IF_ERROR(ExpectOp(")"));
    return Status::Ok();
  }

  StatusOr<StmtPtr> ParseFor(StmtPtr stmt) {
    stmt->kind = StmtKind::kFor;
    Next();  // for
    HOIST_RETURN_IF_ERROR(ParseTargets(&stmt->targets));
    HOIST_RETURN_IF_ERROR(ExpectName("in"));
    HOIST_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(false, false, "recursive"));
    if (IsName(Cur(), "if")) {
      Next();
      HOIST_ASSIGN_OR_RETURN(stmt->filter, ParseExpression(true));
    }
    if (IsName(Cur(), "recursive")) return Unsupported(Cur().pos, "a recursive for loop");
    HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    stmt->bodies.emplace_back();
    std::string end;
    Status body = ParseBody({"endfor", "else"}, &stmt->bodies.back(), &end);
    --loop_depth_;
    HOIST_RETURN_IF_ERROR(body);
    Next();
    HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
    if (end == "else") {
      stmt->bodies.emplace_back();
      HOIST_RETURN_IF_ERROR(ParseEnd({"endfor"}, &stmt->bodies.back()));
    }
    return stmt;
  }

  StatusOr<StmtPtr> ParseSet(StmtPtr stmt) {
    Next();  // set
    if (Cur().kind == TokenKind::kName && IsOp(Look(), ".")) {
      stmt->targets.push_back(Cur().text);
      Next();
      Next();
      if (Cur().kind != TokenKind::kName) {
        return SyntaxError(Cur().pos, "expected an attribute name, found " + Describe(Cur()));
      }
      stmt->attr = Cur().text;
      Next();
    } else {
      HOIST_RETURN_IF_ERROR(ParseTargets(&stmt->targets));
    }
    if (IsOp(Cur(), "=")) {
      Next();
      stmt->kind = StmtKind::kSet;
      HOIST_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(true, false));
      HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
      return stmt;
    }
    if (IsOp(Cur(), "|")) return Unsupported(Cur().pos, "a filtered set block");
    if (!stmt->attr.empty() || stmt->targets.size() != 1) {
      return SyntaxError(Cur().pos, "a set block assigns one variable");
    }
    HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
    stmt->kind = StmtKind::kSetBlock;
    stmt->bodies.emplace_back();
    ++capture_depth_;
    Status body = ParseEnd({"endset"}, &stmt->bodies.back());
    --capture_depth_;
    HOIST_RETURN_IF_ERROR(body);
    return stmt;
  }

  StatusOr<StmtPtr> ParseMacro(StmtPtr stmt) {
    if (ts_.nesting() > 1)
      return Unsupported(Cur().pos, "a macro defined inside another statement");
    stmt->kind = StmtKind::kMacro;
    Next();  // macro
    auto macro = std::make_unique<Macro>();
    macro->pos = stmt->pos;
    if (Cur().kind != TokenKind::kName) {
      return SyntaxError(Cur().pos, "expected the macro's name, found " + Describe(Cur()));
    }
    macro->name = Cur().text;
    Next();
    HOIST_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(Cur(), ")")) {
      if (!macro->params.empty()) HOIST_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(Cur(), ")")) break;
      if (Cur().kind != TokenKind::kName) {
        return SyntaxError(Cur().pos, "expected a parameter name, found " + Describe(Cur()));
      }
      macro->params.push_back(Cur().text);
      Next();
      ExprPtr fallback;
      if (IsOp(Cur(), "=")) {
        Next();
        HOIST_ASSIGN_OR_RETURN(fallback, ParseExpression(true));
      }
      macro->defaults.push_back(std::move(fallback));
    }
    Next();  // )
    HOIST_RETURN_IF_ERROR(ExpectBlockEnd());
    ++capture_depth_;
    const int loops = loop_depth_;
    loop_depth_ = 0;
    Status body = ParseEnd({"endmacro"}, &macro->body);
    loop_depth_ = loops;
    --capture_depth_;
    HOIST_RETURN_IF_ERROR(body);
    stmt->macro = std::move(macro);
    return stmt;
  }

  StatusOr<StmtPtr> ParseWith(StmtPtr stmt) {
    stmt->kind = StmtKind::kWith;
    Next();  // with
    while (Cur().kind != TokenKind::kBlockEnd) {
      if (!stmt->targets.empty()) HOIST_RETURN_IF_ERROR(ExpectOp(","));
      if (Cur().kind != TokenKind::kName) {
        return SyntaxError(Cur().pos, "expected a variable name, found " + Describe(Cur()));
      }
      stmt->targets.push_back(Cur().text);
      Next();
      HOIST_RETURN_IF_ERROR(ExpectOp("="));
      HOIST_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      stmt->values.push_back(std::move(value));
    }
    Next();
    stmt->bodies.emplace_back();
    HOIST_RETURN_IF_ERROR(ParseEnd({"endwith"}, &stmt->bodies.back()));
    return stmt;
  }

  TokenStream ts_;
  std::set<std::string> macro_names_;
  ExprParser exprs_;
  int loop_depth_ = 0;
  int capture_depth_ = 0;
  bool in_generation_ = false;
  bool has_generation_ = false;  // some {% generation %} block was parsed
};

}  // namespace

StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source) {
  if (source.size() > kMaxTemplateBytes) {
    return ResourceExhaustedError("the template is " + std::to_string(source.size()) +
                                  " bytes, more than the " + std::to_string(kMaxTemplateBytes) +
                                  " a chat template may be");
  }
  auto tmpl = std::make_unique<Template>();
  tmpl->source = NormalizeTemplateSource(source);
  size_t at = 0;
  while (at < tmpl->source.size()) {
    const size_t start = at;
    const uint32_t c = NextCodePoint(tmpl->source, &at);
    if (at == start + 1 && c >= 0x80) {
      return InvalidArgumentError("the template is not valid UTF-8 (byte " + std::to_string(start) +
                                  ")");
    }
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(tmpl->source));
  Parser parser(std::move(tokens));
  HOIST_ASSIGN_OR_RETURN(tmpl->body, parser.Run());
  tmpl->has_generation = parser.has_generation();
  return tmpl;
}

}  // namespace hoist::runtime::jinja
