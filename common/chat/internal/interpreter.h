// Tree-walking interpreter for the Jinja AST.
//
// Scoping follows jinja2: the template's top level is one scope (over the
// caller's variables, over the globals range/dict/namespace); every for-loop
// iteration, macro call, `with` and call block gets a fresh child scope, so
// `set` inside them does not leak out (use namespace() for that); `if` and
// block bodies share their enclosing scope. Macros resolve free names in the
// scope they were defined in, at call time.
//
// Undefined follows jinja2's default Undefined, except that attributes and
// items of an Undefined are Undefined too (chainable) rather than an error:
// printing gives "", iteration is empty, `is defined` is false, arithmetic
// and ordering comparisons fail with "'name' is undefined".
//
// Runtime errors are InvalidArgument "template error at line L, column C:
// ..." (the innermost location); exceeding a RenderLimits bound is
// ResourceExhausted. Thread-safe: Render keeps all state on its own stack.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/chat/internal/ast.h"
#include "common/chat/jinja.h"
#include "common/chat/value.h"

namespace moesplit::chat::internal {

// Renders `body` with `variables` (name → value) visible at the top level.
absl::StatusOr<std::string> Render(const Body& body, const ValueDict& variables,
                                   const RenderLimits& limits);

}  // namespace moesplit::chat::internal
