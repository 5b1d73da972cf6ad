#include "common/chat/internal/interpreter.h"

#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/internal/builtins.h"
#include "common/chat/internal/operators.h"

namespace moesplit::chat::internal {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

struct Scope {
  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}
  const Value* Lookup(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(AbslView(name));
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
  absl::flat_hash_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

absl::Status Annotate(const absl::Status& s, Pos pos) {
  if (s.ok() || absl::StartsWith(s.message(), "template ")) return s;
  return absl::Status(s.code(), absl::StrCat("template error at line ", pos.line, ", column ",
                                             pos.column, ": ", s.message()));
}

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits)
      : limits_(limits), ctx_(limits.max_output_bytes, limits.max_items, limits.max_steps) {}

  absl::StatusOr<std::string> Run(const Body& body, const ValueDict& variables) {
    auto root = std::make_shared<Scope>(nullptr);
    ValueDict globals;
    AddGlobals(&ctx_, &globals);
    for (const auto& [k, v] : globals.entries()) root->vars[k.as_string()] = v;
    auto top = std::make_shared<Scope>(root);
    for (const auto& [k, v] : variables.entries()) {
      if (k.is_string()) top->vars[k.as_string()] = v;
    }
    std::string out;
    ASSIGN_OR_RETURN(Flow flow, ExecBody(body, top, &out));
    (void)flow;
    return out;
  }

 private:
  // Counts nested Exec/Eval frames; bounds native recursion.
  class DepthGuard {
   public:
    explicit DepthGuard(Interpreter* in) : in_(in) { ++in_->depth_; }
    ~DepthGuard() { --in_->depth_; }
    absl::Status Check() const {
      if (in_->depth_ <= in_->limits_.max_depth) return absl::OkStatus();
      return absl::ResourceExhaustedError(absl::StrCat(
          "template recursion is deeper than the limit of ", in_->limits_.max_depth, " frames"));
    }
   private:
    Interpreter* in_;
  };

