// Jinja lexer: template source → flat token stream (jinja2's lexer design).
//
// Whitespace handling follows jinja2 exactly:
//   - "\r\n" and "\r" become "\n"; one trailing newline of the source is
//     dropped unless keep_trailing_newline.
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`,
//     `-#}` strip all whitespace after it.
//   - trim_blocks: the first newline after `%}` / `#}` is removed (not
//     after `}}`); `+%}` disables it for that tag.
//   - lstrip_blocks: spaces/tabs from the start of a line up to `{%` / `{#`
//     are removed; `{%+` disables it.
//   - `{% raw %}…{% endraw %}` becomes one data token.
// Comments produce no tokens. Errors are InvalidArgument with
// "template syntax error at line L, column C: ...". Thread-safe (pure).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moesplit::chat::internal {

enum class TokenType : uint8_t {
  kData,        // literal template text (text = the bytes)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (text)
  kString,      // string literal (text = unescaped value)
  kInt,         // integer literal (int_value)
  kFloat,       // float literal (float_value)
  kOp,          // operator or punctuation (text)
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// The last token is always kEof.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options);

// "template syntax error at line L, column C: <message>".
absl::Status SyntaxError(int line, int column, std::string_view message);

}  // namespace moesplit::chat::internal
