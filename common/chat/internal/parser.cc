#include "common/chat/internal/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/chat/internal/builtins.h"

namespace moesplit::chat::internal {
namespace {

// Names that end a bare test argument (`x is defined and y`).
bool IsKeyword(std::string_view s) {
  static constexpr std::string_view kWords[] = {"and", "or", "not", "if", "else", "in", "is",
                                                "recursive"};
  return std::find(std::begin(kWords), std::end(kWords), s) != std::end(kWords);
}

int MaxDepth(std::initializer_list<const Expr*> kids) {
  int d = 0;
  for (const Expr* k : kids) {
    if (k != nullptr) d = std::max(d, k->depth);
  }
  return d;
}

int ArgsDepth(const Arguments& a) {
  int d = 0;
  for (const auto& e : a.positional) d = std::max(d, e->depth);
  for (const auto& [n, e] : a.keyword) d = std::max(d, e->depth);
  return d;
}

// Depth of the deepest child of e.
int ChildDepth(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kList:
    case ExprKind::kTuple: {
      int d = 0;
      for (const auto& i : static_cast<const SeqExpr&>(e).items) d = std::max(d, i->depth);
      return d;
    }
    case ExprKind::kDict: {
      int d = 0;
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        d = std::max({d, k->depth, v->depth});
      }
      return d;
    }
    case ExprKind::kGetAttr: return static_cast<const GetAttrExpr&>(e).object->depth;
    case ExprKind::kGetItem: {
      const auto& g = static_cast<const GetItemExpr&>(e);
      return MaxDepth({g.object.get(), g.index.get()});
    }
    case ExprKind::kSlice: {
      const auto& s = static_cast<const SliceExpr&>(e);
      return MaxDepth({s.object.get(), s.start.get(), s.stop.get(), s.step.get()});
    }
    case ExprKind::kCall: {
      const auto& c = static_cast<const CallExpr&>(e);
      return std::max(c.callee->depth, ArgsDepth(c.args));
    }
    case ExprKind::kFilter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      return std::max(MaxDepth({f.operand.get()}), ArgsDepth(f.args));
    }
    case ExprKind::kTest: {
      const auto& t = static_cast<const TestExpr&>(e);
      return std::max(t.operand->depth, ArgsDepth(t.args));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos:
    case ExprKind::kNot: return static_cast<const UnaryExpr&>(e).operand->depth;
    case ExprKind::kBinary:
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      return MaxDepth({b.left.get(), b.right.get()});
    }
    case ExprKind::kCompare: {
      const auto& c = static_cast<const CompareExpr&>(e);
      int d = c.first->depth;
      for (const auto& [op, x] : c.rest) d = std::max(d, x->depth);
      return d;
    }
    case ExprKind::kCond: {
      const auto& c = static_cast<const CondExpr&>(e);
      return MaxDepth({c.cond.get(), c.then.get(), c.otherwise.get()});
    }
    default: return 0;
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  absl::StatusOr<Body> ParseTemplate() {
    ASSIGN_OR_RETURN(Body body, ParseBody({}, "", Pos{}));
    return body;
  }

 private:
  // ---------------------------------------------------------------- helpers
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void Advance() { if (pos_ + 1 < toks_.size()) ++pos_; }
  static Pos PosOf(const Token& t) { return Pos{t.line, t.column}; }

