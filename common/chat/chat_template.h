// ChatTemplate: renders a conversation into a prompt with a model's Jinja
// chat template (GGUF `tokenizer.chat_template`), the way llama.cpp and HF
// transformers do.
//
// Template variables (as llama.cpp passes them):
//   messages               the `messages` array, keys in the caller's order,
//                          except that tool_calls[].function.arguments given
//                          as a JSON string is passed parsed (an object), and
//                          a message whose content is null or absent gets
//                          content "" (both as llama.cpp does); arguments
//                          that are not valid JSON fail the render
//   add_generation_prompt  true/false when set in the options; when the
//                          option is nullopt the name is UNDEFINED in the
//                          template (`is defined` is false), not false
//   bos_token, eos_token   strings from the options
//   enable_thinking        bool (default true)
//   preserve_reasoning     options.preserve_reasoning (default true, as
//                          llama.cpp's server: --reasoning-preserve), also
//                          as preserve_thinking, and negated as
//                          clear_thinking, truncate_history_thinking and
//                          drop_thinking (GLM-4.7 renders every turn's
//                          reasoning when clear_thinking is false)
//   tools                  only when options.tools is a non-empty array
//   raise_exception(msg)   fails the render with InvalidArgument(msg)
//   strftime_now(fmt)      C strftime of the current local time, or of
//                          options.date_override ("YYYY-MM-DD" or
//                          "YYYY-MM-DD HH:MM:SS"), so tests are reproducible
//   date_string, datetime  the same date as "%d %b %Y" and "%b %d %Y"
//                          (llama.cpp's extra context; Llama 3.x reads
//                          date_string)
//   + every key of options.extra_context (overrides the above)
// The engine is configured like HF's: trim_blocks, lstrip_blocks, and one
// trailing newline of the template dropped.
// As llama.cpp's chat handling, Gemma 4's template (it writes
// '<|tool_call>call:') gets "<|turn>model\n" after its output when
// add_generation_prompt is true and the output ends with "<turn|>\n" (the
// template opens no model turn after content that followed tool results).
//
// Errors: Parse → InvalidArgument with line/column; Render →
// InvalidArgument (template runtime error, raise_exception, malformed
// messages/date) or ResourceExhausted (RenderLimits exceeded).
// Thread-safety: immutable after Parse; Render is safe to call concurrently.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/chat/jinja.h"
#include "nlohmann/json.hpp"

namespace moesplit::chat {

struct ChatTemplateOptions {
  std::optional<bool> add_generation_prompt;  // nullopt → undefined in the template
  std::string bos_token;
  std::string eos_token;
  bool enable_thinking = true;
  // Past turns' reasoning kept in the prompt (llama.cpp's default).
  bool preserve_reasoning = true;
  // Fixed date for strftime_now ("YYYY-MM-DD" or "YYYY-MM-DD HH:MM:SS");
  // empty → the real local clock.
  std::string date_override;
  nlohmann::ordered_json tools;          // array of tool definitions, or null
  nlohmann::ordered_json extra_context;  // object of extra variables, or null
  RenderLimits limits;
};

class ChatTemplate {
 public:
  // InvalidArgument with "template syntax error at line L, column C: ...".
  static absl::StatusOr<ChatTemplate> Parse(std::string source);

  // REQUIRES: messages is a JSON array (InvalidArgument otherwise).
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& messages,
                                     const ChatTemplateOptions& options) const;

  const std::string& source() const { return *source_; }

 private:
  ChatTemplate(std::shared_ptr<const std::string> source, JinjaTemplate tmpl)
      : source_(std::move(source)), template_(std::move(tmpl)) {}

  std::shared_ptr<const std::string> source_;
  JinjaTemplate template_;
};

// The ChatML template used when a model has no tokenizer.chat_template:
// "<|im_start|>{role}\n{content}<|im_end|>\n" per message (string content, or
// the `text` parts of a content list), then "<|im_start|>assistant\n" when
// add_generation_prompt.
const std::string& ChatMLFallbackTemplate();

}  // namespace moesplit::chat
