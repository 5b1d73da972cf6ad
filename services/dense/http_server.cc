#include "services/dense/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/reasoning.h"
#include "prometheus/text_serializer.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;
constexpr char kParamPayload[] = "moesplit/param";

absl::Status WithParam(absl::Status s, const std::string& param) {
  s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

absl::Status Bad(const std::string& param, const std::string& message) {
  return WithParam(absl::InvalidArgumentError(message), param);
}

int HttpStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

// The parameter an error is about: the payload, else a known field name
// that opens the message (the sampling validator names its field first).
Json ParamOf(const absl::Status& s) {
  if (auto p = s.GetPayload(kParamPayload)) return std::string(*p);
  const std::string m(s.message());
  for (const char* f : {"temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                        "presence_penalty", "frequency_penalty", "logprobs", "max_tokens",
                        "messages", "stop", "prompt", "seed"}) {
    if (m.rfind(f, 0) == 0) return f;
  }
  return nullptr;
}

Json ErrorJson(const absl::Status& s) {
  const int http = HttpStatus(s);
  const char* type = http == 400 || http == 404 ? "invalid_request_error"
                     : http == 429           ? "rate_limit_exceeded"
                                             : "server_error";
  Json code = nullptr;
  if (s.code() == absl::StatusCode::kNotFound) code = "model_not_found";
  if (http == 429) code = "server_busy";
  return Json{{"error",
               {{"message", std::string(s.message())}, {"type", type}, {"param", ParamOf(s)},
                {"code", code}}}};
}

void SendError(httplib::Response& res, const absl::Status& s) {
  res.status = HttpStatus(s);
  if (res.status == 429) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(s).dump(-1, ' ', false, Json::error_handler_t::replace),
                  "application/json");
}

// --- request fields

absl::StatusOr<double> Number(const Json& body, const char* key, double def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_number()) return Bad(key, absl::StrCat(key, " must be a number"));
  return it->get<double>();
}

absl::StatusOr<int64_t> Integer(const Json& body, const char* key, int64_t def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_number_integer()) return Bad(key, absl::StrCat(key, " must be an integer"));
  return it->get<int64_t>();
}

absl::StatusOr<bool> Bool(const Json& body, const char* key, bool def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_boolean()) return Bad(key, absl::StrCat(key, " must be true or false"));
  return it->get<bool>();
}

struct Common {
  GenerateParams params;
  bool stream = false;
  bool include_usage = false;
  int top_logprobs = 0;
  bool logprobs = false;
};

