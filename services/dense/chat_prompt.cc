#include "services/dense/chat_prompt.h"

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::dense {
namespace {

// One element of a content array: {"type":"text","text":...} (a part with
// a "text" string and no "type" is taken as text).
absl::Status ValidatePart(const nlohmann::ordered_json& part, const std::string& where) {
  if (!part.is_object()) {
    return absl::InvalidArgumentError(where + " must be {\"type\":\"text\",\"text\":...}");
  }
  auto type = part.find("type");
  if (type != part.end()) {
    if (!type->is_string()) return absl::InvalidArgumentError(where + ".type must be a string");
    const std::string& t = type->get_ref<const std::string&>();
    if (t != "text") {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has type '", IsValidUtf8(t) ? t : "<invalid UTF-8>",
          "'; only \"text\" content parts are supported"));
    }
  }
  auto text = part.find("text");
  if (text == part.end() || !text->is_string()) {
    return absl::InvalidArgumentError(where + " must be {\"type\":\"text\",\"text\":...}");
  }
  if (!IsValidUtf8(text->get_ref<const std::string&>())) {
    return absl::InvalidArgumentError(where + ".text is not valid UTF-8");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateMessages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be an array");
  if (messages.empty()) return absl::InvalidArgumentError("messages must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return absl::InvalidArgumentError(where + " must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return absl::InvalidArgumentError(where + ".role is missing");
    }
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".role '", IsValidUtf8(r) ? r : "<invalid UTF-8>",
          "' is not one of system, developer, user, assistant, tool"));
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (r == "assistant" || r == "tool") continue;
      return absl::InvalidArgumentError(where + ".content is missing");
    }
    if (content->is_string()) {
      if (!IsValidUtf8(content->get_ref<const std::string&>())) {
        return absl::InvalidArgumentError(where + ".content is not valid UTF-8");
      }
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        RETURN_IF_ERROR(ValidatePart((*content)[k], absl::StrCat(where, ".content[", k, "]")));
      }
    } else {
      return absl::InvalidArgumentError(where + ".content must be a string or an array of parts");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::ordered_json> FlattenMessages(const nlohmann::ordered_json& messages) {
  RETURN_IF_ERROR(ValidateMessages(messages));
  nlohmann::ordered_json out = messages;
  for (auto& m : out) {
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    std::string text;
    for (const auto& part : *content) {
      // llama.cpp's concat_content_parts: text parts joined by '\n'.
      if (!text.empty()) text += '\n';
      text += part.at("text").get_ref<const std::string&>();
    }
    *content = std::move(text);
  }
  return out;
}

absl::StatusOr<ChatPrompt> ChatPrompt::ForModel(const GgufFile& file, const Tokenizer& tokenizer,
                                                const std::string& template_source) {
  std::string source = template_source;
  std::string warning;
  if (source.empty()) {
    ASSIGN_OR_RETURN(source, file.GetStringOr("tokenizer.chat_template", ""));
  }
  if (source.empty()) {
    source = chat::ChatMLFallbackTemplate();
    warning = "the model has no chat template (tokenizer.chat_template); using ChatML";
  }
  ASSIGN_OR_RETURN(chat::ChatTemplate t, chat::ChatTemplate::Parse(source));
  ChatPrompt p(std::move(t));
  p.warning_ = std::move(warning);
  if (tokenizer.bos() >= 0) p.bos_ = tokenizer.TokenText(tokenizer.bos());
  if (tokenizer.eos() >= 0) p.eos_ = tokenizer.TokenText(tokenizer.eos());
  if (source.find("<|channel|>") != std::string::npos &&
      tokenizer.FindToken("<|channel|>") >= 0 && tokenizer.FindToken("<|message|>") >= 0) {
    p.output_format_ = chat::OutputFormat::kHarmony;
  }
  if (source.find("<|channel>") != std::string::npos && source.find("<channel|>") != std::string::npos) {
    p.output_format_ = chat::OutputFormat::kThoughtChannel;  // Gemma 4
  }
  p.tool_family_ = chat::DetectToolCallFamily(source);
  p.FindReasoningTags();
  if (p.tool_family_ == chat::ToolCallFamily::kHarmony &&
      p.output_format_ != chat::OutputFormat::kHarmony) {
    p.tool_family_ = chat::ToolCallFamily::kNone;  // no harmony tokens: no harmony calls
  }
  return p;
}

namespace {

std::string StringField(const nlohmann::ordered_json& m, const char* key) {
  auto it = m.find(key);
  return it != m.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

void ChatPrompt::FindReasoningTags() {
  if (template_.source().find("<think>") == std::string::npos) return;
  // llama.cpp's autoparser finds the tags the same way: by rendering.
  static constexpr char kReasoning[] = "MoesplitProbeReasoning", kContent[] = "MoesplitProbeContent";
  const nlohmann::ordered_json probe = {
      {{"role", "user"}, {"content", "MoesplitProbeUser"}},
      {{"role", "assistant"}, {"content", kContent}, {"reasoning_content", kReasoning}}};
  chat::ChatTemplateOptions o;
  o.add_generation_prompt = false;
  o.bos_token = bos_;
  o.eos_token = eos_;
  absl::StatusOr<std::string> text = template_.Render(probe, o);
  const size_t r = text.ok() ? text->find(kReasoning) : std::string::npos;
  const size_t c = r != std::string::npos ? text->find(kContent, r) : std::string::npos;
  const size_t s = r != std::string::npos ? text->rfind("<think>", r) : std::string::npos;
  if (c == std::string::npos || s == std::string::npos) {
    reasoning_start_ = "<think>";
    reasoning_end_ = "</think>";
    return;
  }
  const size_t r_end = r + sizeof(kReasoning) - 1;
  reasoning_start_ = text->substr(s, r - s);
  reasoning_end_ = text->substr(r_end, c - r_end);
}

// llama.cpp's continuation (common_chat_templates_apply_jinja with
// continue_final_message, which its server sets to "auto" when the last
// message is the assistant's): the earlier messages without a generation
// prompt, then the family's opening of the assistant turn with the
// message's reasoning and content, left open.
absl::StatusOr<std::string> ChatPrompt::RenderContinuation(const nlohmann::ordered_json& flat,
                                                           chat::ChatTemplateOptions o,
                                                           ContinueFinalMessage mode) const {
  const nlohmann::ordered_json& last = flat.back();
  if (last.contains("tool_calls") && last["tool_calls"].is_array() && !last["tool_calls"].empty()) {
    return absl::InvalidArgumentError(
        "messages: cannot continue an assistant message that contains tool calls");
  }
  if (flat.size() >= 2 && StringField(flat[flat.size() - 2], "role") == "assistant") {
    return absl::InvalidArgumentError(
        "messages: cannot have 2 or more assistant messages at the end of the list");
  }
  const std::string reasoning = StringField(last, "reasoning_content");
  const std::string content = StringField(last, "content");
  // "auto": continue the reasoning when that is all the message has.
  const bool in_content =
      mode == ContinueFinalMessage::kContent ||
      (mode == ContinueFinalMessage::kAuto && !(content.empty() && !reasoning.empty()));
  nlohmann::ordered_json head = flat;
  head.erase(head.size() - 1);
  o.add_generation_prompt = false;
  ASSIGN_OR_RETURN(std::string prompt, template_.Render(head, o));
  const bool thinks = template_.source().find("<think>") != std::string::npos;
  std::string open;
  switch (tool_family_) {
    case chat::ToolCallFamily::kHarmony:
      open = "<|start|>assistant<|channel|>analysis<|message|>" + reasoning;
      if (in_content) open += "<|end|><|start|>assistant<|channel|>final<|message|>" + content;
      break;
    case chat::ToolCallFamily::kGemma4: {
      // The template opened no model turn after content that ended one.
      constexpr std::string_view kTurnEnd = "<turn|>\n";
      if (prompt.size() >= kTurnEnd.size() &&
          prompt.compare(prompt.size() - kTurnEnd.size(), kTurnEnd.size(), kTurnEnd) == 0) {
        open = "<|turn>model\n";
      }
      open += "<|channel>thought\n" + reasoning;
      if (in_content) open += "<channel|>" + content;
      break;
    }
    case chat::ToolCallFamily::kQwen3Coder:
      open = "<|im_start|>assistant\n";
      if (thinks) open += "<think>\n" + reasoning + (in_content ? "\n</think>\n\n" : "");
      if (in_content) open += content;
      break;
    default: {
      // The generation prompt is what add_generation_prompt adds.
      o.add_generation_prompt = true;
      ASSIGN_OR_RETURN(const std::string with, template_.Render(head, o));
      size_t common = 0;
      while (common < prompt.size() && common < with.size() && prompt[common] == with[common]) {
        ++common;
      }
      open = with.substr(common);
      if (!reasoning_start_.empty()) {
        open = open.substr(0, open.find(reasoning_start_)) + reasoning_start_ + reasoning;
        if (in_content) open += reasoning_end_;
      }
      if (in_content) open += content;
      break;
    }
  }
  return prompt + open;
}

absl::StatusOr<std::string> ChatPrompt::Render(const nlohmann::ordered_json& messages,
                                               const ChatPromptOptions& options) const {
  ASSIGN_OR_RETURN(const nlohmann::ordered_json flat, FlattenMessages(messages));
  chat::ChatTemplateOptions o;
  o.add_generation_prompt = options.add_generation_prompt;
  o.bos_token = bos_;
  o.eos_token = eos_;
  o.enable_thinking = options.enable_thinking;
  o.date_override = options.date_override;
  o.tools = options.tools;
  o.extra_context = options.extra_context;
  const bool last_is_assistant = StringField(flat.back(), "role") == "assistant";
  if (options.continue_final_message) {
    if (options.add_generation_prompt) {
      return absl::InvalidArgumentError(
          "continue_final_message: cannot set both add_generation_prompt and "
          "continue_final_message to true (set add_generation_prompt to false)");
    }
    if (!last_is_assistant) {
      return absl::InvalidArgumentError(
          "continue_final_message: the last message must be the assistant's");
    }
    return RenderContinuation(flat, std::move(o), *options.continue_final_message);
  }
  if (last_is_assistant) return RenderContinuation(flat, std::move(o), ContinueFinalMessage::kAuto);
  return template_.Render(flat, o);
}

}  // namespace moesplit::dense