  absl::Status Append(std::string* out, std::string_view s) {
    if (out->size() + s.size() > limits_.max_output_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "template output exceeds the limit of ", limits_.max_output_bytes, " bytes"));
    }
    out->append(s.data(), s.size());
    return absl::OkStatus();
  }

  // ---------------------------------------------------------------- statements

  absl::StatusOr<Flow> ExecBody(const Body& body, const ScopePtr& scope, std::string* out) {
    for (const StmtPtr& s : body) {
      ASSIGN_OR_RETURN(Flow f, Exec(*s, scope, out));
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> Exec(const Stmt& s, const ScopePtr& scope, std::string* out) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    RETURN_IF_ERROR(ctx_.Step());
    absl::StatusOr<Flow> r = ExecInner(s, scope, out);
    if (!r.ok()) return Annotate(r.status(), s.pos);
    return r;
  }

  absl::StatusOr<Flow> ExecInner(const Stmt& s, const ScopePtr& scope, std::string* out) {
    switch (s.kind) {
      case StmtKind::kOutput:
        RETURN_IF_ERROR(Append(out, static_cast<const OutputStmt&>(s).text));
        return Flow::kNormal;
      case StmtKind::kPrint: {
        ASSIGN_OR_RETURN(Value v, Eval(*static_cast<const ExprStmt&>(s).expr, *scope));
        RETURN_IF_ERROR(Append(out, v.Str()));
        return Flow::kNormal;
      }
      case StmtKind::kDo: {
        ASSIGN_OR_RETURN(Value v, Eval(*static_cast<const ExprStmt&>(s).expr, *scope));
        (void)v;
        return Flow::kNormal;
      }
      case StmtKind::kIf: return ExecIf(static_cast<const IfStmt&>(s), scope, out);
      case StmtKind::kFor: return ExecFor(static_cast<const ForStmt&>(s), scope, out);
      case StmtKind::kSet: {
        const auto& set = static_cast<const SetStmt&>(s);
        ASSIGN_OR_RETURN(Value v, Eval(*set.value, *scope));
        RETURN_IF_ERROR(Assign(set.target, std::move(v), *scope));
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock:
      case StmtKind::kFilterBlock: return ExecBlockFilter(static_cast<const BlockFilterStmt&>(s), scope, out);
      case StmtKind::kMacro: {
        const auto& m = static_cast<const MacroStmt&>(s);
        scope->vars[m.name] = MakeMacro(m.name, m.params, m.body, scope);
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock: return ExecCallBlock(static_cast<const CallBlockStmt&>(s), scope, out);
      case StmtKind::kWith: {
        const auto& w = static_cast<const WithStmt&>(s);
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, expr] : w.assignments) {
          ASSIGN_OR_RETURN(Value v, Eval(*expr, *inner));
          RETURN_IF_ERROR(Assign(target, std::move(v), *inner));
        }
        return ExecBody(w.body, inner, out);
      }
      case StmtKind::kBlock: return ExecBody(static_cast<const BlockStmt&>(s).body, scope, out);
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
    }
    return absl::InternalError("unknown statement");
  }

  absl::StatusOr<Flow> ExecIf(const IfStmt& s, const ScopePtr& scope, std::string* out) {
    for (const auto& [cond, body] : s.branches) {
      ASSIGN_OR_RETURN(Value c, Eval(*cond, *scope));
      if (c.Truthy()) return ExecBody(body, scope, out);
    }
    return ExecBody(s.else_body, scope, out);
  }

  // The `loop` object of one for statement. Like jinja2's LoopContext it is
  // one object updated in place per iteration.
  class LoopObject {
   public:
    explicit LoopObject(const std::vector<Value>& items)
        : items_(items), value_(Value::Dict(DictKind::kLoop)), current_(std::make_shared<size_t>(0)) {
      ValueDict& d = value_.dict();
      for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "previtem",
                              "nextitem"}) {
        d.Put(key, Value());
      }
      d.Put("length", Value(static_cast<int64_t>(items.size())));
      d.Put("depth", Value(1));
      d.Put("depth0", Value(0));
      std::shared_ptr<size_t> current = current_;
      d.Put("cycle", Value::Function("cycle", [current](CallArgs& a) -> absl::StatusOr<Value> {
              if (a.positional.empty()) return absl::InvalidArgumentError("TypeError: no items for cycling given");
              return a.positional[*current % a.positional.size()];
            }));
    }

    const Value& At(size_t i) {
      *current_ = i;
      const int64_t n = static_cast<int64_t>(items_.size());
      const int64_t idx = static_cast<int64_t>(i);
      ValueDict& d = value_.dict();
      d.MutableValueAt(0) = Value(idx + 1);
      d.MutableValueAt(1) = Value(idx);
      d.MutableValueAt(2) = Value(n - idx);
      d.MutableValueAt(3) = Value(n - idx - 1);
      d.MutableValueAt(4) = Value(i == 0);
      d.MutableValueAt(5) = Value(idx == n - 1);
      d.MutableValueAt(6) = i > 0 ? items_[i - 1] : Value::Undefined("loop.previtem");
      d.MutableValueAt(7) = idx + 1 < n ? items_[i + 1] : Value::Undefined("loop.nextitem");
      return value_;
    }

   private:
    const std::vector<Value>& items_;
    Value value_;
    std::shared_ptr<size_t> current_;
  };

  absl::StatusOr<Flow> ExecFor(const ForStmt& f, const ScopePtr& scope, std::string* out) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*f.iter, *scope));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
    if (f.filter != nullptr) {
      std::vector<Value> kept;
      for (Value& item : items) {
        RETURN_IF_ERROR(ctx_.Step());
        auto probe = std::make_shared<Scope>(scope);
        RETURN_IF_ERROR(Assign(f.target, item, *probe));
        ASSIGN_OR_RETURN(Value keep, Eval(*f.filter, *probe));
        if (keep.Truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      ASSIGN_OR_RETURN(Flow fl, ExecBody(f.else_body, std::make_shared<Scope>(scope), out));
      (void)fl;
      return Flow::kNormal;
    }
    LoopObject loop(items);
    for (size_t i = 0; i < items.size(); ++i) {
      RETURN_IF_ERROR(ctx_.Step());
      auto iter_scope = std::make_shared<Scope>(scope);
      RETURN_IF_ERROR(Assign(f.target, items[i], *iter_scope));
      iter_scope->vars["loop"] = loop.At(i);
      ASSIGN_OR_RETURN(Flow fl, ExecBody(f.body, iter_scope, out));
      if (fl == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecBlockFilter(const BlockFilterStmt& s, const ScopePtr& scope, std::string* out) {
    std::string buf;
    ASSIGN_OR_RETURN(Flow flow, ExecBody(s.body, scope, &buf));
    Value v(std::move(buf));
    for (const auto& f : s.filters) {
      ASSIGN_OR_RETURN(v, ApplyFilter(*f, std::move(v), *scope));
    }
    if (s.kind == StmtKind::kSetBlock) {
      RETURN_IF_ERROR(Assign(s.target, std::move(v), *scope));
    } else {
      RETURN_IF_ERROR(Append(out, v.Str()));
    }
    return flow;
  }

  absl::StatusOr<Flow> ExecCallBlock(const CallBlockStmt& s, const ScopePtr& scope, std::string* out) {
    Value caller = MakeMacro("caller", s.caller_params, s.body, scope);
    ASSIGN_OR_RETURN(Value callee, Eval(*s.call->callee, *scope));
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(s.call->args, *scope));
    args.keyword.emplace_back("caller", std::move(caller));
    ASSIGN_OR_RETURN(Value result, Invoke(callee, args));
    RETURN_IF_ERROR(Append(out, result.Str()));
    return Flow::kNormal;
  }

  absl::Status Assign(const Target& t, Value v, Scope& scope) {
    switch (t.kind) {
      case Target::Kind::kName:
        scope.vars[t.name] = std::move(v);
        return absl::OkStatus();
      case Target::Kind::kAttr: {
        const Value* ns = scope.Lookup(t.name);
        if (ns == nullptr) return UndefinedError(Value::Undefined(t.name));
        if (!ns->is_dict() || ns->dict().kind() != DictKind::kNamespace) {
          return absl::InvalidArgumentError(absl::StrCat(
              "cannot assign attribute '", AbslView(t.attr), "' on non-namespace object '",
              AbslView(t.name), "' (", ns->TypeName(), ")"));
        }
        ns->dict().Put(t.attr, std::move(v));
        return absl::OkStatus();
      }
      case Target::Kind::kTuple: {
        ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
        if (items.size() != t.items.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "ValueError: ", items.size() < t.items.size() ? "not enough" : "too many",
              " values to unpack (expected ", t.items.size(), ", got ", items.size(), ")"));
        }
        for (size_t i = 0; i < items.size(); ++i) RETURN_IF_ERROR(Assign(t.items[i], std::move(items[i]), scope));
        return absl::OkStatus();
      }
    }
    return absl::InternalError("bad target");
  }

  // ---------------------------------------------------------------- macros

  Value MakeMacro(const std::string& name, const std::vector<std::pair<std::string, ExprPtr>>& params,
                  const Body& body, const ScopePtr& scope) {
    std::weak_ptr<Scope> weak = scope;
    const auto* p = &params;
    const auto* b = &body;
    return Value::Function(name, [this, name, p, b, weak](CallArgs& args) {
      return CallMacro(name, *p, *b, weak, args);
    });
  }

  absl::StatusOr<Value> CallMacro(const std::string& name,
                                  const std::vector<std::pair<std::string, ExprPtr>>& params,
                                  const Body& body, const std::weak_ptr<Scope>& weak, CallArgs& args) {
    ScopePtr parent = weak.lock();
    if (parent == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "macro '", AbslView(name), "' was called after the block that defined it had ended"));
    }
    auto scope = std::make_shared<Scope>(parent);
    std::vector<bool> used(args.keyword.size(), false);
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& [pname, def] = params[i];
      Value v;
      bool have = i < args.positional.size();
      if (have) v = args.positional[i];
      for (size_t k = 0; k < args.keyword.size(); ++k) {
        if (args.keyword[k].first != pname) continue;
        if (have) {
          return absl::InvalidArgumentError(absl::StrCat(
              "TypeError: macro '", AbslView(name), "' got multiple values for argument '", AbslView(pname), "'"));
        }
        v = args.keyword[k].second;
        have = true;
        used[k] = true;
      }
      if (!have) {
        if (def != nullptr) {
          ASSIGN_OR_RETURN(v, Eval(*def, *scope));
        } else {
          v = Value::Undefined(pname);
        }
      }
      scope->vars[pname] = std::move(v);
    }
    std::vector<Value> varargs;
    for (size_t i = params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
    scope->vars["varargs"] = Value::Tuple(std::move(varargs));
    Value kwargs = Value::Dict();
    for (size_t k = 0; k < args.keyword.size(); ++k) {
      if (used[k]) continue;
      if (args.keyword[k].first == "caller") {
        scope->vars["caller"] = args.keyword[k].second;
      } else {
        kwargs.dict().Put(args.keyword[k].first, args.keyword[k].second);
      }
    }
    scope->vars["kwargs"] = std::move(kwargs);
    std::string out;
    ASSIGN_OR_RETURN(Flow flow, ExecBody(body, scope, &out));
    (void)flow;
    return Value(std::move(out));
  }

  absl::StatusOr<Value> Invoke(const Value& callee, CallArgs& args) {
    if (callee.is_callable()) return callee.callable().fn(args);
    if (callee.is_undefined()) return UndefinedError(callee);
    return absl::InvalidArgumentError(absl::StrCat("TypeError: '", callee.TypeName(), "' object is not callable"));
  }

  // ---------------------------------------------------------------- expressions

  absl::StatusOr<CallArgs> EvalArgs(const Arguments& a, Scope& scope) {
    CallArgs args;
    for (const ExprPtr& e : a.positional) {
      ASSIGN_OR_RETURN(Value v, Eval(*e, scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [name, e] : a.keyword) {
      ASSIGN_OR_RETURN(Value v, Eval(*e, scope));
      args.keyword.emplace_back(name, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> ApplyFilter(const FilterExpr& f, Value input, Scope& scope) {
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(f.args, scope));
    absl::StatusOr<Value> r = f.impl->fn(ctx_, input, args);
    if (!r.ok()) return Annotate(r.status(), f.pos);
    return r;
  }

  absl::StatusOr<Value> Eval(const Expr& e, Scope& scope) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    RETURN_IF_ERROR(ctx_.Step());
    absl::StatusOr<Value> r = EvalInner(e, scope);
    if (!r.ok()) return Annotate(r.status(), e.pos);
    return r;
  }

  absl::StatusOr<Value> EvalInner(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case ExprKind::kLiteral: return static_cast<const LiteralExpr&>(e).value;
      case ExprKind::kName: {
        const auto& n = static_cast<const NameExpr&>(e);
        const Value* v = scope.Lookup(n.name);
        return v != nullptr ? *v : Value::Undefined(n.name);
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& item : static_cast<const SeqExpr&>(e).items) {
          ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
          items.push_back(std::move(v));
        }
        return e.kind == ExprKind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
      }
      case ExprKind::kDict: {
        Value d = Value::Dict();
        for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
          ASSIGN_OR_RETURN(Value key, Eval(*k, scope));
          ASSIGN_OR_RETURN(Value val, Eval(*v, scope));
          RETURN_IF_ERROR(d.dict().Set(std::move(key), std::move(val)));
        }
        return d;
      }
      case ExprKind::kGetAttr: {
        const auto& g = static_cast<const GetAttrExpr&>(e);
        ASSIGN_OR_RETURN(Value obj, Eval(*g.object, scope));
        return GetAttribute(&ctx_, obj, g.name);
      }
      case ExprKind::kGetItem: {
        const auto& g = static_cast<const GetItemExpr&>(e);
        ASSIGN_OR_RETURN(Value obj, Eval(*g.object, scope));
        ASSIGN_OR_RETURN(Value key, Eval(*g.index, scope));
        return GetItem(&ctx_, obj, key);
      }
      case ExprKind::kSlice: return EvalSlice(static_cast<const SliceExpr&>(e), scope);
      case ExprKind::kCall: {
        const auto& c = static_cast<const CallExpr&>(e);
        ASSIGN_OR_RETURN(Value callee, Eval(*c.callee, scope));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(c.args, scope));
        return Invoke(callee, args);
      }
      case ExprKind::kFilter: {
        const auto& f = static_cast<const FilterExpr&>(e);
        ASSIGN_OR_RETURN(Value input, Eval(*f.operand, scope));
        return ApplyFilter(f, std::move(input), scope);
      }
      case ExprKind::kTest: {
        const auto& t = static_cast<const TestExpr&>(e);
        ASSIGN_OR_RETURN(Value input, Eval(*t.operand, scope));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(t.args, scope));
        ASSIGN_OR_RETURN(bool r, t.impl->fn(ctx_, input, args));
        return Value(r != t.negated);
      }
      default: return EvalOperator(e, scope);
    }
  }

  absl::StatusOr<Value> EvalSlice(const SliceExpr& s, Scope& scope) {
    ASSIGN_OR_RETURN(Value obj, Eval(*s.object, scope));
    Value parts[3];
    const Expr* exprs[3] = {s.start.get(), s.stop.get(), s.step.get()};
    for (int i = 0; i < 3; ++i) {
      if (exprs[i] != nullptr) {
        ASSIGN_OR_RETURN(parts[i], Eval(*exprs[i], scope));
      }
    }
    return Slice(obj, parts[0], parts[1], parts[2]);
  }

  absl::StatusOr<Value> EvalOperator(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case ExprKind::kNeg:
      case ExprKind::kPos:
      case ExprKind::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*static_cast<const UnaryExpr&>(e).operand, scope));
        if (e.kind == ExprKind::kNot) return Value(!v.Truthy());
        return e.kind == ExprKind::kNeg ? Negate(v) : UnaryPlus(v);
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        const auto& b = static_cast<const BinaryExpr&>(e);
        ASSIGN_OR_RETURN(Value left, Eval(*b.left, scope));
        if (left.Truthy() == (e.kind == ExprKind::kOr)) return left;
        return Eval(*b.right, scope);
      }
      case ExprKind::kBinary: {
        const auto& b = static_cast<const BinaryExpr&>(e);
        ASSIGN_OR_RETURN(Value left, Eval(*b.left, scope));
        ASSIGN_OR_RETURN(Value right, Eval(*b.right, scope));
        return BinaryOp(b.op, left, right, ctx_);
      }
      case ExprKind::kCompare: {
        const auto& c = static_cast<const CompareExpr&>(e);
        ASSIGN_OR_RETURN(Value left, Eval(*c.first, scope));
        for (const auto& [op, rhs] : c.rest) {
          ASSIGN_OR_RETURN(Value right, Eval(*rhs, scope));
          ASSIGN_OR_RETURN(bool ok, Compare(op, left, right));
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::kCond: {
        const auto& c = static_cast<const CondExpr&>(e);
        ASSIGN_OR_RETURN(Value cond, Eval(*c.cond, scope));
        if (cond.Truthy()) return Eval(*c.then, scope);
        if (c.otherwise == nullptr) return Value::Undefined("");
        return Eval(*c.otherwise, scope);
      }
      default: return absl::InternalError("unknown expression");
    }
  }

  RenderLimits limits_;
  EvalContext ctx_;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<std::string> Render(const Body& body, const ValueDict& variables,
                                   const RenderLimits& limits) {
  Interpreter interpreter(limits);
  return interpreter.Run(body, variables);
}

}  // namespace moesplit::chat::internal
