#include "services/dense/http_server.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <variant>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "services/dense/anthropic_api.h"
#include "services/dense/api_auth.h"
#include "services/dense/openai_api.h"

namespace moesplit::dense {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

absl::string_view Sv(beast::string_view v) { return absl::string_view(v.data(), v.size()); }

// After the last response on a connection: how long and how much of what
// the client still sends is read and dropped before closing, so that a
// refused upload sees its answer instead of a reset.
constexpr ms kLinger{2000};
constexpr size_t kLingerBytes = 1 << 20;
// After a 413: the rest of the body is read and dropped (for at most the body
// deadline), so that a client that sends it all before reading (Python's
// http.client, requests, httpx) gets the answer instead of a reset.
constexpr size_t kTooLargeDrainBytes = size_t{256} << 20;

// Threads preparing completions (Shared::setup).
constexpr int kSetupThreads = 2;

enum class Route {
  kChat, kCompletions, kMessages, kCountTokens, kTokenize, kDetokenize, kApplyTemplate,
  kResponses, kGetResponse, kDeleteResponse, kModels, kModel, kHealth, kLive, kMetrics
};

// A path ending in '*' matches any non-empty rest (the route's argument).
struct RouteSpec {
  const char* path;
  http::verb method;
  Route route;
};
constexpr RouteSpec kRoutes[] = {
    {"/v1/chat/completions", http::verb::post, Route::kChat},
    {"/v1/completions", http::verb::post, Route::kCompletions},
    {"/v1/messages", http::verb::post, Route::kMessages},
    {"/v1/messages/count_tokens", http::verb::post, Route::kCountTokens},
    {"/v1/responses", http::verb::post, Route::kResponses},
    {"/v1/responses/*", http::verb::get, Route::kGetResponse},
    {"/v1/responses/*", http::verb::delete_, Route::kDeleteResponse},
    {"/v1/models", http::verb::get, Route::kModels},
    {"/v1/models/*", http::verb::get, Route::kModel},
    {"/health", http::verb::get, Route::kHealth},
    // llama-server's routes, so that its clients need no change.
    {"/chat/completions", http::verb::post, Route::kChat},
    {"/completions", http::verb::post, Route::kCompletions},
    {"/responses", http::verb::post, Route::kResponses},
    {"/models", http::verb::get, Route::kModels},
    {"/v1/health", http::verb::get, Route::kHealth},
    {"/tokenize", http::verb::post, Route::kTokenize},
    {"/detokenize", http::verb::post, Route::kDetokenize},
    {"/apply-template", http::verb::post, Route::kApplyTemplate},
    {"/health/ready", http::verb::get, Route::kHealth},
    {"/health/live", http::verb::get, Route::kLive},
    {"/metrics", http::verb::get, Route::kMetrics},
};

// Open without an API key: health and readiness probes.
bool OpenWithoutKey(absl::string_view path) {
  return path == "/health" || path == "/health/ready" || path == "/health/live" ||
         path == "/v1/health";
}

// The API endpoint a POST route runs.
OpenAiApi::Endpoint EndpointOf(Route r) {
  switch (r) {
    case Route::kChat: return OpenAiApi::Endpoint::kChat;
    case Route::kMessages: return OpenAiApi::Endpoint::kMessages;
    case Route::kCountTokens: return OpenAiApi::Endpoint::kCountTokens;
    case Route::kTokenize: return OpenAiApi::Endpoint::kTokenize;
    case Route::kDetokenize: return OpenAiApi::Endpoint::kDetokenize;
    case Route::kApplyTemplate: return OpenAiApi::Endpoint::kApplyTemplate;
    case Route::kResponses: return OpenAiApi::Endpoint::kResponses;
    default: return OpenAiApi::Endpoint::kCompletions;
  }
}

// Anthropic's routes answer errors in Anthropic's shape (anthropic_api.h).
bool AnthropicPath(absl::string_view path) {
  return path == "/v1/messages" || absl::StartsWith(path, "/v1/messages/");
}

// A connection's byte stream: plain TCP, or TLS over it (--tls-cert). The
// code that reads and writes is the same for both (std::visit).
using TlsStream = net::ssl::stream<tcp::socket>;
using Stream = std::variant<tcp::socket, TlsStream>;

tcp::socket& Tcp(Stream& s) {
  if (auto* tls = std::get_if<TlsStream>(&s)) return tls->next_layer();
  return std::get<tcp::socket>(s);
}

// Whether `path` is `spec`'s; `arg` gets the part a '*' matched.
bool PathMatches(const RouteSpec& spec, absl::string_view path, std::string* arg) {
  absl::string_view want = spec.path;
  if (!absl::EndsWith(want, "*")) return path == want;
  want.remove_suffix(1);
  if (!absl::StartsWith(path, want) || path.size() == want.size()) return false;
  absl::string_view rest = path.substr(want.size());
  // Percent-decoded: model names may hold '/' (%2F) or ':'.
  auto hex = [](char c, int* v) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
    *v = c <= '9' ? c - '0' : (absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10);
    return true;
  };
  arg->clear();
  for (size_t i = 0; i < rest.size(); ++i) {
    int hi = 0, lo = 0;
    if (rest[i] == '%' && i + 2 < rest.size() && hex(rest[i + 1], &hi) && hex(rest[i + 2], &lo)) {
      arg->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      arg->push_back(rest[i]);
    }
  }
  return true;
}

