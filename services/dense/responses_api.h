// OpenAI's Responses API on the dense service's HTTP front end (what Codex
// CLI, the OpenAI Agents SDK and the Vercel AI SDK's default OpenAI provider
// speak), as a dialect of the chat path like anthropic_api.h: a request is
// checked and translated into the OpenAI chat body that openai_api.cc runs
// (the same template, tool-call parsing, reasoning split, tool_choice
// constraint, response_format and usage); this file holds the translation,
// the stored responses and the Responses shapes of the answer.
//
//   POST   /v1/responses       a response (stream: server-sent events)
//   GET    /v1/responses/{id}  a stored response
//   DELETE /v1/responses/{id}  {"id", "object": "response.deleted", "deleted": true}
//
// Request (ResponsesToChat; InvalidArgument with the field's path as the
// error's `param`, e.g. "input[2].content[0].type"):
//   model, input (a string: one user message; or items:
//     message {role: user|system|developer|assistant, content: string |
//       parts input_text / output_text / refusal}; function_call {call_id,
//       name, arguments}; function_call_output {call_id, output: string |
//       input_text parts}; reasoning {summary [summary_text], content
//       [reasoning_text], encrypted_content}: the reasoning of the
//       assistant turn that follows (content, else summary), rendered where
//       the template renders reasoning_content (none follows: dropped);
//       item_reference {id}: an
//       output item of a stored response, read as if sent (unknown: 404
//       item_not_found); images, files and other tools' items are refused
//       naming the type),
//   instructions (a system message first; not carried to a later response),
//   previous_response_id (the stored conversation before `input`; unknown
//     or expired: 404 ... previous_response_not_found),
//   tools: function tools {type: function, name, description, parameters,
//     strict}; web_search and web_search_preview (Codex's web search
//     setting adds web_search to every request) are dropped: this server
//     runs no server-side tool, the model is not told of them
//     (documented); other types (file_search,
//     image_generation, local_shell, custom, mcp, code_interpreter,
//     computer_use_preview, namespace, ...) are a 400 naming the type,
//   tool_choice (auto | none | required | {type: function, name}),
//   parallel_tool_calls, max_output_tokens, temperature, top_p,
//   text {format {type: text | json_object | json_schema {name, schema,
//     strict}} (response_format), verbosity (medium only: the templates
//     take no verbosity)},
//   reasoning {effort: none (thinking off) | minimal..xhigh (thinking on;
//     the templates here take no level), summary: auto | concise |
//     detailed (the reasoning item's summary holds the whole reasoning
//     text: nothing here summarizes)},
//   store (default true), stream, include (reasoning.encrypted_content is
//     accepted: reasoning is sent back as plain text), metadata, user,
//     safety_identifier, prompt_cache_key (the prefix cache is automatic),
//     service_tier, truncation (disabled only).
// Any other field is a 400 "Unknown parameter: 'NAME'." (OpenAI's
// unknown_parameter).
//
// Answer: the response object {id: "resp_...", object: "response",
// created_at, status: completed | incomplete (incomplete_details {reason:
// max_output_tokens}), output: [reasoning {id: rs_..., summary, content
// [reasoning_text]}?, message {id: msg_..., role: assistant, status,
// content [output_text {text, annotations: []}]}?, function_call {id:
// fc_..., call_id, name, arguments, status}...], usage {input_tokens,
// input_tokens_details {cached_tokens}, output_tokens,
// output_tokens_details {reasoning_tokens: the reasoning text
// re-tokenized}, total_tokens}, and the request's fields echoed}.
//
// Stream (ResponsesStream): response.created, response.in_progress, per
// item response.output_item.added, then (reasoning)
// response.reasoning_text.delta... / .done (and with a summary asked
// response.reasoning_summary_part.added, .reasoning_summary_text.delta /
// .done, .reasoning_summary_part.done), (message)
// response.content_part.added, response.output_text.delta... /
// .done, response.content_part.done, (function_call)
// response.function_call_arguments.delta (the whole arguments) / .done,
// then response.output_item.done; last response.completed (or
// response.incomplete). Each event `event: TYPE` with `data` holding type
// and sequence_number (0, 1, ...). A failure after the stream started is
// an `error` event {code, message, param} and ends it.
//
// Stored responses (ResponseStore): in memory, at most `max_responses`
// (--responses-store; the oldest goes first), each for `ttl`
// (--responses-ttl) after it was stored; store: false is not stored.
//
// Errors: OpenAI's {"error": {"message", "type", "param", "code"}}.
//
// Thread-safe: the functions; a ResponseStore (locked); a ResponsesStream
// is not.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/plan/serving_defaults.h"
#include "nlohmann/json.hpp"
#include "services/dense/chat_tools.h"
#include "services/dense/dense_engine.h"