// Fields shared by both endpoints. `chat`: logprobs is a bool plus
// top_logprobs (chat) or an integer 0..5 (completions).
absl::Status ParseCommon(const Json& body, bool chat, const ServedModel& served, Common* c) {
  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return Bad("model", "model must be a string");
    RETURN_IF_ERROR(WithParam(served.CheckName(m->get<std::string>()), "model"));
  }
  ASSIGN_OR_RETURN(int64_t n, Integer(body, "n", 1));
  if (n != 1) return Bad("n", absl::StrCat("n must be 1 (got ", n, ")"));
  const char* max_key = chat && body.contains("max_completion_tokens") ? "max_completion_tokens"
                                                                        : "max_tokens";
  ASSIGN_OR_RETURN(int64_t max_tokens, Integer(body, max_key, chat ? 0 : 16));
  if (max_tokens < 0 || max_tokens > INT32_MAX) {
    return Bad(max_key, absl::StrCat(max_key, " must be >= 0, got ", max_tokens));
  }
  c->params.max_tokens = static_cast<int>(max_tokens);
  SamplingParams& s = c->params.sampling;
  ASSIGN_OR_RETURN(double t, Number(body, "temperature", 1.0));
  ASSIGN_OR_RETURN(double top_p, Number(body, "top_p", 1.0));
  ASSIGN_OR_RETURN(int64_t top_k, Integer(body, "top_k", 0));
  ASSIGN_OR_RETURN(double min_p, Number(body, "min_p", 0.0));
  ASSIGN_OR_RETURN(double rep, Number(body, "repetition_penalty", 1.0));
  ASSIGN_OR_RETURN(double pres, Number(body, "presence_penalty", 0.0));
  ASSIGN_OR_RETURN(double freq, Number(body, "frequency_penalty", 0.0));
  s.temperature = static_cast<float>(t);
  s.top_p = static_cast<float>(top_p);
  if (top_k < 0 || top_k > INT32_MAX) return Bad("top_k", absl::StrCat("top_k must be >= 0, got ", top_k));
  s.top_k = static_cast<int32_t>(top_k);
  s.min_p = static_cast<float>(min_p);
  s.repetition_penalty = static_cast<float>(rep);
  s.presence_penalty = static_cast<float>(pres);
  s.frequency_penalty = static_cast<float>(freq);
  if (auto seed = body.find("seed"); seed != body.end() && !seed->is_null()) {
    if (!seed->is_number_integer()) return Bad("seed", "seed must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
    s.has_seed = true;
  }
  if (chat) {
    ASSIGN_OR_RETURN(c->logprobs, Bool(body, "logprobs", false));
    ASSIGN_OR_RETURN(int64_t top, Integer(body, "top_logprobs", 0));
    if (top < 0 || top > kMaxTopLogprobs) {
      return Bad("top_logprobs", absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs,
                                              "], got ", top));
    }
    c->top_logprobs = static_cast<int>(top);
  } else {
    ASSIGN_OR_RETURN(int64_t lp, Integer(body, "logprobs", 0));
    if (lp < 0 || lp > 5) return Bad("logprobs", absl::StrCat("logprobs must be in [0, 5], got ", lp));
    c->logprobs = body.contains("logprobs") && !body["logprobs"].is_null();
    c->top_logprobs = static_cast<int>(lp);
  }
  s.return_logprob = c->logprobs;
  s.logprobs = c->logprobs ? c->top_logprobs : 0;
  if (auto stop = body.find("stop"); stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      c->params.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& x : *stop) {
        if (!x.is_string()) return Bad("stop", "stop must be a string or an array of strings");
        c->params.stop.push_back(x.get<std::string>());
      }
    } else {
      return Bad("stop", "stop must be a string or an array of strings");
    }
  }
  ASSIGN_OR_RETURN(c->stream, Bool(body, "stream", false));
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Bad("stream_options", "stream_options must be an object");
    ASSIGN_OR_RETURN(c->include_usage, Bool(*so, "include_usage", false));
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseBody(const httplib::Request& req) {
  Json body;
  try {
    body = Json::parse(req.body);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the request body is not valid JSON: ", e.what()));
  }
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  return body;
}

Json Usage(const GenerateOutcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens}};
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat(prefix, Now(), "-", next.fetch_add(1));
}

// One request in flight: what the endpoint-specific code needs to build
// its JSON.
struct Job {
  bool chat = false;
  Common c;
  std::string prompt_text;  // chat: the rendered prompt (reasoning detection)
  std::string id;
  int64_t created = 0;
  std::string model;
};

Json FinishReason(const std::string& r) { return r == "cancelled" ? Json("stop") : Json(r); }

class Api {
 public:
  explicit Api(ServedModel served) : served_(std::move(served)) {}

