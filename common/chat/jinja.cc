#include "common/chat/jinja.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/internal/interpreter.h"
#include "common/chat/internal/lexer.h"
#include "common/chat/internal/parser.h"

namespace moesplit::chat {
namespace internal {
struct ParsedTemplate {
  Body body;
};
}  // namespace internal

absl::StatusOr<JinjaTemplate> JinjaTemplate::Parse(std::string_view source,
                                                   const JinjaOptions& options) {
  if (source.size() > kMaxTemplateBytes) {
    return absl::InvalidArgumentError(absl::StrCat("template is ", source.size(),
                                                   " bytes; the limit is ", kMaxTemplateBytes));
  }
  internal::LexerOptions lex;
  lex.trim_blocks = options.trim_blocks;
  lex.lstrip_blocks = options.lstrip_blocks;
  lex.keep_trailing_newline = options.keep_trailing_newline;
  ASSIGN_OR_RETURN(std::vector<internal::Token> tokens, internal::Tokenize(source, lex));
  auto parsed = std::make_shared<internal::ParsedTemplate>();
  ASSIGN_OR_RETURN(parsed->body, internal::Parse(std::move(tokens)));
  return JinjaTemplate(std::move(parsed));
}

absl::StatusOr<std::string> JinjaTemplate::Render(const ValueDict& variables,
                                                  const RenderLimits& limits) const {
  return internal::Render(parsed_->body, variables, limits);
}

}  // namespace moesplit::chat
