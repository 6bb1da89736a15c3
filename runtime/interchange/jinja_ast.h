// The syntax tree of a parsed chat template: expressions and statements, each with the line and
// column it starts at for errors. Built by the parser (runtime/interchange/jinja_parser.h), read by
// the evaluator (runtime/interchange/jinja_eval.h); immutable once built, so one tree serves
// concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/interchange/jinja_value.h"

namespace hoist::runtime::jinja {

struct SourcePos {
  int line = 1;
  int column = 1;
};

// "line L:C", the form every error about a template uses.
std::string Where(SourcePos pos);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // operands: the items (a tuple when tuple is set)
  kDict,      // operands: key, value, key, value, ...
  kGetAttr,   // operands[0].name
  kGetItem,   // operands[0][operands[1]]
  kSlice,     // operands[0][operands[1]:operands[2]:operands[3]], each of the three may be null
  kCall,      // operands[0](args, kwargs); operands[0] is a kName or a kGetAttr (a method)
  kFilter,    // operands[0] | name(args, kwargs)
  kTest,      // operands[0] is [not] name(args)
  kUnary,     // op operands[0], op "-", "+" or "not"
  kBinary,    // operands[0] op operands[1], op + - * / // % ** ~ and or in notin
  kCompare,   // operands[0] ops[0] operands[1] ops[1] ... (chained)
  kCondExpr,  // operands[1] if operands[0] else operands[2] (null: undefined)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  SourcePos pos;
  Value value;
  std::string name;
  std::string op;
  bool tuple = false;
  bool negated = false;
  int depth = 1;  // how deeply the tree under this node nests
  std::vector<ExprPtr> operands;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // if conditions[0] bodies[0] elif conditions[1] bodies[1] ... [else bodies.back()]
  kFor,       // for targets in expr [if filter] bodies[0] [else bodies[1]]
  kSet,       // set targets = expr, or set object.attr = expr (attr set)
  kSetBlock,  // set targets[0] %} bodies[0] {% endset
  kMacro,     // macro name(params) bodies[0]
  kBreak,
  kContinue,
  kGeneration,  // generation bodies[0] endgeneration
  kWith,        // with targets[i] = values[i] bodies[0] endwith
};

struct Macro {
  std::string name;
  bool builtin =
      false;  // one of the global functions (runtime/interchange/jinja_builtins.h), no body
  SourcePos pos;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per parameter, null where none
  Body body;
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace: targets[0].attr
  std::vector<ExprPtr> conditions;
  std::vector<ExprPtr> values;
  std::vector<Body> bodies;
  std::unique_ptr<Macro> macro;
};

struct Template {
  Body body;
  std::string source;           // the normalized source the positions point into
  bool has_generation = false;  // whether it has a {% generation %} block
};

}  // namespace hoist::runtime::jinja
