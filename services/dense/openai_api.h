// OpenAiApi: the OpenAI-compatible routes of the dense service's HTTP front
// end, apart from the transport (http_server.h owns connections, limits and
// deadlines; this file turns a request body into engine calls and JSON).
//
//   POST /v1/chat/completions   chat messages -> the model's chat template
//   POST /v1/completions        a text prompt (or token ids)
//   POST /v1/messages, /v1/messages/count_tokens: Anthropic's Messages API
//     (anthropic_api.h), run as a chat completion, answered in its shapes
//     both: "stream": true answers with server-sent events, one
//     `data: {chunk}` per token, then (with stream_options.include_usage) a
//     chunk with usage and no choices, then `data: [DONE]`.
//   POST /v1/responses, GET / DELETE /v1/responses/{id}: OpenAI's Responses
//     API (responses_api.h), run as a chat completion, answered in its
//     shapes; stored responses in memory (ServedModel::responses_stored,
//     responses_ttl_s)
//   POST /tokenize, /detokenize, /apply-template: llama-server's (below)
//   GET  /v1/models, GET /v1/models/{id}, GET /health (= /health/ready:
//     readiness), GET /health/live (liveness), GET /metrics (Prometheus
//     text of the engine's registry, the same one the --metrics exposer
//     serves)
// "response_format" (response_format.h): text, json_object or json_schema
// constrains the output (constrained decoding); a chat answer's content is
// then the JSON as generated (no reasoning split).
// Every completion that ends is logged (request_log.h), and its response
// (the last chunk of a stream) carries llama-server's `timings`.
// Errors are OpenAI's shape, {"error":{"message","type","param","code"}}:
// 400 (bad request, prompt longer than the context, list fields longer than
// allowed), 404 (unknown model), 429 + Retry-After (queue full), 503 (an
// expert worker failed), 500 (other). Protocol errors (404 unknown route,
// 405, 408, 413, 414, 415, 431) come from ProtocolError with the same shape.
//
// Bounds checked before work is spent: `stop` holds at most kMaxStop
// strings, `messages` at most kMaxMessages entries (request_limits.h, the
// same limits as the gRPC API), a token-id prompt at
// most the context; a text prompt whose byte length proves it longer than
// the context (more bytes than context x the longest token's bytes) is
// refused before it is tokenized, and tokenizing stops as soon as a prompt
// has more tokens than the context holds.
//
// Thread-safe. No route waits for the engine: StartCompletion returns at
// once (its answer follows asynchronously), the others answer at once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "services/dense/inference_service.h"
#include "services/dense/request_limits.h"
#include "services/dense/responses_api.h"

namespace moesplit::dense {

// The status payload naming the request field an error is about (the
// OpenAI error's `param`).
inline constexpr char kParamPayload[] = "moesplit/param";

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond the content type
};

// Bytes a response may have queued, not yet written, before its producer
// stops taking output from the engine (and waits for the wake-up).
inline constexpr size_t kStreamHighWaterBytes = 1 << 20;

// Where a route's answer goes: one whole reply, or a stream (StartStream,
// then WriteChunk for each piece of the body, then EndStream). Implemented
// by the connection. Every method but Post must be called on the
// responder's executor (the connection's strand), and never blocks: the
// bytes are queued and written asynchronously. Once the client is gone
// every write is a no-op.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  virtual void Reply(HttpReply reply) = 0;
  // `head.body` is ignored; the body follows in chunks.
  virtual void StartStream(HttpReply head) = 0;
  virtual void WriteChunk(std::string data) = 0;
  virtual void EndStream() = 0;
  // The client closed the connection (or it failed, or the server stops)
  // before the response was complete.
  virtual bool ClientGone() const = 0;
  // Bytes queued or being written.
  virtual size_t QueuedBytes() const = 0;
  // `wake` (null: none) runs on the executor when the client goes away and
  // when the queue, having exceeded kStreamHighWaterBytes, drained to half
  // of it.
  virtual void SetWake(std::function<void()> wake) = 0;
  // Runs `f` on the executor, later (any thread; never blocks).
  virtual void Post(std::function<void()> f) = 0;
};

class OpenAiApi {
 public:
  explicit OpenAiApi(ServedModel served);

  // POST /v1/chat/completions (`chat`) or /v1/completions, in two steps.
  // PrepareCompletion (any thread; the CPU work: parse the body, render and
  // tokenize the prompt, submit it) — run it off the I/O threads. Then
  // StartCompletion on `out`'s executor, which returns at once: the engine
  // pushes the output (no thread waits for it) and the answer is written
  // from the executor as it comes (an error, e.g. a bad request, is replied
  // there). A client that goes away (ClientGone and the wake-up) cancels
  // the request in the engine, which frees its slot and KV cache at its
  // next step, streaming or not. `done` runs on the executor once the
  // request ended in the engine and the answer (if any) is queued.
  // kMessages / kCountTokens: Anthropic's Messages API (anthropic_api.h),
  // run as a chat completion; count_tokens renders and tokenizes the
  // prompt and submits nothing (its answer is ready when prepared), as do
  // llama-server's POST /tokenize ({"content", "add_special" (false),
  // "parse_special" (true), "with_pieces"} -> {"tokens"}), /detokenize
  // ({"tokens"} -> {"content"}) and /apply-template (a chat request ->
  // {"prompt"}: the text /v1/chat/completions would run).
  enum class Endpoint {
    kChat, kCompletions, kMessages, kCountTokens, kTokenize, kDetokenize, kApplyTemplate,
    kResponses
  };
  struct Prepared;
  std::shared_ptr<Prepared> PrepareCompletion(const std::string& body, Endpoint endpoint);
  std::shared_ptr<Prepared> PrepareCompletion(const std::string& body, bool chat) {
    return PrepareCompletion(body, chat ? Endpoint::kChat : Endpoint::kCompletions);
  }
  void StartCompletion(std::shared_ptr<Prepared> prepared, std::shared_ptr<HttpResponder> out,
                       std::function<void()> done);
  // GET /v1/responses/{id}: the stored response, else 404; DELETE: removes it.
  HttpReply GetResponse(const std::string& id);
  HttpReply DeleteResponse(const std::string& id);
  HttpReply Models();
  // GET /v1/models/{id}: the model object when `id` is a served name (an
  // alias or the model's own name), else 404 model_not_found.
  HttpReply Model(const std::string& id);
  HttpReply Metrics();
  // GET /health and /health/ready: readiness (readiness.h), 200
  // {"status":"ok"} or 503 with the report naming missing workers and
  // layers, or draining. GET /health/live: 200 while the process serves.
  HttpReply Health();
  HttpReply Liveness();

  // An OpenAI-shaped error for a protocol-level problem (the request never
  // reached a route): `code` is the error's code field, e.g. "unknown_url".
  static HttpReply ProtocolError(int http_status, const std::string& code,
                                 const std::string& message);

 private:
  const ServedModel served_;
  const std::shared_ptr<ResponseStore> responses_;
  size_t max_token_bytes_ = 1;  // the longest token's bytes
};

}  // namespace moesplit::dense
