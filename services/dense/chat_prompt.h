// ChatPrompt: OpenAI-style chat messages -> the model's prompt text, with the
// model's own Jinja chat template (GGUF tokenizer.chat_template) or, when the
// model has none, ChatML (warning() then says so).
//
// Message validation (InvalidArgument naming the message index and field):
// a non-empty array of objects; role one of system, developer, user,
// assistant, tool; content a string, null (assistant/tool only), or an array
// of {"type":"text","text":...} parts; every string valid UTF-8. A part of
// another type (image_url, input_audio, ...) is refused naming the type and
// the message index.
//
// Content arrays never reach the template: Render flattens them first (the
// text parts joined by '\n', as llama.cpp's server does), for every role.
//
// A conversation whose last message is the assistant's is a prefill to be
// continued, as llama.cpp's server does (prefill_assistant: then
// continue_final_message "auto" whatever add_generation_prompt says):
// Render gives the earlier messages without a generation prompt, then the
// assistant turn opened as the family does it, holding the message's
// reasoning_content and content, not closed. harmony:
// "<|start|>assistant<|channel|>analysis<|message|>R" +
// "<|end|><|start|>assistant<|channel|>final<|message|>C"; gemma4:
// "<|turn>model\n" (unless the earlier messages left one open) +
// "<|channel>thought\nR<channel|>C"; qwen3-coder:
// "<|im_start|>assistant\n" + "<think>\nR\n</think>\n\n" (when the template
// thinks) + C; others: the template's generation prompt, cut before any
// "<think>" and followed by the reasoning block as the template writes a
// past one (found once by rendering a probe message: Qwen3 and minimax-m2
// "<think>\nR\n</think>\n\n", glm-4.5 "<think>R</think>\n"), then C. "auto"
// continues the reasoning (no close tag, no content) when the message has
// only reasoning; continue_final_message "content" always closes the
// reasoning and writes the content, "reasoning_content" writes only the
// open reasoning. InvalidArgument when that message has tool_calls, the
// message before it is the assistant's too, continue_final_message is set
// together with add_generation_prompt (llama-server's 400), or it is set and
// the last message is not the assistant's.
//
// Thread-safe: immutable after ForModel.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/base/utf8.h"
#include "common/chat/chat_template.h"
#include "common/chat/harmony.h"
#include "common/chat/tool_calls.h"
#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace moesplit::dense {

// llama-server's continue_final_message values (false / absent: not set).
enum class ContinueFinalMessage { kAuto, kContent, kReasoning };

struct ChatPromptOptions {
  bool add_generation_prompt = true;
  // Set: continue the last message (which must be the assistant's), and
  // add_generation_prompt must be false.
  std::optional<ContinueFinalMessage> continue_final_message;
  bool enable_thinking = true;
  std::string date_override;  // "YYYY-MM-DD" for strftime_now; empty: today
  // The OpenAI `tools` array given to the template (null or empty: none).
  nlohmann::ordered_json tools;
  // More template variables, as llama-server's chat_template_kwargs (every
  // key, e.g. gpt-oss's reasoning_effort): an object, or null for none.
  nlohmann::ordered_json extra_context;
};

class ChatPrompt {
 public:
  // `template_source` overrides the model's template when non-empty.
  // InvalidArgument when a template does not parse.
  static absl::StatusOr<ChatPrompt> ForModel(const GgufFile& file, const Tokenizer& tokenizer,
                                             const std::string& template_source = "");

  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& messages,
                                     const ChatPromptOptions& options) const;

  // Non-empty when the ChatML fallback is in use.
  const std::string& warning() const { return warning_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  // How the model's output splits into reasoning and content: harmony
  // channels when the template writes <|channel|> and the vocabulary has
  // the harmony tokens (gpt-oss), the thought channel when it writes
  // <|channel> and <channel|> (Gemma 4), else <think> blocks.
  chat::OutputFormat output_format() const { return output_format_; }
  // How the template's model writes tool calls (tool_calls.h).
  chat::ToolCallFamily tool_family() const { return tool_family_; }

 private:
  ChatPrompt(chat::ChatTemplate t) : template_(std::move(t)) {}
  absl::StatusOr<std::string> RenderContinuation(const nlohmann::ordered_json& flat,
                                                 chat::ChatTemplateOptions o,
                                                 ContinueFinalMessage mode) const;
  // The tags around a past assistant message's reasoning as the template
  // writes them ("<think>\n", "\n</think>\n\n"); empty when it writes none.
  void FindReasoningTags();
  chat::ChatTemplate template_;
  std::string bos_, eos_, warning_;
  chat::OutputFormat output_format_ = chat::OutputFormat::kThink;
  chat::ToolCallFamily tool_family_ = chat::ToolCallFamily::kNone;
  std::string reasoning_start_, reasoning_end_;
};

// Checks the messages as described above.
absl::Status ValidateMessages(const nlohmann::ordered_json& messages);

// The messages, validated, with every content array replaced by its text
// parts joined by '\n' (other fields unchanged).
absl::StatusOr<nlohmann::ordered_json> FlattenMessages(const nlohmann::ordered_json& messages);

}  // namespace moesplit::dense
