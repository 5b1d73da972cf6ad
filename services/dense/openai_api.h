// OpenAiApi: the OpenAI-compatible routes of the dense service's HTTP front
// end, apart from the transport (http_server.h owns connections, limits and
// deadlines; this file turns a request body into engine calls and JSON).
//
//   POST /v1/chat/completions   chat messages -> the model's chat template
//   POST /v1/completions        a text prompt (or token ids)
//     both: "stream": true answers with server-sent events, one
//     `data: {chunk}` per token, then (with stream_options.include_usage) a
//     chunk with usage and no choices, then `data: [DONE]`.
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
// Thread-safe. Completions blocks until the request ends (run it on a thread
// of its own, never on an I/O thread); the other routes return at once.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "services/dense/inference_service.h"
#include "services/dense/request_limits.h"

namespace moesplit::dense {

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond the content type
};

// Where a route's answer goes: one whole reply, or a stream (StartStream,
// then WriteChunk for each piece of the body, then EndStream). Implemented
// by the connection; each method may be called from any thread but all of
// one response from one thread. Once the client is gone every call is a
// no-op and WriteChunk returns false.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  virtual void Reply(HttpReply reply) = 0;
  // `head.body` is ignored; the body follows in chunks.
  virtual bool StartStream(HttpReply head) = 0;
  virtual bool WriteChunk(std::string data) = 0;
  virtual void EndStream() = 0;
  // The client closed the connection (or it failed) before the response
  // was complete.
  virtual bool ClientGone() const = 0;
};

class OpenAiApi {
 public:
  explicit OpenAiApi(ServedModel served);

  // POST /v1/chat/completions (`chat`) or /v1/completions. Blocks until the
  // request ends; a client that goes away (ClientGone) cancels it in the
  // engine, which frees its slot and KV cache, streaming or not.
  void Completions(const std::string& body, bool chat, HttpResponder& out);
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
  size_t max_token_bytes_ = 1;  // the longest token's bytes
};

}  // namespace moesplit::dense
