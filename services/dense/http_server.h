// HttpServer: the OpenAI-compatible HTTP API of the dense service, in the
// same process as the gRPC API (cpp-httplib; JSON by nlohmann-json).
//
//   POST /v1/chat/completions   chat messages -> the model's chat template
//   POST /v1/completions        a text prompt (or token ids)
//     both: "stream": true answers with server-sent events, one
//     `data: {chunk}` per token, then (with stream_options.include_usage) a
//     chunk with usage and no choices, then `data: [DONE]`.
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text of the
//     engine's registry, the same one the --metrics exposer serves)
// Errors are OpenAI's shape, {"error":{"message","type","param","code"}},
// with 400 (bad request, prompt longer than the context), 404 (unknown
// model or path), 429 + Retry-After (queue full), 503 (an expert worker
// failed), 500 (other).
// A streaming client that disconnects cancels its request at the next
// token; the sequence and its KV cache are freed.
//
// Thread-safe; handlers run on the server's own thread pool.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "services/dense/inference_service.h"

namespace httplib {
class Server;
}

namespace moesplit::dense {

class HttpServer {
 public:
  // Listens on HOST:PORT (port 0 picks one). Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host_port,
                                                           ServedModel served);
  ~HttpServer();  // stops listening and joins

  int port() const { return port_; }

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace moesplit::dense
