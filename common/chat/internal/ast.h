// Jinja AST: expressions and statements produced by the parser and walked by
// the interpreter. Nodes are immutable after parsing and owned through
// unique_ptr by their parent; the root Body is owned by the Template.
// Every expression records its tree depth so that evaluation (and
// destruction) recursion is bounded by the parser's limit.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/chat/value.h"

namespace moesplit::chat::internal {

struct Pos {
  int line = 0;
  int column = 0;
};

enum class ExprKind : uint8_t {
  kLiteral, kName, kList, kTuple, kDict, kGetAttr, kGetItem, kSlice, kCall,
  kFilter, kTest, kNeg, kPos, kNot, kBinary, kAnd, kOr, kCompare, kCond,
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  Expr(ExprKind k, Pos p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  Pos pos;
  int depth = 1;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(Pos p, Value v) : Expr(ExprKind::kLiteral, p), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(Pos p, std::string n) : Expr(ExprKind::kName, p), name(std::move(n)) {}
  std::string name;
};

// kList, kTuple.
struct SeqExpr : Expr {
  SeqExpr(ExprKind k, Pos p) : Expr(k, p) {}
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(Pos p) : Expr(ExprKind::kDict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(Pos p, ExprPtr o, std::string n)
      : Expr(ExprKind::kGetAttr, p), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct GetItemExpr : Expr {
  GetItemExpr(Pos p, ExprPtr o, ExprPtr i)
      : Expr(ExprKind::kGetItem, p), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};

// object[start:stop:step]; omitted parts are null.
struct SliceExpr : Expr {
  explicit SliceExpr(Pos p) : Expr(ExprKind::kSlice, p) {}
  ExprPtr object, start, stop, step;
};

struct CallExpr : Expr {
  explicit CallExpr(Pos p) : Expr(ExprKind::kCall, p) {}
  ExprPtr callee;
  Arguments args;
};

struct FilterImpl;  // builtins.h
struct TestImpl;

// operand | name(args). operand is null inside `{% filter %}` / block-set
// filter chains, where the block's output is the input.
struct FilterExpr : Expr {
  explicit FilterExpr(Pos p) : Expr(ExprKind::kFilter, p) {}
  ExprPtr operand;
  std::string name;
  const FilterImpl* impl = nullptr;
  Arguments args;
};

struct TestExpr : Expr {
  explicit TestExpr(Pos p) : Expr(ExprKind::kTest, p) {}
  ExprPtr operand;
  std::string name;
  const TestImpl* impl = nullptr;
  Arguments args;
  bool negated = false;
};

// kNeg, kPos, kNot.
struct UnaryExpr : Expr {
  UnaryExpr(ExprKind k, Pos p, ExprPtr o) : Expr(k, p), operand(std::move(o)) {}
  ExprPtr operand;
};

// kBinary (op), kAnd, kOr.
struct BinaryExpr : Expr {
  BinaryExpr(ExprKind k, Pos p, BinOp o, ExprPtr l, ExprPtr r)
      : Expr(k, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinOp op;
  ExprPtr left, right;
};

// first op1 e1 op2 e2 ... (chained like Python).
struct CompareExpr : Expr {
  explicit CompareExpr(Pos p) : Expr(ExprKind::kCompare, p) {}
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
};

// then if cond else otherwise (otherwise may be null → Undefined).
struct CondExpr : Expr {
  explicit CondExpr(Pos p) : Expr(ExprKind::kCond, p) {}
  ExprPtr cond, then, otherwise;
};

// ------------------------------------------------------------------ statements

enum class StmtKind : uint8_t {
  kOutput, kPrint, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock,
  kWith, kBreak, kContinue, kDo, kBlock,
};

struct Stmt {
  Stmt(StmtKind k, Pos p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  Pos pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Assignment target: a name, `ns.attr`, or a tuple of targets.
struct Target {
  enum class Kind : uint8_t { kName, kAttr, kTuple };
  Kind kind = Kind::kName;
  Pos pos;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

struct OutputStmt : Stmt {
  OutputStmt(Pos p, std::string t) : Stmt(StmtKind::kOutput, p), text(std::move(t)) {}
  std::string text;
};

// {{ expr }} and {% do expr %} (kDo discards the value).
struct ExprStmt : Stmt {
  ExprStmt(StmtKind k, Pos p, ExprPtr e) : Stmt(k, p), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(Pos p) : Stmt(StmtKind::kIf, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(Pos p) : Stmt(StmtKind::kFor, p) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // `for x in y if cond`; may be null
  Body body;
  Body else_body;
};

struct SetStmt : Stmt {
  explicit SetStmt(Pos p) : Stmt(StmtKind::kSet, p) {}
  Target target;
  ExprPtr value;
};

// {% set x | filters %}body{% endset %} and {% filter f %}body{% endfilter %}.
struct BlockFilterStmt : Stmt {
  BlockFilterStmt(StmtKind k, Pos p) : Stmt(k, p) {}
  Target target;  // kSetBlock only
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(Pos p) : Stmt(StmtKind::kMacro, p) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
};

struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(Pos p) : Stmt(StmtKind::kCallBlock, p) {}
  std::unique_ptr<CallExpr> call;
  std::vector<std::pair<std::string, ExprPtr>> caller_params;
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(Pos p) : Stmt(StmtKind::kWith, p) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

// A plain nested body without a scope ({% generation %} of HF templates).
struct BlockStmt : Stmt {
  explicit BlockStmt(Pos p) : Stmt(StmtKind::kBlock, p) {}
  Body body;
};

}  // namespace moesplit::chat::internal
