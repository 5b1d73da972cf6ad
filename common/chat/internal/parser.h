// Jinja parser: tokens → AST, with jinja2's grammar and operator precedence
// (lowest first): `x if c else y`, or, and, not, comparisons (== != < <= > >=
// in, not in; chained), + -, ~, * / // %, ** (left-assoc as in jinja2),
// unary - +, then postfix (.attr, [index], [a:b:c], call) and filters/tests
// (`|f(args)`, `is [not] t args`).
//
// Statements: if/elif/else, for (targets, `if` filter, else), set (plain,
// tuple, namespace attribute, block set with filters), macro, call,
// filter, with, do, break, continue, raw (lexer), generation (HF).
//
// Limits: expression trees deeper than kMaxExprDepth and statement nesting
// deeper than kMaxBlockDepth are syntax errors, so later recursion is
// bounded. Errors: InvalidArgument "template syntax error at line L,
// column C: ...". Thread-safe (pure).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "common/chat/internal/ast.h"
#include "common/chat/internal/lexer.h"

namespace moesplit::chat::internal {

inline constexpr int kMaxExprDepth = 96;
inline constexpr int kMaxBlockDepth = 64;

absl::StatusOr<Body> Parse(std::vector<Token> tokens);

}  // namespace moesplit::chat::internal