// Whether the allowed origin `a` (a --cors-origin value) admits `origin`:
// the same origin (ASCII case aside), or, when `a` names no port
// ("http://localhost"), the same scheme and host on any port
// ("http://localhost:5173").
bool CorsOriginMatches(absl::string_view a, absl::string_view origin) {
  if (absl::EqualsIgnoreCase(a, origin)) return true;
  const size_t host = a.find("://");
  if (host == absl::string_view::npos) return false;
  const absl::string_view authority = a.substr(host + 3);
  // A port in `a` (after an IPv6 literal's closing bracket) asks for that port only.
  const size_t bracket = authority.rfind(']');
  if (authority.find(':', bracket == absl::string_view::npos ? 0 : bracket) !=
      absl::string_view::npos) {
    return false;
  }
  if (origin.size() <= a.size() + 1 || !absl::StartsWithIgnoreCase(origin, a) ||
      origin[a.size()] != ':') {
    return false;
  }
  const absl::string_view port = origin.substr(a.size() + 1);
  return port.size() <= 5 && std::all_of(port.begin(), port.end(), absl::ascii_isdigit);
}

// The Access-Control-Allow-Origin value for a request from `origin` ("" =
// none: CORS off, no Origin header, or an origin not allowed).
std::string CorsAllow(const std::vector<std::string>& allowed, absl::string_view origin) {
  if (origin.empty()) return "";
  for (const std::string& a : allowed) {
    if (a == "*") return "*";
    if (CorsOriginMatches(a, origin)) return std::string(origin);
  }
  return "";
}

class Connection;

// What every connection shares: the options, the API, the counts that
// bound them and the completions in flight the destructor waits for.
struct Shared {
  Shared(HttpServerOptions o, ServedModel served)
      : options(o), auth(served.auth), api(std::move(served)) {}
  const HttpServerOptions options;
  const ApiAuth* const auth;  // null: no API keys
  OpenAiApi api;
  std::optional<net::ssl::context> tls;  // set: every connection is TLS
  // Where completions are prepared (parsed, tokenized, submitted): off the
  // I/O threads, so a long prompt delays no other connection. Joined by
  // the server's destructor once no completion is in flight.
  net::thread_pool setup{kSetupThreads};
  std::atomic<bool> stopping{false};
  std::atomic<int> connections{0};
  // Completion requests from dispatch until their last byte is written (or
  // the connection closes): what a drain waits for.
  std::atomic<int> active{0};
  std::mutex mu;
  std::condition_variable cv;
  int completions = 0;  // guarded by mu: started, `done` not yet run
  // Connections with a completion in flight (the destructor wakes them).
  std::list<std::weak_ptr<Connection>> busy;  // guarded by mu
  // Connections without a complete request yet (reading one, or kept
  // alive between requests), oldest first: at the connection limit the
  // oldest is closed to admit a new connection.
  std::mutex waiting_mu;
  std::list<std::weak_ptr<Connection>> waiting;  // guarded by waiting_mu
};

// How the body of a response ends: after Content-Length bytes, with the
// last chunk, or (an HTTP/1.0 stream) with the connection.
enum class Framing { kLength, kChunked, kUntilClose };

std::string Serialize(const HttpReply& r, bool keep_alive, Framing framing) {
  std::string s = absl::StrCat("HTTP/1.1 ", r.status, " ",
                               std::string(http::obsolete_reason(http::int_to_status(r.status))),
                               "\r\n");
  if (r.status != 204) absl::StrAppend(&s, "Content-Type: ", r.content_type, "\r\n");
  for (const auto& [k, v] : r.headers) absl::StrAppend(&s, k, ": ", v, "\r\n");
  if (r.status == 204) {  // no body, no length
  } else if (framing == Framing::kChunked) {
    s += "Transfer-Encoding: chunked\r\n";
  } else if (framing == Framing::kLength) {
    absl::StrAppend(&s, "Content-Length: ", r.body.size(), "\r\n");
  }
  absl::StrAppend(&s, "Connection: ", keep_alive ? "keep-alive" : "close", "\r\n\r\n");
  return s;
}

// One TCP connection. Everything but the HttpResponder methods runs on the
// connection's strand.
class Connection : public std::enable_shared_from_this<Connection>, public HttpResponder {
 public:
  Connection(tcp::socket socket, std::shared_ptr<Shared> shared, bool counted)
      : stream_(shared->tls
                    ? Stream(std::in_place_type<TlsStream>, std::move(socket), *shared->tls)
                    : Stream(std::move(socket))),
        timer_(Tcp(stream_).get_executor()),
        beat_timer_(Tcp(stream_).get_executor()),
        shared_(std::move(shared)),
        opt_(shared_->options),
        counted_(counted) {
    if (counted_) ++shared_->connections;
  }
  ~Connection() override {
    LeaveWaiting();
    EndActive();
    if (counted_) --shared_->connections;
  }

