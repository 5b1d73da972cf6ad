// Tool calling for the chat APIs (OpenAI /v1/chat/completions and gRPC
// Chat): the request's `tools` / `tool_choice` / `parallel_tool_calls`,
// checked, and the model's output split into reasoning, content and tool
// calls as the chat template's family writes them (common/chat/tool_calls.h).
//
// Request fields (ParseToolRequest; InvalidArgument whose message starts
// with the field's name, e.g. "tools[1].function.name ..."):
//   tools                array (at most kMaxTools) of
//                        {"type": "function", "function": {"name", "description"?,
//                        "parameters"?, "strict"?}}; name 1-64 of [A-Za-z0-9_-]
//                        and unique, description a string, parameters an object
//   tool_choice          "auto" (default), "none", "required", or
//                        {"type": "function", "function": {"name": N}} with N
//                        one of the tools; anything but "auto"/"none" needs tools
//   parallel_tool_calls  bool (default true); false: at most one call returned
// tool_choice "none" (as llama.cpp): the tools are not given to the template
// and the output is not parsed for calls. "required" / named: the tools are
// offered and constrained decoding forces a call (several where
// parallel_tool_calls allows and the family can), in the template
// family's frame, whose arguments match the function's parameters
// (ToolChoiceConstraint); the output is parsed as for "auto" (named: only
// calls of that function count). A template of no known family refuses
// "required" / named (400), never answering in plain text.
//
// Thread-safety: ParseToolRequest is; a ChatOutputStream is not.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat/harmony.h"
#include "common/chat/reasoning.h"
#include "common/chat/tool_calls.h"
#include "common/sampling/grammar.h"
#include "nlohmann/json.hpp"

namespace moesplit::dense {

inline constexpr size_t kMaxTools = 128;

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ToolRequest {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;  // kNamed: the function
  bool parallel = true;

  // The template sees the tools and the output is parsed for calls.
  bool offered() const { return !tools.empty() && choice != ToolChoice::kNone; }
};

// The constraint that makes the model write a call (tool_choice required or
// named) in `family`'s frame, of N (any of the tools for "required"), A
// being JSON valid under N's parameters (an empty object when it has none):
//   Hermes:      "<tool_call>\n{\"name\": \"N\", \"arguments\": " A "}\n</tool_call>";
//   DeepSeek-V3.1: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>" A
//                "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
//   harmony:     optionally one analysis message (the reasoning:
//                "<|channel|>analysis<|message|>" text "<|end|><|start|>assistant"),
//                then "<|channel|>commentary to=functions.N <|constrain|>json<|message|>" A,
//                and end of generation (<|call|>);
//   Qwen3-Coder: "<tool_call>\n<function=N>\n", then per property of N's
//                parameters (in the order written; the required ones always,
//                the others optional) "<parameter=K>\nV\n</parameter>\n" with
//                V the raw text of a {"type": "string"} property (one of its
//                enum / const values if it has them; never containing
//                "</parameter>") or JSON valid under the property's schema,
//                then "</function>\n</tool_call>";
//   GLM-4.5/4.6, GLM-4.7, MiniMax-M2: as Qwen3-Coder in their own frames
//                and argument tags (chat::ToolCallFrameFor,
//                chat::ArgumentTagsFor): "<tool_call>N\n" + per property
//                "<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n" +
//                "</tool_call>" (GLM-4.7 without the newlines);
//                "<minimax:tool_call>\n<invoke name=\"N\">\n" + per property
//                "<parameter name=\"K\">V</parameter>\n" +
//                "</invoke>\n</minimax:tool_call>".
//   Gemma 4:     "<|tool_call>call:N" + A in Gemma's dictionary syntax
//                ({key:value,...}, bare keys, strings between <|"|> quotes,
//                no whitespace) + "<tool_call|>", A valid under what the
//                schema says simply: type (or a list), properties (in the
//                order written, the required ones always; none: "{}" unless
//                additionalProperties allows any), enum / const of scalars,
//                a string's maxLength (that text then holds no '<'), an
//                array's items / minItems / maxItems; anything else (anyOf,
//                $ref, pattern, ...) is any Gemma value there (llama.cpp's
//                gemma4 grammar enforces no schema at all).
//   Llama 3.x:   "{\"name\": \"N\", \"parameters\": " A "}".
// With parallel_tool_calls (the default) the Hermes, Qwen3-Coder, GLM and
// Gemma 4 families may write more calls after the first, each after "\n"
// (Hermes, Qwen3-Coder, GLM-4.5) or nothing (GLM-4.7, Gemma 4), as their
// templates render consecutive calls; the others write one (DeepSeek's and
// MiniMax-M2's frames hold one block, gpt-oss's call ends generation, Llama
// 3.x's template takes one call per message).
// The frames' tags (chat::FrameTags) are written as the vocabulary's special
// tokens where `has_token` says it has them and spelled out where it does
// not (null: either; grammar::GrammarBuilder::Tag).
// Null when nothing is forced (auto, none). InvalidArgument (starting
// "tool_choice") when a call must be forced and `family` is kNone: the
// template's format is unknown, so no call could be written or read back
// (llama.cpp would use its generic JSON format; a 400 says so instead of an
// answer in plain text).
// InvalidArgument naming the problem when a function's
// parameters use a keyword the grammar cannot enforce (for the tag families
// also minLength / maxLength on a raw-text string, and property names that
// cannot be a tag).
// reasoning_open: the prompt ends inside a reasoning block
// (chat::PromptOpensReasoning: Qwen3.5's, GLM-4.7-Flash's, MiniMax-M2's
// generation prompts); the forced output then closes it first
// ("</think>\n\n"; DeepSeek and GLM-4.7: "</think>"; Gemma 4: its thought
// channel's "<channel|>"), so that the call is not read as reasoning.
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> ToolChoiceConstraint(
    const ToolRequest& tools, chat::ToolCallFamily family, bool reasoning_open = false,
    grammar::TokenTest has_token = nullptr);

// Each argument is the request's field, or null when absent.
absl::StatusOr<ToolRequest> ParseToolRequest(const nlohmann::ordered_json& tools,
                                             const nlohmann::ordered_json& tool_choice,
                                             const nlohmann::ordered_json& parallel_tool_calls);

// A piece of a chat answer.
struct ChatDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<chat::ToolCall> tool_calls;
};