namespace moesplit::dense {

class ResponseStore {
 public:
  struct Options {
    size_t max_responses = defaults::kResponsesStored;
    absl::Duration ttl = absl::Seconds(defaults::kResponsesTtlSeconds);
  };
  struct Entry {
    nlohmann::ordered_json response;  // the response object, as GET answers it
    nlohmann::ordered_json messages;  // the chat conversation, the answer included
                                      // (without the instructions)
  };
  explicit ResponseStore(Options options, std::function<absl::Time()> now = [] { return absl::Now(); })
      : options_(options), now_(std::move(now)) {}

  void Put(const std::string& id, Entry entry);
  std::optional<Entry> Get(const std::string& id);
  bool Delete(const std::string& id);
  size_t size();

 private:
  struct Slot {
    Entry entry;
    absl::Time stored;
    std::list<std::string>::iterator order;
  };
  void ExpireLocked();
  const Options options_;
  const std::function<absl::Time()> now_;
  std::mutex mu_;
  std::list<std::string> order_;  // oldest first
  std::unordered_map<std::string, Slot> slots_;
};

struct ResponsesRequest {
  nlohmann::ordered_json chat;      // the OpenAI chat body
  nlohmann::ordered_json echo;      // the response object's request fields
  nlohmann::ordered_json history;   // the conversation so far, without instructions
  bool store = true;
  bool summary = false;             // reasoning.summary asked
};

// `store` resolves previous_response_id (null: none is known).
absl::StatusOr<ResponsesRequest> ResponsesToChat(const nlohmann::ordered_json& body,
                                                 ResponseStore* store);

// Output items of a whole answer to response `id` ("resp_X"); item ids are
// "rs_X_I", "msg_X_I", "fc_X_I" (I: the item's index).
nlohmann::ordered_json ResponsesOutput(const std::string& id, const ChatDelta& answer,
                                       bool summary);

nlohmann::ordered_json ResponsesUsage(const GenerateOutcome& outcome, int64_t reasoning_tokens);

// The response object: `echo`'s fields with id, object, created_at, status,
// output, usage; `length`: incomplete (max_output_tokens).
nlohmann::ordered_json ResponseObject(const std::string& id, int64_t created_at,
                                      const nlohmann::ordered_json& echo, const char* status,
                                      nlohmann::ordered_json output, nlohmann::ordered_json usage,
                                      bool length);

// The events of a streamed answer, from the pieces ChatOutputStream gives.
class ResponsesStream {
 public:
  ResponsesStream(std::string id, int64_t created_at, nlohmann::ordered_json echo, bool summary)
      : id_(std::move(id)), created_(created_at), echo_(std::move(echo)), summary_(summary) {}
  // response.created and response.in_progress.
  std::string Start();
  std::string Push(const ChatDelta& piece);
  // `rest`, the open item's end, response.completed / .incomplete;
  // `*response` gets the final response object.
  std::string Finish(const ChatDelta& rest, nlohmann::ordered_json usage, bool length,
                     nlohmann::ordered_json* response);
  // An `error` event (the stream ends after it).
  std::string Error(const std::string& code, const std::string& message);
  bool started() const { return started_; }
  // Everything pushed (the answer as a whole).
  const ChatDelta& answer() const { return all_; }

 private:
  enum class Item { kNone, kReasoning, kMessage };
  std::string Event(nlohmann::ordered_json data);
  void Open(Item kind, std::string* out);
  void Close(std::string* out);
  std::string ItemId(const char* prefix) const;

  const std::string id_;
  const int64_t created_;
  const nlohmann::ordered_json echo_;
  const bool summary_;
  bool started_ = false;
  int64_t seq_ = 0;
  Item open_ = Item::kNone;
  std::string open_text_;  // the open item's text so far
  std::string held_;       // whitespace not yet in a message
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  ChatDelta all_;
};

}  // namespace moesplit::dense