  // At the connection limit: takes the oldest connection still without a
  // complete request out of the waiting list; null when there is none.
  static std::shared_ptr<Connection> TakeOldestWaiting(Shared& shared) {
    std::lock_guard<std::mutex> l(shared.waiting_mu);
    for (auto it = shared.waiting.begin(); it != shared.waiting.end(); ++it) {
      std::shared_ptr<Connection> c = it->lock();
      if (c == nullptr) continue;  // being destroyed: its destructor unlinks it
      shared.waiting.erase(it);
      c->in_waiting_ = false;
      return c;
    }
    return nullptr;
  }

  // Closes the connection if it still has no complete request (strand).
  void Evict() {
    if (reading_) Close();
  }

  net::any_io_executor executor() { return Tcp(stream_).get_executor(); }

  void Start() {
    beast::error_code ec;
    Tcp(stream_).set_option(tcp::no_delay(true), ec);
    Handshake([](Connection& c) { c.ReadHeader(/*restart_deadline=*/false); });
  }

  // At the connection limit: a 503, then close.
  void Refuse() {
    Handshake([](Connection& c) { c.SendRefusal(); });
  }

  // TLS: the server handshake first, under the header deadline (which it
  // shares with the first request's headers) and in the waiting list (a
  // trickling handshake is a slowloris like any other); a failed handshake
  // (a plain-text client, a bad certificate) closes the connection. Plain
  // TCP: next at once.
  template <typename Next>
  void Handshake(Next next) {
    auto* tls = std::get_if<TlsStream>(&stream_);
    if (tls == nullptr) return next(*this);
    if (counted_) EnterWaiting();
    SetDeadline(opt_.header_timeout);
    tls->async_handshake(net::ssl::stream_base::server,
                         [self = shared_from_this(), next](beast::error_code ec) {
                           if (ec) return self->Close();
                           next(*self);
                         });
  }

  // HttpResponder (strand).
  void Reply(HttpReply reply) override {
    replied_ = true;
    AddCorsHeaders(&reply);
    std::string bytes = Serialize(reply, keep_alive_, Framing::kLength);
    bytes += reply.body;
    Enqueue(std::move(bytes), /*last=*/true);
  }
  void StartStream(HttpReply head) override {
    replied_ = true;
    AddCorsHeaders(&head);
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends with the connection
    const bool sse = head.content_type == "text/event-stream";
    Enqueue(Serialize(head, keep_alive_, chunked_ ? Framing::kChunked : Framing::kUntilClose),
            false);
    if (sse && opt_.sse_heartbeat.count() > 0) {
      beating_ = true;
      ArmHeartbeat();
    }
  }
  void WriteChunk(std::string data) override {
    if (data.empty()) return;
    if (chunked_) {
      std::string framed = absl::StrCat(absl::Hex(data.size()), "\r\n");
      framed += data;
      framed += "\r\n";
      data = std::move(framed);
    }
    Enqueue(std::move(data), false);
  }
  void EndStream() override {
    StopHeartbeat();
    Enqueue(chunked_ ? "0\r\n\r\n" : "", /*last=*/true);
  }
  bool ClientGone() const override { return gone_ || shared_->stopping.load(); }
  size_t QueuedBytes() const override { return out_bytes_; }
  void SetWake(std::function<void()> wake) override { wake_ = std::move(wake); }
  void Post(std::function<void()> f) override { net::post(executor(), std::move(f)); }

  // Runs the completion's wake-up, if any (strand).
  void Wake() {
    if (std::function<void()> w = wake_) w();
  }

  // Prepares a completion on the setup pool, then starts it on this
  // connection's strand; it holds no thread while the engine works
  // (OpenAiApi::StartCompletion).
  void RunCompletion(OpenAiApi::Endpoint endpoint) {
    auto self = shared_from_this();
    auto shared = shared_;
    std::list<std::weak_ptr<Connection>>::iterator busy;
    {
      std::lock_guard<std::mutex> l(shared->mu);
      ++shared->completions;
      busy = shared->busy.insert(shared->busy.end(), weak_from_this());
    }
    auto once = std::make_shared<std::atomic<bool>>(false);
    auto done = [self, shared, busy, once] {
      if (once->exchange(true)) return;
      if (!self->replied_) {
        self->Reply(self->Error(500, "internal_error", "no response"));
      }
      std::lock_guard<std::mutex> l(shared->mu);
      shared->busy.erase(busy);
      --shared->completions;
      shared->cv.notify_all();
    };
    net::post(shared->setup, [self, endpoint, done, body = std::move(parser_->get().body())] {
      std::shared_ptr<OpenAiApi::Prepared> prepared;
      std::string error;
      try {
        prepared = self->shared_->api.PrepareCompletion(body, endpoint);
      } catch (const std::exception& e) {
        error = e.what();
      }
      net::post(self->executor(), [self, done, prepared = std::move(prepared), error] {
        try {
          if (prepared != nullptr) {
            return self->shared_->api.StartCompletion(prepared, self, done);
          }
        } catch (const std::exception& e) {
          // Before the request was submitted (after, the completion handles it).
          if (!self->replied_) {
            self->Reply(self->Error(500, "internal_error", e.what()));
          }
        }
        if (!self->replied_) self->Reply(self->Error(500, "internal_error", error));
        done();
      });
    });
  }