  bool IsOp(std::string_view op) const { return Cur().type == TokenType::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().type == TokenType::kName && Cur().text == n; }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "end of statement block '%}'";
      case TokenType::kVarEnd: return "end of print statement '}}'";
      case TokenType::kData: return "template data";
      case TokenType::kString: return "string literal";
      case TokenType::kInt:
      case TokenType::kFloat: return absl::StrCat("number ", AbslView(t.text));
      default: return absl::StrCat("'", AbslView(t.text), "'");
    }
  }

  absl::Status ErrorAt(const Token& t, std::string_view message) const {
    return SyntaxError(t.line, t.column, message);
  }
  absl::Status Unexpected(std::string_view expected) const {
    return ErrorAt(Cur(), absl::StrCat("expected ", AbslView(expected), ", got ", Describe(Cur())));
  }

  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) return Unexpected(absl::StrCat("'", AbslView(op), "'"));
    Advance();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) return Unexpected("end of statement block '%}'");
    Advance();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) return Unexpected("a name");
    std::string n = Cur().text;
    Advance();
    return n;
  }

  // Sets e's depth and enforces the limit.
  absl::StatusOr<ExprPtr> Finish(ExprPtr e) {
    e->depth = 1 + ChildDepth(*e);
    if (e->depth > kMaxExprDepth) {
      return SyntaxError(e->pos.line, e->pos.column, "expression is nested too deeply");
    }
    return e;
  }

  // RAII recursion guard for the recursive-descent functions.
  class Nest {
   public:
    explicit Nest(Parser* p) : p_(p) { ++p_->nesting_; }
    ~Nest() { --p_->nesting_; }
    absl::Status Check() const {
      if (p_->nesting_ > kMaxExprDepth) return p_->ErrorAt(p_->Cur(), "expression is nested too deeply");
      return absl::OkStatus();
    }
   private:
    Parser* p_;
  };

  // ---------------------------------------------------------------- bodies
  // Parses statements until a block tag named in end_tags (left unconsumed,
  // positioned at its '{%') or the end of input (an error when end_tags is
  // non-empty).
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> end_tags,
                                 std::string_view block, Pos opened) {
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == TokenType::kEof) {
        if (end_tags.size() == 0) return body;
        std::vector<std::string> names;
        for (auto n : end_tags) names.push_back(absl::StrCat("'", AbslView(n), "'"));
        return ErrorAt(t, absl::StrCat("unexpected end of template; expected ",
                                       absl::StrJoin(names, " or "), " to close the '",
                                       AbslView(block), "' block opened at line ", opened.line,
                                       ", column ", opened.column));
      }
      if (t.type == TokenType::kData) {
        body.push_back(std::make_unique<OutputStmt>(PosOf(t), t.text));
        Advance();
        continue;
      }
      if (t.type == TokenType::kVarBegin) {
        const Pos p = PosOf(t);
        Advance();
        ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, false));
        if (Cur().type != TokenType::kVarEnd) return Unexpected("end of print statement '}}'");
        Advance();
        body.push_back(std::make_unique<ExprStmt>(StmtKind::kPrint, p, std::move(e)));
        continue;
      }
      if (t.type != TokenType::kBlockBegin) return Unexpected("template data or a tag");
      const Token& name = Peek();
      if (name.type == TokenType::kName &&
          std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end()) {
        return body;
      }
      ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
      if (s != nullptr) body.push_back(std::move(s));
    }
  }

  // Consumes `{% name` (the end tag that ParseBody stopped at).
  absl::StatusOr<std::string> TakeEndTag() {
    Advance();  // {%
    return ExpectName();
  }

  absl::Status CloseBlock() {
    ASSIGN_OR_RETURN(std::string unused, TakeEndTag());
    (void)unused;
    return ExpectBlockEnd();
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    const Token& begin = Cur();
    const Pos p = PosOf(begin);
    Advance();
    if (Cur().type != TokenType::kName) return Unexpected("a tag name");
    const std::string tag = Cur().text;
    const Token tag_token = Cur();
    Advance();
    if (++block_depth_ > kMaxBlockDepth) return ErrorAt(tag_token, "blocks are nested too deeply");
    absl::StatusOr<StmtPtr> s = ParseTag(tag, tag_token, p);
    --block_depth_;
    return s;
  }

  absl::StatusOr<StmtPtr> ParseTag(const std::string& tag, const Token& tag_token, Pos p) {
    if (tag == "if") return ParseIf(p);
    if (tag == "for") return ParseFor(p);
    if (tag == "set") return ParseSet(p);
    if (tag == "macro") return ParseMacro(p);
    if (tag == "call") return ParseCallBlock(p);
    if (tag == "filter") return ParseFilterBlock(p);
    if (tag == "with") return ParseWith(p);
    if (tag == "generation") {
      auto s = std::make_unique<BlockStmt>(p);
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(s->body, ParseBody({"endgeneration"}, "generation", p));
      RETURN_IF_ERROR(CloseBlock());
      return StmtPtr(std::move(s));
    }
    if (tag == "do") {
      ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, false));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return StmtPtr(std::make_unique<ExprStmt>(StmtKind::kDo, p, std::move(e)));
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) {
        return ErrorAt(tag_token, absl::StrCat("'", AbslView(tag), "' outside of a for loop"));
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      return StmtPtr(std::make_unique<Stmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, p));
    }
    static constexpr std::string_view kEnds[] = {
        "endif", "elif", "else", "endfor", "endset", "endmacro", "endcall", "endfilter",
        "endwith", "endgeneration", "endraw"};
    if (std::find(std::begin(kEnds), std::end(kEnds), tag) != std::end(kEnds)) {
      return ErrorAt(tag_token, absl::StrCat("unexpected '", AbslView(tag),
                                             "' (no open block it could close)"));
    }
    static constexpr std::string_view kUnsupported[] = {
        "include", "import", "from", "extends", "block", "autoescape", "trans"};
    if (std::find(std::begin(kUnsupported), std::end(kUnsupported), tag) != std::end(kUnsupported)) {
      return ErrorAt(tag_token, absl::StrCat("unsupported tag '", AbslView(tag), "'"));
    }
    return ErrorAt(tag_token, absl::StrCat("unknown tag '", AbslView(tag), "'"));
  }

  absl::StatusOr<StmtPtr> ParseIf(Pos p) {
    auto s = std::make_unique<IfStmt>(p);
    ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, false));
    RETURN_IF_ERROR(ExpectBlockEnd());
    while (true) {
      ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, "if", p));
      s->branches.emplace_back(std::move(cond), std::move(body));
      ASSIGN_OR_RETURN(std::string end, TakeEndTag());
      if (end == "elif") {
        ASSIGN_OR_RETURN(cond, ParseTuple(false, false));
        RETURN_IF_ERROR(ExpectBlockEnd());
        continue;
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      if (end == "else") {
        ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}, "if", p));
        RETURN_IF_ERROR(CloseBlock());
      }
      return StmtPtr(std::move(s));
    }
  }

  absl::StatusOr<StmtPtr> ParseFor(Pos p) {
    auto s = std::make_unique<ForStmt>(p);
    ASSIGN_OR_RETURN(s->target, ParseTarget(false));
    if (!IsName("in")) return Unexpected("'in'");
    Advance();
    ASSIGN_OR_RETURN(s->iter, ParseTuple(false, false, "recursive"));
    if (IsName("if")) {
      Advance();
      ASSIGN_OR_RETURN(s->filter, ParseExpression(true));
    }
    if (IsName("recursive")) return ErrorAt(Cur(), "recursive for loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    absl::StatusOr<Body> body = ParseBody({"endfor", "else"}, "for", p);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    ASSIGN_OR_RETURN(std::string end, TakeEndTag());
    RETURN_IF_ERROR(ExpectBlockEnd());
    if (end == "else") {
      ASSIGN_OR_RETURN(s->else_body, ParseBody({"endfor"}, "for", p));
      RETURN_IF_ERROR(CloseBlock());
    }
    return StmtPtr(std::move(s));
  }

  absl::StatusOr<StmtPtr> ParseSet(Pos p) {
    ASSIGN_OR_RETURN(Target target, ParseTarget(true));
    if (IsOp("=")) {
      Advance();
      auto s = std::make_unique<SetStmt>(p);
      s->target = std::move(target);
      ASSIGN_OR_RETURN(s->value, ParseTuple(true, false));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return StmtPtr(std::move(s));
    }
    auto s = std::make_unique<BlockFilterStmt>(StmtKind::kSetBlock, p);
    s->target = std::move(target);
    while (IsOp("|")) {
      Advance();
      ASSIGN_OR_RETURN(auto f, ParseFilterCall(nullptr));
      s->filters.push_back(std::move(f));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, ParseBody({"endset"}, "set", p));
    RETURN_IF_ERROR(CloseBlock());
    return StmtPtr(std::move(s));
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock(Pos p) {
    auto s = std::make_unique<BlockFilterStmt>(StmtKind::kFilterBlock, p);
    do {
      if (IsOp("|")) Advance();
      ASSIGN_OR_RETURN(auto f, ParseFilterCall(nullptr));
      s->filters.push_back(std::move(f));
    } while (IsOp("|"));
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, ParseBody({"endfilter"}, "filter", p));
    RETURN_IF_ERROR(CloseBlock());
    return StmtPtr(std::move(s));
  }

  // (name [= default], ...)
  absl::StatusOr<std::vector<std::pair<std::string, ExprPtr>>> ParseParams() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      ExprPtr def;
      if (IsOp("=")) {
        Advance();
        ASSIGN_OR_RETURN(def, ParseExpression(true));
      } else if (!params.empty() && params.back().second != nullptr) {
        return ErrorAt(Cur(), "non-default argument follows default argument");
      }
      params.emplace_back(std::move(name), std::move(def));
    }
    Advance();
    return params;
  }

  absl::StatusOr<StmtPtr> ParseMacro(Pos p) {
    auto s = std::make_unique<MacroStmt>(p);
    ASSIGN_OR_RETURN(s->name, ExpectName());
    ASSIGN_OR_RETURN(s->params, ParseParams());
    RETURN_IF_ERROR(ExpectBlockEnd());
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    absl::StatusOr<Body> body = ParseBody({"endmacro"}, "macro", p);
    loop_depth_ = saved_loops;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    RETURN_IF_ERROR(CloseBlock());
    return StmtPtr(std::move(s));
  }

  absl::StatusOr<StmtPtr> ParseCallBlock(Pos p) {
    auto s = std::make_unique<CallBlockStmt>(p);
    if (IsOp("(")) {
      ASSIGN_OR_RETURN(s->caller_params, ParseParams());
    }
    const Token& at = Cur();
    ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
    if (e->kind != ExprKind::kCall) return ErrorAt(at, "expected a macro call after 'call'");
    s->call.reset(static_cast<CallExpr*>(e.release()));
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, ParseBody({"endcall"}, "call", p));
    RETURN_IF_ERROR(CloseBlock());
    return StmtPtr(std::move(s));
  }

  absl::StatusOr<StmtPtr> ParseWith(Pos p) {
    auto s = std::make_unique<WithStmt>(p);
    while (Cur().type != TokenType::kBlockEnd) {
      if (!s->assignments.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(Target t, ParseTarget(false));
      RETURN_IF_ERROR(ExpectOp("="));
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
      s->assignments.emplace_back(std::move(t), std::move(e));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    ASSIGN_OR_RETURN(s->body, ParseBody({"endwith"}, "with", p));
    RETURN_IF_ERROR(CloseBlock());
    return StmtPtr(std::move(s));
  }

  // name | ns.attr (with_namespace) | (t, ...) | t, t, ...
  absl::StatusOr<Target> ParseTargetAtom(bool with_namespace) {
    Target t;
    t.pos = PosOf(Cur());
    if (IsOp("(")) {
      Advance();
      t.kind = Target::Kind::kTuple;
      while (!IsOp(")")) {
        if (!t.items.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
        ASSIGN_OR_RETURN(Target inner, ParseTargetAtom(false));
        t.items.push_back(std::move(inner));
      }
      Advance();
      return t;
    }
    ASSIGN_OR_RETURN(t.name, ExpectName());
    if (IsKeyword(t.name) || t.name == "true" || t.name == "false" || t.name == "none") {
      return SyntaxError(t.pos.line, t.pos.column, absl::StrCat("cannot assign to '", AbslView(t.name), "'"));
    }
    if (with_namespace && IsOp(".")) {
      Advance();
      t.kind = Target::Kind::kAttr;
      ASSIGN_OR_RETURN(t.attr, ExpectName());
    }
    return t;
  }

  absl::StatusOr<Target> ParseTarget(bool with_namespace) {
    ASSIGN_OR_RETURN(Target first, ParseTargetAtom(with_namespace));
    if (!IsOp(",")) return first;
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.pos = first.pos;
    tuple.items.push_back(std::move(first));
    while (IsOp(",")) {
      Advance();
      if (IsOp("=") || IsName("in")) break;
      ASSIGN_OR_RETURN(Target t, ParseTargetAtom(false));
      tuple.items.push_back(std::move(t));
    }
    return tuple;
  }

  // ---------------------------------------------------------------- expressions
  bool IsTupleEnd(std::string_view extra_end) const {
    const Token& t = Cur();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof) {
      return true;
    }
    if (t.type == TokenType::kOp && t.text == ")") return true;
    return !extra_end.empty() && t.type == TokenType::kName && t.text == extra_end;
  }

  // expr or expr, expr, ... (a tuple); `()` only with explicit parentheses.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens,
                                     std::string_view extra_end = "") {
    const Pos p = PosOf(Cur());
    auto tuple = std::make_unique<SeqExpr>(ExprKind::kTuple, p);
    bool is_tuple = false;
    while (true) {
      if (!tuple->items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
      tuple->items.push_back(std::move(e));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!tuple->items.empty()) return std::move(tuple->items[0]);
      if (!explicit_parens) return Unexpected("an expression");
    }
    return Finish(std::move(tuple));
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    Nest nest(this);
    RETURN_IF_ERROR(nest.Check());
    ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    if (!with_condexpr) return e;
    while (IsName("if")) {
      auto c = std::make_unique<CondExpr>(PosOf(Cur()));
      Advance();
      c->then = std::move(e);
      ASSIGN_OR_RETURN(c->cond, ParseOr());
      if (IsName("else")) {
        Advance();
        ASSIGN_OR_RETURN(c->otherwise, ParseExpression(true));
      }
      ASSIGN_OR_RETURN(e, Finish(std::move(c)));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const Pos p = PosOf(Cur());
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      ASSIGN_OR_RETURN(left, Finish(std::make_unique<BinaryExpr>(ExprKind::kOr, p, BinOp::kAdd,
                                                                 std::move(left), std::move(right))));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const Pos p = PosOf(Cur());
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      ASSIGN_OR_RETURN(left, Finish(std::make_unique<BinaryExpr>(ExprKind::kAnd, p, BinOp::kAdd,
                                                                 std::move(left), std::move(right))));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      Nest nest(this);
      RETURN_IF_ERROR(nest.Check());
      const Pos p = PosOf(Cur());
      Advance();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      return Finish(std::make_unique<UnaryExpr>(ExprKind::kNot, p, std::move(operand)));
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      std::optional<CmpOp> op;
      const Pos p = PosOf(Cur());
      if (Cur().type == TokenType::kOp) {
        const std::string& t = Cur().text;
        if (t == "==") op = CmpOp::kEq;
        else if (t == "!=") op = CmpOp::kNe;
        else if (t == "<") op = CmpOp::kLt;
        else if (t == "<=") op = CmpOp::kLe;
        else if (t == ">") op = CmpOp::kGt;
        else if (t == ">=") op = CmpOp::kGe;
        if (op) Advance();
      } else if (IsName("in")) {
        op = CmpOp::kIn;
        Advance();
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
        op = CmpOp::kNotIn;
        Advance();
        Advance();
      }
      if (!op) break;
      if (!cmp) {
        cmp = std::make_unique<CompareExpr>(p);
        cmp->first = std::move(first);
      }
      ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
      cmp->rest.emplace_back(*op, std::move(rhs));
    }
    if (!cmp) return first;
    return Finish(std::move(cmp));
  }

  // Left-associative binary levels.
  using SubParser = absl::StatusOr<ExprPtr> (Parser::*)();
  absl::StatusOr<ExprPtr> ParseBinaryLevel(SubParser next,
                                           std::initializer_list<std::pair<std::string_view, BinOp>> ops) {
    ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (Cur().type == TokenType::kOp) {
      auto it = std::find_if(ops.begin(), ops.end(),
                             [&](const auto& o) { return o.first == Cur().text; });
      if (it == ops.end()) break;
      const Pos p = PosOf(Cur());
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      ASSIGN_OR_RETURN(left, Finish(std::make_unique<BinaryExpr>(ExprKind::kBinary, p, it->second,
                                                                 std::move(left), std::move(right))));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    return ParseBinaryLevel(&Parser::ParseConcat, {{"+", BinOp::kAdd}, {"-", BinOp::kSub}});
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    return ParseBinaryLevel(&Parser::ParseMath2, {{"~", BinOp::kConcat}});
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseBinaryLevel(&Parser::ParsePow, {{"*", BinOp::kMul}, {"/", BinOp::kDiv},
                                                {"//", BinOp::kFloorDiv}, {"%", BinOp::kMod}});
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    return ParseBinaryLevel(&Parser::ParseUnaryFiltered, {{"**", BinOp::kPow}});
  }
  absl::StatusOr<ExprPtr> ParseUnaryFiltered() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Nest nest(this);
    RETURN_IF_ERROR(nest.Check());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const ExprKind k = IsOp("-") ? ExprKind::kNeg : ExprKind::kPos;
      const Pos p = PosOf(Cur());
      Advance();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      ASSIGN_OR_RETURN(node, Finish(std::make_unique<UnaryExpr>(k, p, std::move(operand))));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    const Pos p = PosOf(t);
    switch (t.type) {
      case TokenType::kName: {
        const std::string& n = t.text;
        Value lit;
        bool is_lit = true;
        if (n == "true" || n == "True") lit = Value(true);
        else if (n == "false" || n == "False") lit = Value(false);
        else if (n == "none" || n == "None") lit = Value::None();
        else is_lit = false;
        ExprPtr e = is_lit ? ExprPtr(std::make_unique<LiteralExpr>(p, std::move(lit)))
                           : ExprPtr(std::make_unique<NameExpr>(p, n));
        Advance();
        return e;
      }
      case TokenType::kString: {
        std::string s;
        while (Cur().type == TokenType::kString) {  // adjacent literals concatenate
          s += Cur().text;
          Advance();
        }
        return ExprPtr(std::make_unique<LiteralExpr>(p, Value(std::move(s))));
      }
      case TokenType::kInt: {
        Advance();
        return ExprPtr(std::make_unique<LiteralExpr>(p, Value(t.int_value)));
      }
      case TokenType::kFloat: {
        Advance();
        return ExprPtr(std::make_unique<LiteralExpr>(p, Value(t.float_value)));
      }
      case TokenType::kOp:
        if (t.text == "(") {
          Advance();
          ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, true));
          RETURN_IF_ERROR(ExpectOp(")"));
          return e;
        }
        if (t.text == "[") return ParseList();
        if (t.text == "{") return ParseDict();
        break;
      default: break;
    }
    return Unexpected("an expression");
  }

  absl::StatusOr<ExprPtr> ParseList() {
    auto l = std::make_unique<SeqExpr>(ExprKind::kList, PosOf(Cur()));
    Advance();
    while (!IsOp("]")) {
      if (!l->items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("]")) break;
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
      l->items.push_back(std::move(e));
    }
    Advance();
    return Finish(std::move(l));
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    auto d = std::make_unique<DictExpr>(PosOf(Cur()));
    Advance();
    while (!IsOp("}")) {
      if (!d->items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("}")) break;
      ASSIGN_OR_RETURN(ExprPtr k, ParseExpression(true));
      RETURN_IF_ERROR(ExpectOp(":"));
      ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
      d->items.emplace_back(std::move(k), std::move(v));
    }
    Advance();
    return Finish(std::move(d));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const Pos p = PosOf(Cur());
        Advance();
        if (Cur().type == TokenType::kName) {
          ASSIGN_OR_RETURN(node, Finish(std::make_unique<GetAttrExpr>(p, std::move(node), Cur().text)));
          Advance();
        } else if (Cur().type == TokenType::kInt) {
          auto idx = std::make_unique<LiteralExpr>(PosOf(Cur()), Value(Cur().int_value));
          Advance();
          ASSIGN_OR_RETURN(node, Finish(std::make_unique<GetItemExpr>(p, std::move(node), std::move(idx))));
        } else {
          return Unexpected("an attribute name");
        }
      } else if (IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const Pos p = PosOf(Cur());
    Advance();  // [
    ExprPtr start;
    if (!IsOp(":")) {
      ASSIGN_OR_RETURN(start, ParseExpression(true));
      if (IsOp("]")) {
        Advance();
        return Finish(std::make_unique<GetItemExpr>(p, std::move(node), std::move(start)));
      }
      if (!IsOp(":")) return Unexpected("']' or ':'");
    }
    auto s = std::make_unique<SliceExpr>(p);
    s->object = std::move(node);
    s->start = std::move(start);
    Advance();  // first ':'
    if (!IsOp("]") && !IsOp(":")) {
      ASSIGN_OR_RETURN(s->stop, ParseExpression(true));
    }
    if (IsOp(":")) {
      Advance();
      if (!IsOp("]")) {
        ASSIGN_OR_RETURN(s->step, ParseExpression(true));
      }
    }
    RETURN_IF_ERROR(ExpectOp("]"));
    return Finish(std::move(s));
  }

  absl::StatusOr<Arguments> ParseArgs() {
    Arguments args;
    Advance();  // (
    while (!IsOp(")")) {
      if (!args.positional.empty() || !args.keyword.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return ErrorAt(Cur(), "*args / **kwargs in calls are not supported");
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().text == "=") {
        std::string name = Cur().text;
        Advance();
        Advance();
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        args.keyword.emplace_back(std::move(name), std::move(v));
      } else {
        if (!args.keyword.empty()) return ErrorAt(Cur(), "positional argument follows keyword argument");
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        args.positional.push_back(std::move(v));
      }
    }
    Advance();  // )
    return args;
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    auto c = std::make_unique<CallExpr>(callee->pos);
    c->callee = std::move(callee);
    ASSIGN_OR_RETURN(c->args, ParseArgs());
    return Finish(std::move(c));
  }

  // name[.name][(args)] after '|'; operand may be null (filter blocks).
  absl::StatusOr<std::unique_ptr<FilterExpr>> ParseFilterCall(ExprPtr operand) {
    auto f = std::make_unique<FilterExpr>(PosOf(Cur()));
    const Token& at = Cur();
    ASSIGN_OR_RETURN(f->name, ExpectName());
    f->impl = FindFilter(f->name);
    if (f->impl == nullptr) return ErrorAt(at, absl::StrCat("unknown filter '", AbslView(f->name), "'"));
    f->operand = std::move(operand);
    if (IsOp("(")) {
      ASSIGN_OR_RETURN(f->args, ParseArgs());
    }
    f->depth = 1 + ChildDepth(*f);
    if (f->depth > kMaxExprDepth) return ErrorAt(at, "expression is nested too deeply");
    return f;
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr operand) {
    auto t = std::make_unique<TestExpr>(PosOf(Cur()));
    Advance();  // is
    if (IsName("not")) {
      t->negated = true;
      Advance();
    }
    const Token& at = Cur();
    ASSIGN_OR_RETURN(t->name, ExpectName());
    t->impl = FindTest(t->name);
    if (t->impl == nullptr) return ErrorAt(at, absl::StrCat("unknown test '", AbslView(t->name), "'"));
    t->operand = std::move(operand);
    const Token& c = Cur();
    if (IsOp("(")) {
      ASSIGN_OR_RETURN(t->args, ParseArgs());
    } else if ((c.type == TokenType::kName && !IsKeyword(c.text)) || c.type == TokenType::kString ||
               c.type == TokenType::kInt || c.type == TokenType::kFloat || IsOp("[") || IsOp("{")) {
      ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      t->args.positional.push_back(std::move(arg));
    }
    return Finish(std::move(t));
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        Advance();
        ASSIGN_OR_RETURN(auto f, ParseFilterCall(std::move(node)));
        node = std::move(f);
      } else if (IsName("is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(std::vector<Token> tokens) {
  Parser parser(std::move(tokens));
  return parser.ParseTemplate();
}

}  // namespace moesplit::chat::internal
