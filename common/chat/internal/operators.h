// Python semantics of the Jinja operators over Values: arithmetic (int64
// with overflow checks, float), string/list concatenation and repetition,
// comparisons, `in`, `~`, and printf-style `%` formatting. Errors are
// InvalidArgument with Python's TypeError/ZeroDivisionError wording; an
// Undefined operand gives "'name' is undefined" like jinja2. Sizes of
// produced strings/lists are checked against the EvalContext limit.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/chat/internal/ast.h"
#include "common/chat/internal/builtins.h"
#include "common/chat/value.h"

namespace moesplit::chat::internal {

absl::StatusOr<Value> BinaryOp(BinOp op, const Value& a, const Value& b, EvalContext& ctx);
absl::StatusOr<Value> Negate(const Value& a);
absl::StatusOr<Value> UnaryPlus(const Value& a);
absl::StatusOr<bool> Compare(CmpOp op, const Value& a, const Value& b);
// Python `item in container`; Undefined container → false.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// Python `fmt % args` (args: a tuple for several values). Supports
// %s %r %d %i %u %f %F %e %E %g %G %x %X %o %c %% with flags, width, precision.
absl::StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args,
                                          EvalContext& ctx);
// jinja2's message for using an Undefined: "'name' is undefined".
absl::Status UndefinedError(const Value& v);

}  // namespace moesplit::chat::internal