 private:
  // A protocol-level error in the shape of the request's API.
  HttpReply Error(int status, const std::string& code, const std::string& message) const {
    return anthropic_ ? AnthropicErrorReply(status, message)
                      : OpenAiApi::ProtocolError(status, code, message);
  }

  void SendRefusal() {
    HttpReply reply = Error(
        503, "too_many_connections",
        absl::StrCat("the server holds its maximum of ", opt_.max_connections,
                     " connections (--http-max-connections), each with a request running; "
                     "retry later"));
    reply.headers.emplace_back("Retry-After", "1");
    Respond(std::move(reply), /*keep_alive=*/false);
  }

  // --- reading a request

  void EnterWaiting() {
    reading_ = true;
    std::lock_guard<std::mutex> l(shared_->waiting_mu);
    if (in_waiting_) return;
    waiting_it_ = shared_->waiting.insert(shared_->waiting.end(), weak_from_this());
    in_waiting_ = true;
  }
  void LeaveWaiting() {
    reading_ = false;
    std::lock_guard<std::mutex> l(shared_->waiting_mu);
    if (!in_waiting_) return;
    shared_->waiting.erase(waiting_it_);
    in_waiting_ = false;
  }

  // restart_deadline false: the header deadline already runs (from the TLS
  // handshake at the connection's start).
  void ReadHeader(bool restart_deadline = true) {
    EnterWaiting();
    anthropic_ = false;
    parser_.emplace();
    parser_->header_limit(opt_.max_header_bytes);
    parser_->body_limit(opt_.max_body_bytes);
    if (restart_deadline || std::holds_alternative<tcp::socket>(stream_)) {
      SetDeadline(opt_.header_timeout);
    }
    std::visit(
        [&](auto& stream) {
          http::async_read_header(
              stream, buffer_, *parser_,
              [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
        },
        stream_);
  }

  // On a header_limit error the parser has consumed nothing yet: the buffer
  // starts with the request line, complete or not.
  bool RequestLineTooLong() const {
    const auto data = buffer_.cdata();
    const absl::string_view text(static_cast<const char*>(data.data()), data.size());
    const size_t eol = text.find("\r\n");
    return eol == absl::string_view::npos || eol > opt_.max_uri_bytes;
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    const auto& req = parser_->get();
    if (req.target().size() > opt_.max_uri_bytes) return UriTooLong();
    const absl::string_view target = Sv(req.target());
    const absl::string_view path = target.substr(0, target.find('?'));
    anthropic_ = AnthropicPath(path);
    const RouteSpec* found = nullptr;
    bool path_known = false;
    std::string arg;
    for (const RouteSpec& r : kRoutes) {
      if (!PathMatches(r, path, &arg)) continue;
      path_known = true;
      if (req.method() == r.method) {
        found = &r;
        route_arg_ = arg;
      }
    }
    const bool no_body = parser_->is_done();
    // OPTIONS on a known route is a browser's preflight, which never carries
    // an API key: it is answered without one (CORS off: 405 as before).
    const bool preflight = path_known && req.method() == http::verb::options;
    cors_allow_.clear();
    if (!opt_.cors_origins.empty()) {
      auto origin = req.find(http::field::origin);
      if (origin != req.end()) cors_allow_ = CorsAllow(opt_.cors_origins, Sv(origin->value()));
      // A browser's preflight, before the method check refuses OPTIONS.
      if (preflight) return Preflight(no_body);
    }
    // API keys (after the CORS preflight, which browsers send without them).
    if (!preflight && !OpenWithoutKey(path) && !Authorized(req)) {
      HttpReply reply = Error(
          401, "invalid_api_key",
          req.find(http::field::authorization) == req.end() && req.find("x-api-key") == req.end()
              ? "no API key: send the header Authorization: Bearer KEY (or x-api-key: KEY)"
              : "invalid API key in the Authorization (or x-api-key) header");
      reply.headers.emplace_back("WWW-Authenticate", "Bearer");
      return Respond(std::move(reply), no_body);
    }
    if (found == nullptr && !path_known) {
      return Respond(
          Error(
              404, "unknown_url",
              absl::StrCat("no route ", std::string(Sv(req.method_string())), " ", path)),
          no_body);
    }
    if (found == nullptr) {
      std::string allowed;
      for (const RouteSpec& r : kRoutes) {
        if (PathMatches(r, path, &arg)) allowed = std::string(Sv(http::to_string(r.method)));
      }
      HttpReply reply = Error(
          405, "method_not_allowed",
          absl::StrCat("method ", std::string(Sv(req.method_string())), " is not allowed on ", path,
                       " (allowed: ", allowed, ")"));
      reply.headers.emplace_back("Allow", allowed);
      return Respond(std::move(reply), no_body);
    }
    route_ = found->route;
    if (auto it = req.find(http::field::content_encoding); it != req.end()) {
      const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(Sv(it->value())));
      if (v != "identity") {
        return Respond(
            Error(415, "unsupported_encoding",
                                     absl::StrCat("Content-Encoding '", v,
                                                  "' is not accepted; send the body uncompressed")),
            false);
      }
    }
    if (auto it = req.find(http::field::transfer_encoding); it != req.end()) {
      const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(Sv(it->value())));
      if (v != "chunked") {
        return Respond(Error(415, "unsupported_encoding",
                                                absl::StrCat("Transfer-Encoding '", v,
                                                             "' is not accepted; only chunked")),
                       false);
      }
    }
    chunked_ = req.version() >= 11;
    if (no_body) return Dispatch();
    auto expect = req.find(http::field::expect);
    if (expect != req.end() && absl::EqualsIgnoreCase(Sv(expect->value()), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      SetDeadline(opt_.write_timeout);
      std::visit(
          [&](auto& stream) {
            net::async_write(stream, net::buffer(kContinue),
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               if (ec) return self->Close();
                               self->ReadBody();
                             });
          },
          stream_);
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    SetDeadline(opt_.body_timeout);
    std::visit(
        [&](auto& stream) {
          http::async_read(stream, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             if (ec) return self->OnReadError(ec);
                             self->Dispatch();
                           });
        },
        stream_);
  }

