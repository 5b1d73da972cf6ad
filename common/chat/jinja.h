// Jinja2 template engine for chat templates (HF transformers / llama.cpp
// dialect): parse once, render many times.
//
//   ASSIGN_OR_RETURN(JinjaTemplate t, JinjaTemplate::Parse(source));
//   ValueDict vars;
//   vars.Put("messages", ...);
//   ASSIGN_OR_RETURN(std::string out, t.Render(vars));
//
// Language: {{ }}, {% %}, {# #}, whitespace control (-/+), trim_blocks and
// lstrip_blocks (on by default, as HF and llama.cpp render chat templates),
// if/elif/else, for (loop.*, else, `if` filter, break/continue), set (incl.
// block set, tuple targets and namespace attributes), macro (defaults,
// varargs/kwargs, call blocks with caller()), filter blocks, with, do, raw,
// generation (HF), Python operators and literals, slicing, str/dict/list
// methods, the filters and tests listed in internal/builtins.h, and the
// globals range(), dict(), namespace(). Callers add their own globals (e.g.
// raise_exception) as callable Values among the variables. See
// internal/interpreter.h for scoping and Undefined semantics.
//
// Not supported: include/import/extends/block, recursive for loops,
// *args/**kwargs at call sites, cycler/joiner/lipsum, autoescape.
//
// Errors: InvalidArgument "template syntax error at line L, column C: ..."
// from Parse (also for unknown filters/tests), "template error at line L,
// column C: ..." from Render; ResourceExhausted when a RenderLimits bound
// is exceeded. No input, however malformed, crashes the engine: parser
// nesting, recursion, output size, list lengths and total work are bounded.
//
// Thread-safety: a parsed JinjaTemplate is immutable; Render may be called
// concurrently from many threads (copies share the parsed tree).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/chat/value.h"

namespace moesplit::chat {

struct JinjaOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

struct RenderLimits {
  size_t max_output_bytes = 16u << 20;  // also the size limit of any string value
  size_t max_items = 1u << 20;          // longest list / range()
  uint64_t max_steps = 10'000'000;      // statements + expressions + iterations
  int max_depth = 400;                  // nested evaluation frames (macro recursion)
};

// Largest template source Parse accepts.
inline constexpr size_t kMaxTemplateBytes = 4u << 20;

namespace internal {
struct ParsedTemplate;
}  // namespace internal

class JinjaTemplate {
 public:
  // InvalidArgument on a syntax error or a source larger than kMaxTemplateBytes.
  static absl::StatusOr<JinjaTemplate> Parse(std::string_view source,
                                             const JinjaOptions& options = {});

  // Renders with `variables` visible as top-level names.
  absl::StatusOr<std::string> Render(const ValueDict& variables,
                                     const RenderLimits& limits = {}) const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const internal::ParsedTemplate> parsed)
      : parsed_(std::move(parsed)) {}
  std::shared_ptr<const internal::ParsedTemplate> parsed_;
};

}  // namespace moesplit::chat
