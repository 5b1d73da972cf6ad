// HttpServer: the OpenAI-compatible HTTP API of the dense service (and
// Anthropic's Messages API, anthropic_api.h, and OpenAI's Responses API,
// responses_api.h), in the same process as the
// gRPC API. The routes and their JSON are OpenAiApi's (openai_api.h); this
// is the transport: an asynchronous HTTP/1.1 server on
// Boost.Beast/Asio that slow or hostile clients cannot stall.
//
// Connections. A few I/O threads multiplex every connection; nothing blocks
// on them, and no request holds a thread: a completion is parsed, tokenized
// and submitted on a small set-up pool (2 threads, so a long prompt delays
// no other connection), then the engine pushes its output to the
// connection's strand (the engine thread only posts) and it is written with
// chained async writes as it comes (OpenAiApi::StartCompletion); the other
// routes answer on the I/O thread. Backpressure: while more than
// kStreamHighWaterBytes (openai_api.h) of a response wait to be written the
// completion takes nothing more from the engine (its deltas stay buffered
// in the request, at most one per generated token); the engine never waits
// for a client. Per connection:
//   - the request line and headers must arrive within header_timeout (from
//     the connection's start, or from the first byte of a kept-alive
//     connection's next request), the body within body_timeout after them;
//     a connection past either is closed (slowloris);
//   - a kept-alive connection waits at most idle_timeout for its next
//     request and serves at most max_requests_per_connection (the last
//     answer says `Connection: close`);
//   - one write may take at most write_timeout (a client that stops reading
//     a stream is dropped, which cancels its request).
// At max_connections open connections, a new one takes the place of the
// connection that has waited longest without sending a complete request
// (still reading one, or idle between requests), which is closed; when every
// connection has a request in progress the new one is answered 503 (code
// "too_many_connections") and closed. So trickling clients can delay new
// ones by no more than their share of the limit, however many they open.
//
// Bounded input, refused before the body is read or parsed, with OpenAI's
// error shape {"error":{"message","type","param","code"}} and
// `Connection: close`:
//   413 request_too_large     body over max_body_bytes (declared or chunked)
//   414 uri_too_long          request target over max_uri_bytes
//   431 headers_too_large     request line + headers over max_header_bytes
//   415 unsupported_encoding  Content-Encoding other than identity, or a
//                             Transfer-Encoding other than chunked
//                             (compressed bodies are never inflated)
//   404 unknown_url           no such route
//   405 method_not_allowed    a route with another method (Allow: says which)
//   400 invalid_request       a malformed request (never a 500)
// `Expect: 100-continue` is answered once the headers pass these checks.
// After a 413 the rest of the body is read and dropped (at most 256 MiB, for
// at most body_timeout; over TLS, until the client closes) before the
// connection closes (RFC 9112 9.6), so a
// client that sends its whole body before reading gets the answer.
// On Anthropic's routes (/v1/messages...) every error, these included, has
// Anthropic's shape {"type":"error","error":{"type","message"}}.
//
// API keys (ServedModel::auth, api_auth.h): every path but /health needs
// `Authorization: Bearer KEY` (or Anthropic's `x-api-key: KEY`); without one: 401 invalid_api_key with
// `WWW-Authenticate: Bearer`, checked once the headers are read (before the
// route and the body).
//
// Client disconnects. While a request is processed the connection keeps
// reading: end of stream or an error marks the client gone, and the
// request — streaming or not — is cancelled in the engine at once (it ends
// at the engine's next step), which frees its slot and KV cache. (A client that half-closes its side
// after sending a request counts as gone.)
//
// Thread-safe; the destructor stops accepting, cancels every request still
// running, waits for the engine to end them and joins the I/O threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/auth/tls.h"
#include "common/plan/serving_defaults.h"
#include "services/dense/inference_service.h"

namespace moesplit::dense {

struct HttpServerOptions {
  // The flags' defaults (common/plan/serving_defaults.h).
  std::chrono::milliseconds header_timeout{defaults::kHttpHeaderTimeoutMs};
  std::chrono::milliseconds body_timeout{defaults::kHttpBodyTimeoutMs};
  std::chrono::milliseconds idle_timeout{defaults::kHttpIdleTimeoutMs};
  std::chrono::milliseconds write_timeout{defaults::kHttpWriteTimeoutMs};
  int max_requests_per_connection = defaults::kHttpMaxRequestsPerConnection;
  int max_connections = defaults::kHttpMaxConnections;
  uint64_t max_body_bytes = defaults::kHttpMaxBodyBytes;
  uint32_t max_header_bytes = defaults::kHttpMaxHeaderBytes;
  uint32_t max_uri_bytes = defaults::kHttpMaxUriBytes;
  // A streamed (text/event-stream) response silent this long gets an SSE
  // comment line `: ping` (which SSE parsers ignore), and again each period
  // it stays silent: while the request waits in the queue or its prompt
  // prefills, nginx's and clients' idle timeouts do not cancel it. A timer on
  // the connection's strand (no thread per stream); a client that is not
  // reading gets none. 0: off.
  std::chrono::milliseconds sse_heartbeat{defaults::kHttpSseHeartbeatMs};
  int io_threads = 2;
  // cert + key: every connection is TLS (1.2 or later); a client that does
  // not complete the handshake within header_timeout, or speaks plain HTTP,
  // is closed. ca is not used (no client certificates).
  auth::TlsPem tls = {};
  // --cors-origin: origins (or "*") whose requests get
  // Access-Control-Allow-Origin; OPTIONS on a known route is then a CORS
  // preflight (204 with Allow-Methods and Allow-Headers: Authorization,
  // Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta; 403 for an
  // origin not allowed). Empty: CORS off.
  std::vector<std::string> cors_origins;
};

// InvalidArgument naming the option that is out of range.
absl::Status ValidateHttpOptions(const HttpServerOptions& options);

class HttpServer {
 public:
  // Listens on HOST:PORT (port 0 picks one; HOST may be a name). Errors:
  // InvalidArgument (bad address or options), Unavailable (cannot bind).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host_port,
                                                           ServedModel served,
                                                           HttpServerOptions options = {});
  ~HttpServer();

  int port() const;
  // Completion requests in progress (dispatched, last byte not yet written):
  // a drain waits for 0.
  int active_requests() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moesplit::dense