  // Whether the request carries one of the service's API keys (always, when
  // there are none); a refusal is counted.
  // Authorization: Bearer KEY, or Anthropic's x-api-key: KEY.
  bool Authorized(const http::request<http::string_body>& req) const {
    if (shared_->auth == nullptr) return true;
    auto it = req.find(http::field::authorization);
    if (it == req.end()) {
      if (auto x = req.find("x-api-key"); x != req.end()) {
        return shared_->auth->Check(absl::StrCat("Bearer ", Sv(x->value())), ApiAuth::kHttp);
      }
    }
    return shared_->auth->Check(it == req.end() ? absl::string_view() : Sv(it->value()),
                                ApiAuth::kHttp);
  }

  void OnReadError(beast::error_code ec) {
    if (closed_) return;
    if (ec == http::error::header_limit) {
      if (RequestLineTooLong()) return UriTooLong();
      return Respond(Error(
                         431, "headers_too_large",
                         absl::StrCat("the request line and headers exceed ", opt_.max_header_bytes,
                                      " bytes (--http-max-header-bytes)")),
                     false);
    }
    if (ec == http::error::body_limit) {
      // RFC 9112 9.6: answer, stop writing, read on (bounded), then close.
      linger_bytes_ = kTooLargeDrainBytes;
      linger_time_ = opt_.body_timeout;
      body_unread_ = true;
      return Respond(
          Error(413, "request_too_large",
                                   absl::StrCat("the request body exceeds ", opt_.max_body_bytes,
                                                " bytes (--max-body-bytes)")),
          false);
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      return Close();
    }
    if (ec.category() == http::make_error_code(http::error::end_of_stream).category() ||
        ec == http::error::partial_message) {
      // A malformed request (bad method, target, version, field, chunk...).
      return Respond(
          Error(400, "invalid_request",
                                   absl::StrCat("malformed HTTP request: ", ec.message())),
          false);
    }
    Close();
  }

  void UriTooLong() {
    Respond(Error(414, "uri_too_long",
                                     absl::StrCat("the request target exceeds ", opt_.max_uri_bytes,
                                                  " bytes (--http-max-uri-bytes)")),
            false);
  }

  // --- answering

  void Dispatch() {
    LeaveWaiting();
    ClearDeadline();
    ++requests_;
    keep_alive_ =
        parser_->keep_alive() && requests_ < opt_.max_requests_per_connection && !shared_->stopping;
    switch (route_) {
      case Route::kModels:
        return Reply(shared_->api.Models());
      case Route::kModel:
        return Reply(shared_->api.Model(route_arg_));
      case Route::kGetResponse:
        return Reply(shared_->api.GetResponse(route_arg_));
      case Route::kDeleteResponse:
        return Reply(shared_->api.DeleteResponse(route_arg_));
      case Route::kHealth:
        return Reply(shared_->api.Health());
      case Route::kLive:
        return Reply(shared_->api.Liveness());
      case Route::kMetrics:
        return Reply(shared_->api.Metrics());
      case Route::kChat:
      case Route::kCompletions:
      case Route::kMessages:
      case Route::kCountTokens:
      case Route::kTokenize:
      case Route::kDetokenize:
      case Route::kApplyTemplate:
      case Route::kResponses:
        processing_ = true;
        active_ = true;
        ++shared_->active;
        Watch();
        RunCompletion(EndpointOf(route_));
        return;
    }
  }

  // CORS preflight (OPTIONS on a known route): 204 with what browsers may
  // send, or 403 for an origin not allowed.
  void Preflight(bool no_body) {
    if (cors_allow_.empty()) {
      return Respond(Error(
                         403, "cors_origin_not_allowed",
                         "this origin is not allowed (--cors-origin), or the Origin header is "
                         "missing"),
                     no_body);
    }
    HttpReply reply;
    reply.status = 204;
    reply.headers = {{"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"},
                     {"Access-Control-Allow-Headers",
                      "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta"},
                     {"Access-Control-Max-Age", "600"}};
    Respond(std::move(reply), no_body);
  }

