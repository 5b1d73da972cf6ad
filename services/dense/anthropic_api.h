// Anthropic's Messages API on the dense service's HTTP front end (what
// Claude Code and @anthropic-ai/sdk speak), as a dialect of the chat path:
// a request is checked and translated into the OpenAI chat body that
// openai_api.cc runs (the same template, tool-call parsing, reasoning
// split, tool_choice constraint, stop strings and usage); this file holds
// the translation and the Anthropic shapes of the answer.
//
//   POST /v1/messages               a message (stream: server-sent events)
//   POST /v1/messages/count_tokens  {"input_tokens": N} of the same request
//
// Request (AnthropicToChat; InvalidArgument whose message starts with the
// field's path, e.g. "messages.2.content.0.type: ..."):
//   model (required), max_tokens (required, >= 1; not on count_tokens),
//   messages (required): {role: user|assistant, content: string | blocks};
//     user blocks text and tool_result {tool_use_id, content: string |
//     text blocks, is_error}; assistant blocks text, thinking (rendered as
//     the message's reasoning), redacted_thinking (dropped: it is
//     encrypted for another model) and tool_use {id, name, input};
//     image and document blocks are refused (the model reads text only);
//   system: string or text blocks (joined by '\n');
//   tools: {name, description?, input_schema, strict?} (custom tools;
//     server tools, with another `type`, are refused: this server runs
//     none); eager_input_streaming and defer_loading are accepted without
//     effect (calls stream whole; every tool is rendered);
//   tool_choice: {type: auto|any|tool|none, name (tool),
//     disable_parallel_tool_use} -> OpenAI auto / required / named / none,
//     parallel_tool_calls;
//   stop_sequences, temperature (0..1), top_p (0..1), top_k, stream;
//   thinking {type: enabled (budget_tokens >= 1024, < max_tokens) |
//     adaptive | disabled}: the template's enable_thinking (absent: the
//     template's default); the budget is checked, not enforced (max_tokens
//     bounds the whole answer);
//   output_config {format: {type: json_schema, schema}}: response_format
//     json_schema (one text block, JSON valid under the schema);
//     output_config.effort is refused (no template here takes one);
//   metadata {user_id} and service_tier: accepted, without effect (one
//     tier; no per-user accounting); context_management (server-side
//     context editing, which Claude Code sends): its shape is checked, its
//     edits are not applied (the whole conversation is rendered).
// Any other field is refused as Anthropic refuses it ("NAME: Extra inputs
// are not permitted"); `cache_control` and `citations` are accepted on
// blocks (the prefix cache is automatic).
// tool_result with is_error: its content is rendered after "Error: ".
//
// Answer: {id: "msg_...", type: "message", role: "assistant", model,
// content: [thinking {thinking, signature: ""}?, text?, tool_use {id, name,
// input}...], stop_reason, stop_sequence, usage}. stop_reason: tool_use (the
// answer has calls), stop_sequence (with stop_sequence, the string that
// matched), max_tokens, else end_turn. usage: input_tokens (the prompt less
// what the prefix cache supplied), cache_read_input_tokens (that part),
// cache_creation_input_tokens 0, output_tokens. A text block opens at the
// first character that is not whitespace (whitespace-only text, e.g. the
// newlines after a reasoning block, is no block).
//
// Stream (AnthropicStream): event: message_start (the message with empty
// content and the usage of the prompt), ping, then per block
// content_block_start / content_block_delta (text_delta, thinking_delta,
// then one signature_delta; input_json_delta carrying a call's whole
// arguments) / content_block_stop, then message_delta {stop_reason,
// stop_sequence, usage}, message_stop. An error after the stream started
// is an `event: error` and ends it.
//
// Errors: {"type": "error", "error": {"type": T, "message": M}}, T by HTTP
// status: 400 invalid_request_error, 401 authentication_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 503 overloaded_error, else api_error.
//
// Thread-safe: functions of their arguments; an AnthropicStream is not.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "services/dense/chat_tools.h"
#include "services/dense/dense_engine.h"
#include "services/dense/openai_api.h"

namespace moesplit::dense {

// The OpenAI chat body (model, messages, max_tokens, stream, temperature,
// top_p, top_k, stop, tools, tool_choice, parallel_tool_calls,
// chat_template_kwargs, response_format) of a checked Messages request.
// `count_tokens`: the fields of /v1/messages/count_tokens (no max_tokens,
// stream or sampling; output_config and context_management checked only).
absl::StatusOr<nlohmann::ordered_json> AnthropicToChat(const nlohmann::ordered_json& body,
                                                       bool count_tokens);

struct AnthropicStop {
  std::string reason;                   // end_turn | max_tokens | stop_sequence | tool_use
  nlohmann::ordered_json sequence;      // the matched stop string, else null
};
AnthropicStop AnthropicStopOf(const GenerateOutcome& outcome, bool has_calls);

nlohmann::ordered_json AnthropicUsage(const GenerateOutcome& outcome);

// The whole answer's content blocks (as the header says).
nlohmann::ordered_json AnthropicContent(const ChatDelta& answer);

nlohmann::ordered_json AnthropicMessage(const std::string& id, const std::string& model,
                                        const ChatDelta& answer, const AnthropicStop& stop,
                                        const nlohmann::ordered_json& usage);

// The error's type for an HTTP status, and the error reply.
const char* AnthropicErrorType(int http_status);
HttpReply AnthropicErrorReply(int http_status, const std::string& message);

// One SSE event: "event: TYPE\ndata: JSON\n\n", TYPE being data["type"].
std::string AnthropicEvent(const nlohmann::ordered_json& data);

// The events of a streamed answer, built from the pieces ChatOutputStream
// gives; each method returns the events to write (possibly none).
class AnthropicStream {
 public:
  AnthropicStream(std::string id, std::string model)
      : id_(std::move(id)), model_(std::move(model)) {}
  // message_start (its usage: `usage`, output_tokens 0) and a ping.
  std::string Start(const nlohmann::ordered_json& usage);
  std::string Push(const ChatDelta& piece);
  // `rest` (ChatOutputStream::Finish), the open block's end, message_delta
  // and message_stop.
  std::string Finish(const ChatDelta& rest, const AnthropicStop& stop,
                     const nlohmann::ordered_json& usage);
  // An error event (the stream ends after it).
  static std::string Error(int http_status, const std::string& message);

  bool started() const { return started_; }

 private:
  enum class Block { kNone, kThinking, kText };
  void Open(Block kind, std::string* out);
  void Close(std::string* out);

  const std::string id_, model_;
  bool started_ = false;
  Block open_ = Block::kNone;
  int index_ = 0;         // the open block's index, else the next block's
  std::string held_;      // whitespace not yet in a text block
};

}  // namespace moesplit::dense