// The model's output, streamed, as the API shows it: reasoning (<think> or
// harmony analysis), content, and (when `tools.offered()`) the calls of
// `family`. Harmony calls are known when their message ends, so they come
// at Finish. The concatenation of the deltas is SplitChatOutput's answer.
class ChatOutputStream {
 public:
  ChatOutputStream(chat::OutputFormat format, bool starts_in_reasoning,
                   chat::ToolCallFamily family, const ToolRequest& tools);
  ChatDelta Push(std::string_view text);
  ChatDelta Finish();

 private:
  ChatDelta FromSplit(chat::ReasoningSplit split, bool final);

  chat::OutputStream split_;
  const bool parse_;
  const bool harmony_;
  chat::ToolCallConfig config_;
  chat::ToolCallStream calls_;
  std::string text_;  // harmony: the whole output (its calls)
};

ChatDelta SplitChatOutput(std::string_view text, chat::OutputFormat format,
                          bool starts_in_reasoning, chat::ToolCallFamily family,
                          const ToolRequest& tools);

// OpenAI shapes: message.tool_calls ([{id, type, function{name, arguments}}])
// and a stream's delta.tool_calls for calls numbered from `first_index`
// (the call with its id, name and arguments "" first, then its arguments).
nlohmann::ordered_json ToolCallsJson(const std::vector<chat::ToolCall>& calls);
std::vector<nlohmann::ordered_json> ToolCallDeltasJson(const std::vector<chat::ToolCall>& calls,
                                                       int first_index);

// The assistant message of a whole answer: role, content (null when the
// answer is only calls), reasoning_content when any, tool_calls when any.
nlohmann::ordered_json ChatMessageJson(const ChatDelta& answer);

// The `delta` objects of one piece of a stream, in order: the text
// ({"content"} and/or {"reasoning_content"}; {"content": ""} when both are
// empty, unless `skip_empty_text`), then ToolCallDeltasJson of its calls,
// numbered on from *calls_sent (which grows by their number).
std::vector<nlohmann::ordered_json> ChatDeltasJson(const ChatDelta& piece, bool skip_empty_text,
                                                   int* calls_sent);

// finish_reason: "tool_calls" when the answer ended ("stop") with calls.
std::string ToolFinishReason(const std::string& finish_reason, bool has_calls);

}  // namespace moesplit::dense
