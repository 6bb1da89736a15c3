#include "runtime/interchange/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "runtime/interchange/jinja_builtins.h"

namespace hoist::runtime::jinja {
namespace {

// The global functions as values, so that `strftime_now is defined` holds as it does under
// transformers.
const Macro* BuiltinFunction(const std::string& name) {
  static const auto* table = [] {
    auto* t = new std::map<std::string, Macro>();
    for (const char* n : {"raise_exception", "strftime_now", "namespace", "range", "dict"}) {
      Macro& m = (*t)[n];
      m.name = n;
      m.builtin = true;
    }
    return t;
  }();
  const auto it = table->find(name);
  return it == table->end() ? nullptr : &it->second;
}

// Adds the position to an error that came from a builtin or an operator.
Status At(SourcePos pos, const Status& status) {
  if (status.ok()) return status;
  return Status(status.code(), Where(pos) + ": " + status.message());
}

// Variables of one frame: the template's top level, a loop iteration, a macro call, a with block.
struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* Find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it) {
        if (it->first == name) return &it->second;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value value) {
    for (auto& var : vars) {
      if (var.first == name) {
        var.second = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

bool IsInteger(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
}

Status BadOperands(const std::string& op, const Value& a, const Value& b) {
  return InvalidArgumentError("unsupported operand types for " + op + ": '" + TypeName(a) +
                              "' and '" + TypeName(b) + "'");
}

Status Overflow() { return InvalidArgumentError("the result does not fit a 64-bit integer"); }

// Python's arithmetic on two numbers (bools count as ints).
StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (IsInteger(a) && IsInteger(b) && op != "/") {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) return Overflow();
    } else if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) return Overflow();
    } else if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) return Overflow();
    } else if (op == "//" || op == "%") {
      if (y == 0) return InvalidArgumentError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return Overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      r = op == "//" ? q : m;
    } else if (op == "**") {
      if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      r = 1;
      for (int64_t base = x, e = y; e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return Overflow();
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) return Overflow();
      }
    }
    return Value::Int(r);
  }
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "/") {
    if (y == 0) return InvalidArgumentError("division by zero");
    return Value::Float(x / y);
  }
  if (op == "//" || op == "%") {
    // Python's float divmod.
    if (y == 0) return InvalidArgumentError("float division or modulo by zero");
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    if (op == "%") return Value::Float(mod);
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value::Float(floordiv);
  }
  return Value::Float(std::pow(x, y));  // **
}

class Evaluator : public CallContext {
 public:
  Evaluator(const RenderLimits& limits, const std::optional<std::tm>& now)
      : limits_(limits), now_(now) {}

  StatusOr<RenderOutput> Run(const Template& tmpl,
                             const std::vector<std::pair<std::string, Value>>& variables) {
    Scope globals;
    globals.vars = variables;
    Scope root;
    root.parent = &globals;
    root_ = &root;
    sink_ = &out_.text;
    Flow flow = Flow::kNormal;
    HOIST_RETURN_IF_ERROR(Exec(tmpl.body, &root, &flow));
    return std::move(out_);
  }

  Status Spend(size_t bytes) override {
    if (bytes > limits_.max_output_bytes) {
      return ResourceExhaustedError(
          "a value of " + std::to_string(bytes) + " bytes, more than the " +
          std::to_string(limits_.max_output_bytes) + " a chat template may make");
    }
    steps_ += static_cast<int64_t>(bytes / 32);
    return CheckSteps();
  }

  std::tm Now() override {
    if (now_) return *now_;
    const std::time_t t = std::time(nullptr);
    std::tm local{};
    localtime_r(&t, &local);
    return local;
  }

 private:
  // Bounds the evaluator's recursion.
  class Depth {
   public:
    explicit Depth(Evaluator* e) : e_(e) { ++e_->depth_; }
    ~Depth() { --e_->depth_; }
    Status Check(SourcePos pos) const {
      if (e_->depth_ > e_->limits_.max_recursion) {
        return ResourceExhaustedError(Where(pos) + ": the template recurses more than " +
                                      std::to_string(e_->limits_.max_recursion) +
                                      " levels deep (a macro that calls itself without end?)");
      }
      return Status::Ok();
    }