  void Completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string endpoint = chat ? "chat_completions" : "completions";
    Job job;
    job.chat = chat;
    absl::StatusOr<std::shared_ptr<RequestHandle>> handle = Prepare(req, &job);
    if (!handle.ok()) {
      served_.engine->metrics().CountRequest("http", endpoint,
                                             ServingMetrics::Outcome(handle.status()));
      SendError(res, handle.status());
      return;
    }
    if (job.c.stream) {
      Stream(std::move(*handle), std::move(job), res, endpoint);
    } else {
      Whole(**handle, job, res, endpoint);
    }
  }

  void Models(httplib::Response& res) {
    Json m = {{"id", served_.name},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "moesplit"},
              {"context_length", served_.engine->n_ctx()}};
    res.set_content(Dump(Json{{"object", "list"}, {"data", Json::array({m})}}),
                    "application/json");
    served_.engine->metrics().CountRequest("http", "models", "ok");
  }

  void Metrics(httplib::Response& res) {
    prometheus::TextSerializer ser;
    res.set_content(ser.Serialize(served_.engine->registry().Collect()),
                    "text/plain; version=0.0.4");
  }

 private:
  absl::StatusOr<std::shared_ptr<RequestHandle>> Prepare(const httplib::Request& req, Job* job) {
    ASSIGN_OR_RETURN(Json body, ParseBody(req));
    RETURN_IF_ERROR(ParseCommon(body, job->chat, served_, &job->c));
    const Tokenizer& tok = served_.engine->tokenizer();
    if (job->chat) {
      auto m = body.find("messages");
      if (m == body.end()) return Bad("messages", "messages is required");
      ChatPromptOptions co;
      if (auto k = body.find("chat_template_kwargs"); k != body.end() && k->is_object()) {
        ASSIGN_OR_RETURN(co.enable_thinking, Bool(*k, "enable_thinking", true));
      }
      absl::StatusOr<std::string> prompt = served_.chat->Render(*m, co);
      if (!prompt.ok()) return WithParam(prompt.status(), "messages");
      job->prompt_text = *prompt;
      const bool has_bos = !served_.chat->bos_token().empty() &&
                           prompt->rfind(served_.chat->bos_token(), 0) == 0;
      ASSIGN_OR_RETURN(job->c.params.prompt, tok.Encode(*prompt, true, !has_bos));
    } else {
      auto p = body.find("prompt");
      if (p == body.end()) return Bad("prompt", "prompt is required");
      if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = p->begin();
      if (p->is_string()) {
        ASSIGN_OR_RETURN(job->c.params.prompt, tok.Encode(p->get<std::string>(), true));
      } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
        for (const auto& t : *p) {
          if (!t.is_number_integer()) return Bad("prompt", "prompt token ids must be integers");
          job->c.params.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
      } else {
        return Bad("prompt", "prompt must be a string, one string in an array, or token ids");
      }
    }
    job->id = NewId(job->chat ? "chatcmpl-" : "cmpl-");
    job->created = Now();
    job->model = served_.name;
    absl::StatusOr<std::shared_ptr<RequestHandle>> h = served_.engine->Submit(job->c.params);
    if (!h.ok() && h.status().code() == absl::StatusCode::kInvalidArgument &&
        ParamOf(h.status()).is_null()) {
      return WithParam(h.status(), job->chat ? "messages" : "prompt");
    }
    return h;
  }

  Json LogprobsJson(const Job& job, const std::vector<SampledToken>& toks) {
    const Tokenizer& tok = served_.engine->tokenizer();
    if (job.chat) {
      Json content = Json::array();
      for (const SampledToken& s : toks) {
        Json top = Json::array();
        for (const TokenLogprob& t : s.top_logprobs) {
          top.push_back({{"token", tok.Piece(t.token)}, {"logprob", t.logprob}, {"bytes", nullptr}});
        }
        content.push_back({{"token", tok.Piece(s.token)},
                           {"logprob", s.logprob},
                           {"bytes", nullptr},
                           {"top_logprobs", std::move(top)}});
      }
      return {{"content", std::move(content)}};
    }
    Json tokens = Json::array(), lps = Json::array(), tops = Json::array();
    for (const SampledToken& s : toks) {
      tokens.push_back(tok.Piece(s.token));
      lps.push_back(s.logprob);
      Json top = Json::object();
      for (const TokenLogprob& t : s.top_logprobs) top[tok.Piece(t.token)] = t.logprob;
      tops.push_back(std::move(top));
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}};
  }

  void Whole(RequestHandle& h, const Job& job, httplib::Response& res, const std::string& ep) {
    std::string text;
    std::vector<SampledToken> sampled;
    absl::StatusOr<GenerateOutcome> o = h.Wait([&](const GenerateDelta& d) {
      text += d.text;
      if (job.c.logprobs) sampled.push_back(d.sampled);
      return true;
    });
    served_.engine->metrics().CountRequest("http", ep, ServingMetrics::Outcome(o.status()));
    if (!o.ok()) return SendError(res, o.status());
    Json choice = {{"index", 0}};
    if (job.chat) {
      chat::ReasoningSplit split =
          chat::SplitReasoning(text, chat::PromptOpensReasoning(job.prompt_text));
      Json msg = {{"role", "assistant"}, {"content", split.content}};
      if (!split.reasoning_content.empty()) msg["reasoning_content"] = split.reasoning_content;
      choice["message"] = std::move(msg);
    } else {
      choice["text"] = text;
    }
    choice["logprobs"] = job.c.logprobs ? LogprobsJson(job, sampled) : Json(nullptr);
    choice["finish_reason"] = FinishReason(o->finish_reason);
    Json out = {{"id", job.id},
                {"object", job.chat ? "chat.completion" : "text_completion"},
                {"created", job.created},
                {"model", job.model},
                {"choices", Json::array({std::move(choice)})},
                {"usage", Usage(*o)}};
    res.set_content(Dump(out), "application/json");
  }

  Json Chunk(const Job& job, Json choice) {
    return {{"id", job.id},
            {"object", job.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", job.created},
            {"model", job.model},
            {"choices", Json::array({std::move(choice)})}};
  }

  Json ChoiceDelta(const Job& job, const chat::ReasoningSplit& split, const std::string& text) {
    Json c = {{"index", 0}};
    if (job.chat) {
      Json delta = Json::object();
      if (!split.reasoning_content.empty()) delta["reasoning_content"] = split.reasoning_content;
      if (!split.content.empty() || split.reasoning_content.empty()) delta["content"] = split.content;
      c["delta"] = std::move(delta);
    } else {
      c["text"] = text;
    }
    c["logprobs"] = nullptr;
    c["finish_reason"] = nullptr;
    return c;
  }

  void Stream(std::shared_ptr<RequestHandle> h, Job job, httplib::Response& res,
              const std::string& ep) {
    auto ended = std::make_shared<std::atomic<bool>>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, h, job, ep, ended](size_t, httplib::DataSink& sink) {
          auto send = [&](const Json& j) {
            const std::string line = absl::StrCat("data: ", Dump(j), "\n\n");
            return sink.write(line.data(), line.size());
          };
          chat::ReasoningStream reasoning(chat::PromptOpensReasoning(job.prompt_text));
          bool ok = true;
          if (job.chat) {
            ok = send(Chunk(job, {{"index", 0},
                                  {"delta", {{"role", "assistant"}, {"content", ""}}},
                                  {"logprobs", nullptr},
                                  {"finish_reason", nullptr}}));
          }
          absl::StatusOr<GenerateOutcome> o = h->Wait(
              [&](const GenerateDelta& d) {
                chat::ReasoningSplit split;
                if (job.chat) split = reasoning.Push(d.text);
                Json c = ChoiceDelta(job, split, d.text);
                if (job.c.logprobs) c["logprobs"] = LogprobsJson(job, {d.sampled});
                ok = ok && send(Chunk(job, std::move(c)));
                return ok;
              },
              [&] { return !ok; });
          *ended = true;
          const std::string outcome =
              !o.ok() ? ServingMetrics::Outcome(o.status())
                      : (!ok || o->finish_reason == "cancelled" ? "cancelled" : "ok");
          served_.engine->metrics().CountRequest("http", ep, outcome);
          if (!ok) return false;  // the client is gone
          if (!o.ok()) {
            send(ErrorJson(o.status()));
          } else {
            chat::ReasoningSplit rest;
            if (job.chat) rest = reasoning.Finish();
            Json c = ChoiceDelta(job, rest, "");
            if (job.chat && rest.content.empty() && rest.reasoning_content.empty()) {
              c["delta"] = Json::object();
            }
            c["finish_reason"] = FinishReason(o->finish_reason);
            send(Chunk(job, std::move(c)));
            if (job.c.include_usage) {
              Json u = Chunk(job, nullptr);
              u["choices"] = Json::array();
              u["usage"] = Usage(*o);
              send(u);
            }
          }
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        },
        [h, ended](bool) {
          if (!*ended) h->Cancel();  // never streamed: the client left first
        });
  }

  const ServedModel served_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host_port,
                                                              ServedModel served) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--http wants HOST:PORT, got '", host_port, "'"));
  }
  const std::string host = host_port.substr(0, colon);
  const int want = std::atoi(host_port.c_str() + colon + 1);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  httplib::Server& svr = *s->server_;
  const size_t threads = static_cast<size_t>(
      std::min(512, served.engine->max_sequences() + served.engine->max_queue() + 8));
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  auto api = std::make_shared<Api>(served);
  svr.Post("/v1/chat/completions", [api](const httplib::Request& q, httplib::Response& r) {
    api->Completions(q, r, true);
  });
  svr.Post("/v1/completions", [api](const httplib::Request& q, httplib::Response& r) {
    api->Completions(q, r, false);
  });
  svr.Get("/v1/models", [api](const httplib::Request&, httplib::Response& r) { api->Models(r); });
  svr.Get("/health", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("{\"status\":\"ok\"}", "application/json");
  });
  svr.Get("/metrics", [api](const httplib::Request&, httplib::Response& r) { api->Metrics(r); });
  svr.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
    if (!r.body.empty()) return;
    SendError(r, r.status == 404
                     ? absl::Status(absl::StatusCode::kNotFound,
                                    absl::StrCat("no route ", q.method, " ", q.path))
                     : absl::InternalError(absl::StrCat("HTTP status ", r.status)));
  });
  s->port_ = want == 0 ? svr.bind_to_any_port(host) : (svr.bind_to_port(host, want) ? want : -1);
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host_port, " (HTTP)"));
  }
  s->thread_ = std::thread([&svr] { svr.listen_after_bind(); });
  return s;
}

HttpServer::~HttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace moesplit::dense