  void AddCorsHeaders(HttpReply* reply) const {
    if (cors_allow_.empty()) return;
    reply->headers.emplace_back("Access-Control-Allow-Origin", cors_allow_);
    if (cors_allow_ != "*") reply->headers.emplace_back("Vary", "Origin");
  }

  // The completion on this connection stopped counting as active (strand).
  void EndActive() {
    if (!active_) return;
    active_ = false;
    --shared_->active;
  }

  // An answer decided on the strand before any route ran.
  void Respond(HttpReply reply, bool keep_alive) {
    LeaveWaiting();
    ClearDeadline();
    ++requests_;
    keep_alive_ = keep_alive && parser_ && parser_->keep_alive() &&
                  requests_ < opt_.max_requests_per_connection && !shared_->stopping;
    Reply(std::move(reply));
  }

  // While a request is processed: read on, so that the client closing its
  // end (or resetting) is noticed. Bytes of a pipelined next request are
  // kept in the buffer.
  void Watch() {
    if (buffer_.size() >= opt_.max_header_bytes) return;  // enough pipelined; stop reading
    watching_ = true;
    std::visit(
        [&](auto& stream) {
          stream.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](
                                                            beast::error_code ec, size_t n) {
            self->OnWatch(ec, n);
          });
        },
        stream_);
  }

  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) buffer_.commit(n);
    if (after_watch_ != AfterWatch::kNothing) {
      const AfterWatch next = after_watch_;
      after_watch_ = AfterWatch::kNothing;
      if (ec && ec != net::error::operation_aborted) return Close();
      return next == AfterWatch::kLinger ? Linger() : WaitNextRequest();
    }
    if (ec) {
      gone_ = true;
      return Close();
    }
    if (processing_) Watch();
  }

  // --- SSE heartbeats (HttpServerOptions::sse_heartbeat)

  // The next check, one period after the stream's last bytes were queued.
  void ArmHeartbeat() {
    beat_timer_.expires_at(last_out_ + opt_.sse_heartbeat);
    beat_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      self->OnHeartbeat();
    });
  }
  void OnHeartbeat() {
    if (!beating_ || closed_ || ClientGone()) return;
    if (Clock::now() - last_out_ >= opt_.sse_heartbeat) {
      if (out_.empty() && !writing_) {
        WriteChunk(": ping\n\n");  // sets last_out_
      } else {
        last_out_ = Clock::now();  // a client not reading gets no more bytes
      }
    }
    ArmHeartbeat();
  }
  void StopHeartbeat() {
    if (!beating_) return;
    beating_ = false;
    beat_timer_.cancel();
  }

  void Enqueue(std::string bytes, bool last) {
    if (ClientGone()) return;
    last_out_ = Clock::now();
    out_bytes_ += bytes.size();
    if (out_bytes_ > kStreamHighWaterBytes) over_ = true;
    if (!bytes.empty()) out_.push_back(std::move(bytes));
    if (last) out_last_ = true;
    Pump();
  }

  void Pump() {
    if (writing_ || closed_) return;
    bool finished = false;
    if (out_.empty()) {
      finished = out_last_;
      out_last_ = false;
    } else {
      writing_bytes_ = std::move(out_.front());
      out_.pop_front();
    }
    if (writing_bytes_.empty()) {
      if (finished) AfterResponse();
      return;
    }
    writing_ = true;
    SetDeadline(opt_.write_timeout);
    std::visit(
        [&](auto& stream) {
          net::async_write(
              stream, net::buffer(writing_bytes_),
              [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
        },
        stream_);
  }

  void OnWrite(beast::error_code ec) {
    writing_ = false;
    out_bytes_ -= writing_bytes_.size();
    writing_bytes_.clear();
    if (ec) {
      gone_ = true;
      return Close();
    }
    ClearDeadline();
    Pump();
    if (over_ && out_bytes_ <= kStreamHighWaterBytes / 2) {
      over_ = false;
      Wake();  // the completion takes more from the engine
    }
  }

  void AfterResponse() {
    processing_ = false;
    EndActive();
    if (ClientGone()) return Close();
    if (watching_) {
      // The watch read must end before the next read starts.
      after_watch_ = keep_alive_ ? AfterWatch::kNextRequest : AfterWatch::kLinger;
      beast::error_code ignored;
      Tcp(stream_).cancel(ignored);
      return;
    }
    if (!keep_alive_) return Linger();
    WaitNextRequest();
  }

  void WaitNextRequest() {
    if (buffer_.size() > 0) return ReadHeader();
    EnterWaiting();
    SetDeadline(opt_.idle_timeout);
    if (auto* tls = std::get_if<TlsStream>(&stream_)) {
      // Readable TCP says nothing about decrypted bytes: wait for some.
      tls->async_read_some(buffer_.prepare(4096), [self = shared_from_this()](
                                                      beast::error_code ec, size_t n) {
        if (ec) return self->Close();
        self->buffer_.commit(n);
        self->ReadHeader();
      });
      return;
    }
    Tcp(stream_).async_wait(tcp::socket::wait_read,
                            [self = shared_from_this()](beast::error_code ec) {
                              if (ec) return self->Close();
                              self->ReadHeader();
                            });
  }

  // --- closing

  // Sends FIN, then reads and drops what the client still sends (bounded in
  // time and bytes) before closing. TLS: sends close_notify (the end of an
  // HTTP/1.0 stream) and waits, as long, for the client's.
  void Linger() {
    if (closed_) return;
    SetDeadline(linger_time_);
    if (auto* tls = std::get_if<TlsStream>(&stream_)) {
      // After a 413 the client may still be sending its body: read it first
      // (TLS has no half-close that lets it go on sending after ours).
      if (body_unread_) return DrainTls(0);
      tls->async_shutdown([self = shared_from_this()](beast::error_code) { self->Close(); });
      return;
    }
    beast::error_code ignored;
    Tcp(stream_).shutdown(tcp::socket::shutdown_send, ignored);
    Drain(0);
  }

  // TLS, after a 413: reads and drops what the client sends until it closes,
  // or linger_bytes_ (then close_notify, as Linger).
  void DrainTls(size_t drained) {
    buffer_.clear();
    std::get<TlsStream>(stream_).async_read_some(
        buffer_.prepare(16384),
        [self = shared_from_this(), drained](beast::error_code ec, size_t n) {
          if (ec) return self->Close();
          if (drained + n > self->linger_bytes_) {
            self->body_unread_ = false;
            return self->Linger();
          }
          self->DrainTls(drained + n);
        });
  }

  void Drain(size_t drained) {
    buffer_.clear();
    Tcp(stream_).async_read_some(
        buffer_.prepare(16384),
        [self = shared_from_this(), drained](beast::error_code ec, size_t n) {
          if (ec || drained + n > self->linger_bytes_) return self->Close();
          self->Drain(drained + n);
        });
  }

  void Close() {
    EndActive();
    if (closed_) return;
    closed_ = true;
    gone_ = true;
    LeaveWaiting();
    ClearDeadline();
    StopHeartbeat();
    beast::error_code ignored;
    Tcp(stream_).shutdown(tcp::socket::shutdown_both, ignored);
    Tcp(stream_).close(ignored);
    Wake();  // a completion in flight cancels its requests
  }

  void SetDeadline(ms d) {
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen = ++deadline_gen_](beast::error_code ec) {
      if (ec || gen != self->deadline_gen_) return;
      self->Close();
    });
  }
  void ClearDeadline() {
    ++deadline_gen_;
    timer_.cancel();
  }

  // Constant after construction.
  Stream stream_;
  net::steady_timer timer_;
  net::steady_timer beat_timer_;  // SSE heartbeats
  const std::shared_ptr<Shared> shared_;
  const HttpServerOptions& opt_;
  const bool counted_;

  // Strand only.
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Route route_ = Route::kHealth;
  int requests_ = 0;
  bool processing_ = false;
  bool watching_ = false;
  // What to do once the watch read ends (AfterResponse cancelled it).
  enum class AfterWatch { kNothing, kNextRequest, kLinger } after_watch_ = AfterWatch::kNothing;
  bool writing_ = false;
  bool closed_ = false;
  uint64_t deadline_gen_ = 0;
  std::string writing_bytes_;
  bool reading_ = false;  // no complete request yet (or idle between requests)
  bool active_ = false;   // counted in shared_->active
  std::string route_arg_;  // what a route's '*' matched
  bool anthropic_ = false;  // the request is on an Anthropic route

  bool keep_alive_ = false;
  std::string cors_allow_;  // Access-Control-Allow-Origin to send ("" = none)
  bool chunked_ = true;
  bool gone_ = false;
  bool replied_ = false;
  std::deque<std::string> out_;
  size_t out_bytes_ = 0;   // queued or being written
  bool over_ = false;      // out_bytes_ exceeded kStreamHighWaterBytes since the last wake-up
  bool out_last_ = false;  // the response's last bytes are queued
  std::function<void()> wake_;  // the completion in flight's wake-up (HttpResponder::SetWake)
  size_t linger_bytes_ = kLingerBytes;  // what Linger reads and drops at most
  ms linger_time_ = kLinger;            // and for how long
  bool body_unread_ = false;            // a 413: the client may still send its body
  bool beating_ = false;  // an SSE stream is open: heartbeats while it is silent
  Clock::time_point last_out_;  // when bytes were last queued
  // Guarded by shared_->waiting_mu.
  bool in_waiting_ = false;
  std::list<std::weak_ptr<Connection>>::iterator waiting_it_;
};

}  // namespace