   private:
    Evaluator* e_;
  };

  Status CheckSteps() {
    if (steps_ > limits_.max_steps) {
      return ResourceExhaustedError("the template ran more than " +
                                    std::to_string(limits_.max_steps) +
                                    " steps (a loop that does not end?)");
    }
    return Status::Ok();
  }
  Status Step(SourcePos pos) {
    ++steps_;
    return At(pos, CheckSteps());
  }

  Status Emit(std::string_view text, SourcePos pos) {
    if (sink_->size() + text.size() > limits_.max_output_bytes) {
      return ResourceExhaustedError(Where(pos) + ": the output passes " +
                                    std::to_string(limits_.max_output_bytes) +
                                    " bytes, the most a chat template may render");
    }
    sink_->append(text);
    return At(pos, Spend(text.size()));
  }

  Value Lookup(const std::string& name, const Scope* scope) const {
    if (const Value* v = scope->Find(name)) return *v;
    if (const Macro* builtin = BuiltinFunction(name)) return Value::MakeMacro(builtin);
    return Value::Undefined("'" + name + "' is undefined");
  }

  Status Exec(const Body& body, Scope* scope, Flow* flow) {
    for (const StmtPtr& stmt : body) {
      HOIST_RETURN_IF_ERROR(ExecStmt(*stmt, scope, flow));
      if (*flow != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

  Status ExecStmt(const Stmt& stmt, Scope* scope, Flow* flow) {
    Depth depth(this);
    HOIST_RETURN_IF_ERROR(depth.Check(stmt.pos));
    HOIST_RETURN_IF_ERROR(Step(stmt.pos));
    switch (stmt.kind) {
      case StmtKind::kText: return Emit(stmt.text, stmt.pos);
      case StmtKind::kOutput: return ExecOutput(stmt, scope);
      case StmtKind::kIf: return ExecIf(stmt, scope, flow);
      case StmtKind::kFor: return ExecFor(stmt, scope);
      case StmtKind::kSet: return ExecSet(stmt, scope);
      case StmtKind::kSetBlock: return ExecSetBlock(stmt, scope);
      case StmtKind::kMacro:
        scope->Set(stmt.macro->name, Value::MakeMacro(stmt.macro.get()));
        return Status::Ok();
      case StmtKind::kBreak: *flow = Flow::kBreak; return Status::Ok();
      case StmtKind::kContinue: *flow = Flow::kContinue; return Status::Ok();
      case StmtKind::kGeneration: return ExecGeneration(stmt, scope);
      case StmtKind::kWith: return ExecWith(stmt, scope, flow);
    }
    return Status::Ok();
  }

  [[gnu::noinline]] Status ExecIf(const Stmt& stmt, Scope* scope, Flow* flow) {
    for (size_t i = 0; i < stmt.conditions.size(); ++i) {
      HOIST_ASSIGN_OR_RETURN(Value cond, Eval(*stmt.conditions[i], scope));
      if (cond.Truthy()) return Exec(stmt.bodies[i], scope, flow);
    }
    if (stmt.bodies.size() > stmt.conditions.size()) return Exec(stmt.bodies.back(), scope, flow);
    return Status::Ok();
  }

  [[gnu::noinline]] Status ExecOutput(const Stmt& stmt, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, scope));
    std::string text;
    HOIST_RETURN_IF_ERROR(At(stmt.expr->pos, AppendStr(v, &text)));
    return Emit(text, stmt.pos);
  }

  [[gnu::noinline]] Status ExecSet(const Stmt& stmt, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, scope));
    if (!stmt.attr.empty()) return SetAttribute(stmt, scope, std::move(v));
    return Assign(stmt.targets, std::move(v), scope, stmt.pos);
  }

  [[gnu::noinline]] Status ExecSetBlock(const Stmt& stmt, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(std::string text, Capture(stmt.bodies[0], scope));
    scope->Set(stmt.targets[0], Value::String(std::move(text)));
    return Status::Ok();
  }

  [[gnu::noinline]] Status ExecGeneration(const Stmt& stmt, Scope* scope) {
    const bool root = sink_ == &out_.text;
    const size_t begin = sink_->size();
    Flow inner = Flow::kNormal;
    HOIST_RETURN_IF_ERROR(Exec(stmt.bodies[0], scope, &inner));
    if (root) out_.generation_spans.emplace_back(begin, sink_->size());
    return Status::Ok();
  }

  [[gnu::noinline]] Status ExecWith(const Stmt& stmt, Scope* scope, Flow* flow) {
    Scope inner;
    inner.parent = scope;
    for (size_t i = 0; i < stmt.targets.size(); ++i) {
      HOIST_ASSIGN_OR_RETURN(Value v, Eval(*stmt.values[i], scope));
      inner.Set(stmt.targets[i], std::move(v));
    }
    return Exec(stmt.bodies[0], &inner, flow);
  }

  [[gnu::noinline]] Status SetAttribute(const Stmt& stmt, Scope* scope, Value v) {
    const Value target = Lookup(stmt.targets[0], scope);
    if (target.kind() != Value::Kind::kNamespace) {
      return InvalidArgumentError(Where(stmt.pos) + ": cannot assign the attribute '" + stmt.attr +
                                  "' of '" + stmt.targets[0] + "', which is not a namespace");
    }
    if (!stmt.attr.empty() && stmt.attr[0] == '_') {
      return InvalidArgumentError(Where(stmt.pos) +
                                  ": a namespace attribute may not start with "
                                  "'_': '" +
                                  stmt.attr + "'");
    }
    if (v.HoldsNamespace()) {
      return UnimplementedError(Where(stmt.pos) +
                                ": a namespace holding another namespace is not supported");
    }
    if (v.depth() > kMaxValueDepth) {
      return ResourceExhaustedError(Where(stmt.pos) + ": a value nests more than " +
                                    std::to_string(kMaxValueDepth) + " levels deep");
    }
    target.as_namespace().Set(stmt.attr, std::move(v));
    return Status::Ok();
  }

  // Binds one value to `targets`, unpacking it when there are several.
  Status Assign(const std::vector<std::string>& targets, Value v, Scope* scope, SourcePos pos) {
    if (targets.size() == 1) {
      scope->Set(targets[0], std::move(v));
      return Status::Ok();
    }
    if (!v.is_list() && !v.is_string()) {
      return InvalidArgumentError(Where(pos) + ": cannot unpack a " + TypeName(v) + " into " +
                                  std::to_string(targets.size()) + " variables");
    }
    StatusOr<std::vector<Value>> unpacked = Iterate(v);
    if (!unpacked.ok()) return At(pos, unpacked.status());
    std::vector<Value> items = std::move(unpacked).value();
    if (items.size() != targets.size()) {
      return InvalidArgumentError(Where(pos) + ": cannot unpack " + std::to_string(items.size()) +
                                  " values into " + std::to_string(targets.size()) + " variables");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->Set(targets[i], std::move(items[i]));
    return Status::Ok();
  }

  [[gnu::noinline]] Status ExecFor(const Stmt& stmt, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.expr, scope));
    StatusOr<std::vector<Value>> listed = Iterate(iterable);
    if (!listed.ok()) return At(stmt.expr->pos, listed.status());
    std::vector<Value> items = std::move(listed).value();
    if (stmt.filter != nullptr) {
      std::vector<Value> kept;
      for (Value& item : items) {
        HOIST_RETURN_IF_ERROR(Step(stmt.pos));
        Scope probe;
        probe.parent = scope;
        HOIST_RETURN_IF_ERROR(Assign(stmt.targets, item, &probe, stmt.pos));
        HOIST_ASSIGN_OR_RETURN(Value keep, Eval(*stmt.filter, &probe));
        if (keep.Truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    Status status;
    for (int64_t i = 0; i < length && status.ok(); ++i) {
      status = Step(stmt.pos);
      if (!status.ok()) break;
      Scope iteration;
      iteration.parent = scope;
      auto info = std::make_shared<LoopInfo>();
      info->index0 = i;
      info->length = length;
      info->depth0 = 0;  // loop.depth counts recursive loops only, which are refused
      if (i > 0) info->previous = items[static_cast<size_t>(i - 1)];
      if (i + 1 < length) info->next = items[static_cast<size_t>(i + 1)];
      status = Assign(stmt.targets, items[static_cast<size_t>(i)], &iteration, stmt.pos);
      if (!status.ok()) break;
      iteration.Set("loop", Value::MakeLoop(std::move(info)));
      Flow flow = Flow::kNormal;
      status = Exec(stmt.bodies[0], &iteration, &flow);
      if (flow == Flow::kBreak) break;
    }
    HOIST_RETURN_IF_ERROR(status);
    if (length == 0 && stmt.bodies.size() > 1) {
      Scope otherwise;
      otherwise.parent = scope;
      Flow flow = Flow::kNormal;
      return Exec(stmt.bodies[1], &otherwise, &flow);
    }
    return Status::Ok();
  }

  // Renders `body` into a string of its own (a set block or a macro's body).
  [[gnu::noinline]] StatusOr<std::string> Capture(const Body& body, Scope* scope) {
    std::string captured;
    std::string* outer = sink_;
    sink_ = &captured;
    Flow flow = Flow::kNormal;
    Status status = Exec(body, scope, &flow);
    sink_ = outer;
    HOIST_RETURN_IF_ERROR(status);
    return captured;
  }

  [[gnu::noinline]] StatusOr<Value> CallMacro(const Macro& macro, const CallArgs& args,
                                              SourcePos pos) {
    Depth depth(this);
    HOIST_RETURN_IF_ERROR(depth.Check(pos));
    if (args.positional.size() > macro.params.size()) {
      return InvalidArgumentError(Where(pos) + ": the macro '" + macro.name + "' takes " +
                                  std::to_string(macro.params.size()) + " arguments, not " +
                                  std::to_string(args.positional.size()));
    }
    Scope frame;
    frame.parent = root_;
    std::vector<bool> bound(macro.params.size(), false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      frame.Set(macro.params[i], args.positional[i]);
      bound[i] = true;
    }
    for (const auto& [key, value] : args.keyword) {
      const auto it = std::find(macro.params.begin(), macro.params.end(), key);
      if (it == macro.params.end()) {
        return InvalidArgumentError(Where(pos) + ": the macro '" + macro.name +
                                    "' has no parameter '" + key + "'");
      }
      frame.Set(key, value);
      bound[static_cast<size_t>(it - macro.params.begin())] = true;
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      if (bound[i]) continue;
      if (macro.defaults[i] != nullptr) {
        HOIST_ASSIGN_OR_RETURN(Value v, Eval(*macro.defaults[i], &frame));
        frame.Set(macro.params[i], std::move(v));
      } else {
        frame.Set(macro.params[i],
                  Value::Undefined("the parameter '" + macro.params[i] + "' of the macro '" +
                                   macro.name + "' was not given"));
      }
    }
    HOIST_ASSIGN_OR_RETURN(std::string text, Capture(macro.body, &frame));
    return Value::String(std::move(text));
  }

  StatusOr<CallArgs> EvalArgs(const Expr& e, Scope* scope) {
    CallArgs args;
    for (const ExprPtr& arg : e.args) {
      HOIST_ASSIGN_OR_RETURN(Value v, Eval(*arg, scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, arg] : e.kwargs) {
      HOIST_ASSIGN_OR_RETURN(Value v, Eval(*arg, scope));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  StatusOr<Value> Checked(SourcePos pos, StatusOr<Value> v) {
    if (!v.ok()) return At(pos, v.status());
    if (v->depth() > kMaxValueDepth) {
      return ResourceExhaustedError(Where(pos) + ": a value nests more than " +
                                    std::to_string(kMaxValueDepth) + " levels deep");
    }
    return v;
  }

  // Eval and ExecStmt recurse, so each keeps a small frame and leaves the work of every kind of
  // node to a function of its own, which the compiler is told not to fold back in.
  StatusOr<Value> Eval(const Expr& e, Scope* scope) {
    Depth depth(this);
    HOIST_RETURN_IF_ERROR(depth.Check(e.pos));
    HOIST_RETURN_IF_ERROR(Step(e.pos));
    switch (e.kind) {
      case ExprKind::kLiteral: return e.value;
      case ExprKind::kName: return Lookup(e.name, scope);
      case ExprKind::kList: return EvalList(e, scope);
      case ExprKind::kDict: return EvalDict(e, scope);
      case ExprKind::kGetAttr: return EvalGetAttr(e, scope);
      case ExprKind::kGetItem: return EvalGetItem(e, scope);
      case ExprKind::kSlice: return EvalSlice(e, scope);
      case ExprKind::kCall: return EvalCall(e, scope);
      case ExprKind::kFilter: return EvalFilter(e, scope);
      case ExprKind::kTest: return EvalTest(e, scope);
      case ExprKind::kUnary: return EvalUnary(e, scope);
      case ExprKind::kBinary: return EvalBinary(e, scope);
      case ExprKind::kCompare: return EvalCompare(e, scope);
      case ExprKind::kCondExpr: return EvalCondExpr(e, scope);
    }
    return Value();
  }

  [[gnu::noinline]] StatusOr<Value> EvalList(const Expr& e, Scope* scope) {
    std::vector<Value> items;
    items.reserve(e.operands.size());
    for (const ExprPtr& item : e.operands) {
      HOIST_ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
      items.push_back(std::move(v));
    }
    HOIST_RETURN_IF_ERROR(At(e.pos, Spend(items.size() * sizeof(Value))));
    return Checked(e.pos, Value::MakeList(std::move(items), e.tuple));
  }

  [[gnu::noinline]] StatusOr<Value> EvalDict(const Expr& e, Scope* scope) {
    std::vector<std::pair<std::string, Value>> entries;
    for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
      HOIST_ASSIGN_OR_RETURN(Value key, Eval(*e.operands[i], scope));
      HOIST_ASSIGN_OR_RETURN(Value value, Eval(*e.operands[i + 1], scope));
      if (!key.is_string()) {
        return UnimplementedError(Where(e.operands[i]->pos) +
                                  ": a dict key that is not a string is not supported");
      }
      bool replaced = false;
      for (auto& entry : entries) {
        if (entry.first == key.as_string()) {
          entry.second = value;
          replaced = true;
        }
      }
      if (!replaced) entries.emplace_back(key.as_string(), std::move(value));
    }
    HOIST_RETURN_IF_ERROR(At(e.pos, Spend(entries.size() * sizeof(Value))));
    return Checked(e.pos, Value::MakeMap(std::move(entries)));
  }

  [[gnu::noinline]] StatusOr<Value> EvalGetAttr(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
    return Checked(e.pos, GetAttribute(object, e.name));
  }

  [[gnu::noinline]] StatusOr<Value> EvalGetItem(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
    HOIST_ASSIGN_OR_RETURN(Value key, Eval(*e.operands[1], scope));
    return Checked(e.pos, GetItem(object, key));
  }

  [[gnu::noinline]] StatusOr<Value> EvalSlice(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
    Value parts[3] = {Value::None(), Value::None(), Value::None()};
    for (int i = 0; i < 3; ++i) {
      if (e.operands[i + 1] != nullptr) {
        HOIST_ASSIGN_OR_RETURN(parts[i], Eval(*e.operands[i + 1], scope));
      }
    }
    StatusOr<Value> sliced = GetSlice(object, parts[0], parts[1], parts[2]);
    if (sliced.ok() && sliced->is_string()) {
      HOIST_RETURN_IF_ERROR(At(e.pos, Spend(sliced->as_string().size())));
    } else if (sliced.ok() && sliced->is_list()) {
      HOIST_RETURN_IF_ERROR(At(e.pos, Spend(sliced->as_list().items.size() * sizeof(Value))));
    }
    return Checked(e.pos, std::move(sliced));
  }

  [[gnu::noinline]] StatusOr<Value> EvalFilter(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value operand, Eval(*e.operands[0], scope));
    HOIST_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
    return Checked(e.pos, ApplyFilter(e.name, operand, args, *this));
  }

  [[gnu::noinline]] StatusOr<Value> EvalTest(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value operand, Eval(*e.operands[0], scope));
    HOIST_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
    StatusOr<bool> passed = ApplyTest(e.name, operand, args, *this);
    if (!passed.ok()) return At(e.pos, passed.status());
    return Value::Bool(*passed != e.negated);
  }

  [[gnu::noinline]] StatusOr<Value> EvalCondExpr(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value test, Eval(*e.operands[0], scope));
    if (test.Truthy()) return Eval(*e.operands[1], scope);
    if (e.operands[2] == nullptr) {
      return Value::Undefined("the conditional expression had no else branch");
    }
    return Eval(*e.operands[2], scope);
  }

  [[gnu::noinline]] StatusOr<Value> EvalCall(const Expr& e, Scope* scope) {
    const Expr& callee = *e.operands[0];
    if (callee.kind == ExprKind::kGetAttr) {
      HOIST_ASSIGN_OR_RETURN(Value object, Eval(*callee.operands[0], scope));
      HOIST_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
      return Checked(e.pos, CallMethod(object, callee.name, args, *this));
    }
    const Value function = Lookup(callee.name, scope);
    HOIST_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
    if (function.is_undefined()) return At(e.pos, UndefinedError(function));
    if (function.kind() != Value::Kind::kMacro) {
      return InvalidArgumentError(Where(e.pos) + ": '" + TypeName(function) +
                                  "' object is not callable");
    }
    const Macro& macro = function.as_macro();
    if (!macro.builtin) return CallMacro(macro, args, e.pos);
    if (macro.name == "raise_exception") {
      std::string message;
      if (!args.positional.empty()) {
        HOIST_RETURN_IF_ERROR(At(e.pos, AppendStr(args.positional[0], &message)));
      }
      return InvalidArgumentError(Where(e.pos) +
                                  ": the template refuses this conversation: " + message);
    }
    return Checked(e.pos, CallFunction(macro.name, args, *this));
  }

  [[gnu::noinline]] StatusOr<Value> EvalUnary(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[0], scope));
    if (e.op == "not") return Value::Bool(!v.Truthy());
    if (v.is_undefined()) return At(e.pos, UndefinedError(v));
    if (!v.is_number()) {
      return InvalidArgumentError(Where(e.pos) + ": bad operand type for unary " + e.op + ": '" +
                                  TypeName(v) + "'");
    }
    if (e.op == "+") return v.kind() == Value::Kind::kBool ? Value::Int(v.as_int()) : v;
    if (v.kind() == Value::Kind::kFloat) return Value::Float(-v.as_float());
    if (v.as_int() == INT64_MIN) return At(e.pos, Overflow());
    return Value::Int(-v.as_int());
  }

  [[gnu::noinline]] StatusOr<Value> EvalBinary(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value a, Eval(*e.operands[0], scope));
    if (e.op == "and") return a.Truthy() ? Eval(*e.operands[1], scope) : a;
    if (e.op == "or") return a.Truthy() ? a : Eval(*e.operands[1], scope);
    HOIST_ASSIGN_OR_RETURN(Value b, Eval(*e.operands[1], scope));
    if (e.op == "~") {
      std::string text;
      HOIST_RETURN_IF_ERROR(At(e.pos, AppendStr(a, &text)));
      HOIST_RETURN_IF_ERROR(At(e.pos, AppendStr(b, &text)));
      HOIST_RETURN_IF_ERROR(At(e.pos, Spend(text.size())));
      return Value::String(std::move(text));
    }
    if (a.is_undefined()) return At(e.pos, UndefinedError(a));
    if (b.is_undefined()) return At(e.pos, UndefinedError(b));
    if (a.is_number() && b.is_number()) return Checked(e.pos, Arithmetic(e.op, a, b));
    if (e.op == "+") {
      if (a.is_string() && b.is_string()) {
        HOIST_RETURN_IF_ERROR(At(e.pos, Spend(a.as_string().size() + b.as_string().size())));
        return Value::String(a.as_string() + b.as_string());
      }
      if (a.is_sequence() && b.is_sequence() && a.as_list().tuple == b.as_list().tuple) {
        std::vector<Value> items = a.as_list().items;
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        HOIST_RETURN_IF_ERROR(At(e.pos, Spend(items.size() * sizeof(Value))));
        return Checked(e.pos, Value::MakeList(std::move(items), a.as_list().tuple));
      }
    }
    if (e.op == "*" && (IsInteger(a) || IsInteger(b)) &&
        (a.is_string() || b.is_string() || a.is_sequence() || b.is_sequence())) {
      const Value& seq = IsInteger(a) ? b : a;
      const int64_t times = std::max<int64_t>(0, IsInteger(a) ? a.as_int() : b.as_int());
      const size_t unit =
          seq.is_string() ? seq.as_string().size() : seq.as_list().items.size() * sizeof(Value);
      if (unit > 0 && static_cast<uint64_t>(times) > limits_.max_output_bytes / unit) {
        return At(e.pos, Spend(limits_.max_output_bytes + 1));
      }
      HOIST_RETURN_IF_ERROR(At(e.pos, Spend(unit * static_cast<size_t>(times))));
      if (seq.is_string()) {
        std::string out;
        out.reserve(unit * static_cast<size_t>(times));
        for (int64_t i = 0; i < times; ++i) out += seq.as_string();
        return Value::String(std::move(out));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < times; ++i) {
        items.insert(items.end(), seq.as_list().items.begin(), seq.as_list().items.end());
      }
      return Value::MakeList(std::move(items), seq.as_list().tuple);
    }
    if (e.op == "%" && a.is_string()) {
      return UnimplementedError(Where(e.pos) + ": string formatting with % is not supported");
    }
    return At(e.pos, BadOperands(e.op, a, b));
  }

  [[gnu::noinline]] StatusOr<Value> EvalCompare(const Expr& e, Scope* scope) {
    HOIST_ASSIGN_OR_RETURN(Value left, Eval(*e.operands[0], scope));
    for (size_t i = 0; i < e.ops.size(); ++i) {
      HOIST_ASSIGN_OR_RETURN(Value right, Eval(*e.operands[i + 1], scope));
      const std::string& op = e.ops[i];
      bool holds;
      if (op == "==") {
        holds = Equals(left, right);
      } else if (op == "!=") {
        holds = !Equals(left, right);
      } else if (op == "in" || op == "notin") {
        StatusOr<bool> in = Contains(right, left);
        if (!in.ok()) return At(e.pos, in.status());
        holds = *in == (op == "in");
      } else {
        if (left.is_undefined()) return At(e.pos, UndefinedError(left));
        if (right.is_undefined()) return At(e.pos, UndefinedError(right));
        StatusOr<int> order = Compare(left, right);
        if (!order.ok()) return At(e.pos, order.status());
        const int o = *order;
        if (o == 2) {
          holds = false;
        } else if (op == "<") {
          holds = o < 0;
        } else if (op == "<=") {
          holds = o <= 0;
        } else if (op == ">") {
          holds = o > 0;
        } else {
          holds = o >= 0;
        }
      }
      if (!holds) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  const RenderLimits& limits_;
  const std::optional<std::tm> now_;
  RenderOutput out_;
  std::string* sink_ = nullptr;
  Scope* root_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

StatusOr<RenderOutput> RenderTemplate(const Template& tmpl,
                                      const std::vector<std::pair<std::string, Value>>& variables,
                                      const std::optional<std::tm>& now,
                                      const RenderLimits& limits) {
  Evaluator evaluator(limits, now);
  return evaluator.Run(tmpl, variables);
}

}  // namespace hoist::runtime::jinja