struct HttpServer::Impl {
  Impl(HttpServerOptions options, ServedModel served)
      : shared(std::make_shared<Shared>(options, std::move(served))),
        acceptor(net::make_strand(ioc)),
        retry(acceptor.get_executor()) {}

  void Accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (shared->stopping) return;
      if (ec) {
        // Out of descriptors and the like: try again shortly, without spinning.
        retry.expires_after(ms(50));
        retry.async_wait([this](beast::error_code) {
          if (!shared->stopping) Accept();
        });
        return;
      }
      bool over = shared->connections.load() >= shared->options.max_connections;
      if (over) {
        // Make room by closing the connection that has waited longest
        // without sending a complete request; refuse when all are busy.
        if (std::shared_ptr<Connection> oldest = Connection::TakeOldestWaiting(*shared)) {
          net::post(oldest->executor(), [oldest] { oldest->Evict(); });
          over = false;
        }
      }
      auto c = std::make_shared<Connection>(std::move(s), shared, !over);
      net::dispatch(c->executor(), [c, over] { over ? c->Refuse() : c->Start(); });
      Accept();
    });
  }

  std::shared_ptr<Shared> shared;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::steady_timer retry;
  std::vector<std::thread> threads;
  int port = 0;
};

namespace {

// The server side of TLS 1.2 and later with the certificate and key given.
absl::Status ConfigureTls(const auth::TlsPem& tls, net::ssl::context& ctx) {
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::single_dh_use);
  beast::error_code ec;
  ctx.use_certificate_chain(net::buffer(tls.cert), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls-cert: ", ec.message()));
  ctx.use_private_key(net::buffer(tls.key), net::ssl::context::pem, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls-key: ", ec.message()));
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    return absl::InvalidArgumentError("--tls-key is not the key of --tls-cert");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateHttpOptions(const HttpServerOptions& o) {
  auto positive = [](ms d) { return d.count() > 0; };
  if (!positive(o.header_timeout))
    return absl::InvalidArgumentError("--http-header-timeout must be > 0");
  if (!positive(o.body_timeout))
    return absl::InvalidArgumentError("--http-body-timeout must be > 0");
  if (!positive(o.idle_timeout))
    return absl::InvalidArgumentError("--http-idle-timeout must be > 0");
  if (!positive(o.write_timeout))
    return absl::InvalidArgumentError("--http-write-timeout must be > 0");
  if (o.sse_heartbeat.count() < 0)
    return absl::InvalidArgumentError("--http-sse-heartbeat-ms must be >= 0 (0: off)");
  if (o.max_requests_per_connection < 1) {
    return absl::InvalidArgumentError("--http-max-requests-per-connection must be >= 1");
  }
  if (o.max_connections < 1)
    return absl::InvalidArgumentError("--http-max-connections must be >= 1");
  if (o.max_body_bytes < 1) return absl::InvalidArgumentError("--max-body-bytes must be >= 1");
  if (o.max_header_bytes < 256) {
    return absl::InvalidArgumentError("--http-max-header-bytes must be >= 256");
  }
  if (o.max_uri_bytes < 16 || o.max_uri_bytes > o.max_header_bytes) {
    return absl::InvalidArgumentError(
        "--http-max-uri-bytes must be >= 16 and at most --http-max-header-bytes");
  }
  if (o.io_threads < 1) return absl::InvalidArgumentError("the HTTP server needs an I/O thread");
  return absl::OkStatus();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

int HttpServer::port() const { return impl_->port; }

int HttpServer::active_requests() const { return impl_->shared->active.load(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host_port,
                                                              ServedModel served,
                                                              HttpServerOptions options) {
  RETURN_IF_ERROR(ValidateHttpOptions(options));
  const size_t colon = host_port.rfind(':');
  int want = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &want) ||
      want < 0 || want > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http wants HOST:PORT, got '", host_port, "'"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto impl = std::make_unique<Impl>(options, std::move(served));
  if (options.tls.server_tls()) {
    impl->shared->tls.emplace(net::ssl::context::tls_server);
    RETURN_IF_ERROR(ConfigureTls(options.tls, *impl->shared->tls));
  }
  beast::error_code ec;
  tcp::resolver resolver(impl->ioc);
  auto endpoints = resolver.resolve(host, std::to_string(want), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http: cannot resolve '", host, "': ", ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host_port, " (HTTP): ", ec.message()));
  }
  impl->port = impl->acceptor.local_endpoint().port();
  impl->Accept();
  for (int i = 0; i < options.io_threads; ++i) {
    impl->threads.emplace_back([io = &impl->ioc] { io->run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() {
  Impl& s = *impl_;
  // Every connection now reads as gone: running requests are cancelled in
  // the engine (their completions are woken to notice) and end without
  // writing.
  s.shared->stopping = true;
  net::post(s.acceptor.get_executor(), [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    s.retry.cancel();
  });
  {
    std::unique_lock<std::mutex> l(s.shared->mu);
    for (const std::weak_ptr<Connection>& w : s.shared->busy) {
      if (std::shared_ptr<Connection> c = w.lock()) {
        net::post(c->executor(), [c] { c->Wake(); });
      }
    }
    s.shared->cv.wait(l, [&] { return s.shared->completions == 0; });
  }
  s.shared->setup.join();
  s.ioc.stop();
  for (std::thread& t : s.threads) t.join();
}

}  // namespace moesplit::dense
