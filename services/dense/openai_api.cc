#include "services/dense/openai_api.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/base/utf8.h"
#include "common/chat/reasoning.h"
#include "common/sampling/token_constraint.h"
#include "services/dense/anthropic_api.h"
#include "services/dense/chat_tools.h"
#include "services/dense/llama_fields.h"
#include "services/dense/readiness.h"
#include "services/dense/request_limits.h"
#include "services/dense/request_log.h"
#include "services/dense/response_format.h"
#include "services/dense/responses_api.h"
#include "services/dense/volatile_system.h"
#include "prometheus/text_serializer.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

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
                        "messages", "stop", "prompt", "seed", "tools", "tool_choice",
                        "parallel_tool_calls", "response_format", "ignore_eos", "typical_p",
                        "top_n_sigma", "xtc_probability", "xtc_threshold", "logit_bias"}) {
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
  if (auto c = s.GetPayload(kErrorCodePayload)) code = std::string(*c);
  Json error = {{"message", std::string(s.message())}, {"type", type}, {"param", ParamOf(s)},
                {"code", code}};
  size_t n_prompt_tokens = 0;
  int n_ctx = 0;
  if (ContextOverflowOf(s, &n_prompt_tokens, &n_ctx)) {
    error["code"] = "context_length_exceeded";
    error["n_prompt_tokens"] = n_prompt_tokens;
    error["n_ctx"] = n_ctx;
  }
  return Json{{"error", std::move(error)}};
}

HttpReply ErrorReply(const absl::Status& s) {
  HttpReply r;
  r.status = HttpStatus(s);
  if (r.status == 429) r.headers.emplace_back("Retry-After", "1");
  r.body = ErrorJson(s).dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
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
  // response_format constrains the output: the answer is the JSON as
  // generated (not split into reasoning, content and calls).
  bool json_output = false;
  int n = 1;  // choices
};

// llama-server's n_probs: the top-n alternatives of every token, reported
// where the route reports logprobs (chat: logprobs.content with top_logprobs;
// completions: logprobs.top_logprobs), as llama-server does on these routes.
// It agrees with logprobs/top_logprobs when both are given.
absl::Status ParseNProbs(const Json& body, Common* c) {
  ASSIGN_OR_RETURN(int64_t n, Integer(body, "n_probs", 0));
  if (n < 0 || n > kMaxTopLogprobs) {
    return Bad("n_probs", absl::StrCat("n_probs must be in [0, ", kMaxTopLogprobs, "], got ", n));
  }
  if (n == 0) return absl::OkStatus();
  if (c->logprobs && c->top_logprobs != n) {
    return Bad("n_probs", absl::StrCat("n_probs (", n, ") and ", "top_logprobs/logprobs (",
                                       c->top_logprobs, ") disagree: give one"));
  }
  c->logprobs = true;
  c->top_logprobs = static_cast<int>(n);
  return absl::OkStatus();
}

// Fields shared by both endpoints. `chat`: logprobs is a bool plus
// top_logprobs (chat) or an integer 0..5 (completions).
absl::Status ParseCommon(const Json& body, bool chat, const ServedModel& served, Common* c) {
  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return Bad("model", "model must be a string");
    RETURN_IF_ERROR(WithParam(served.CheckName(m->get<std::string>()), "model"));
  }
  ASSIGN_OR_RETURN(int64_t n, Integer(body, "n", 1));
  // n choices run as n sequences at once, so at most --parallel.
  const int max_n = served.engine->max_sequences();
  if (n < 1 || n > max_n) {
    return Bad("n", absl::StrCat("n must be in 1..", max_n, " (--parallel), got ", n));
  }
  c->n = static_cast<int>(n);
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
  ASSIGN_OR_RETURN(c->params.ignore_eos, Bool(body, "ignore_eos", false));
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
    if (top > 0 && !c->logprobs) {
      return Bad("top_logprobs", "top_logprobs requires logprobs: true");
    }
    c->top_logprobs = static_cast<int>(top);
  } else {
    ASSIGN_OR_RETURN(int64_t lp, Integer(body, "logprobs", 0));
    if (lp < 0 || lp > 5) return Bad("logprobs", absl::StrCat("logprobs must be in [0, 5], got ", lp));
    c->logprobs = body.contains("logprobs") && !body["logprobs"].is_null();
    c->top_logprobs = static_cast<int>(lp);
  }
  RETURN_IF_ERROR(ParseNProbs(body, c));
  s.return_logprob = c->logprobs;
  s.logprobs = c->logprobs ? c->top_logprobs : 0;
  if (auto stop = body.find("stop"); stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      c->params.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      RETURN_IF_ERROR(WithParam(CheckStopCount(stop->size()), "stop"));
      for (const auto& x : *stop) {
        if (!x.is_string()) return Bad("stop", "stop must be a string or an array of strings");
        c->params.stop.push_back(x.get<std::string>());
      }
    } else {
      return Bad("stop", "stop must be a string or an array of strings");
    }
  }
  ASSIGN_OR_RETURN(c->stream, Bool(body, "stream", false));
  // llama-server's return_progress: prompt_progress chunks while the prompt
  // is evaluated (streams only, as llama-server sends them).
  ASSIGN_OR_RETURN(const bool progress, Bool(body, "return_progress", false));
  c->params.report_progress = progress && c->stream;
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Bad("stream_options", "stream_options must be an object");
    ASSIGN_OR_RETURN(c->include_usage, Bool(*so, "include_usage", false));
  }
  if (auto rf = body.find("response_format"); rf != body.end()) {
    absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = CompileResponseFormat(*rf);
    if (!g.ok()) return WithParam(g.status(), "response_format");
    c->params.constraint = *std::move(g);
    c->json_output = c->params.constraint != nullptr;
  }
  ASSIGN_OR_RETURN(LlamaFields llama, ParseLlamaFields(body, served.engine->tokenizer(),
                                                       served.engine->max_sequences(), &c->params));
  if (llama.grammar != nullptr) {
    if (c->params.constraint != nullptr) {
      return Bad("grammar", "grammar and response_format constrain the output both: give one");
    }
    c->params.constraint = std::move(llama.grammar);
    c->json_output = true;  // the answer is the constrained text, whole
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseBody(const std::string& text) {
  Json body;
  try {
    body = Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the request body is not valid JSON: ", e.what()));
  }
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  return body;
}

Json Usage(const GenerateOutcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
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

struct Job;
std::string IdFor(const Job& job);

// One request in flight: what the endpoint-specific code needs to build
// its JSON.
struct Job {
  bool chat = false;
  bool anthropic = false;   // Anthropic's Messages API (chat too)
  bool responses = false;   // OpenAI's Responses API (chat too)
  ResponsesRequest resp;    // responses: the request's echo, history, store
  std::shared_ptr<ResponseStore> store;  // responses: where it is stored
  Common c;
  std::string prompt_text;  // chat: the rendered prompt (reasoning detection)
  ToolRequest tools;        // chat: tools, tool_choice, parallel_tool_calls
  std::string id;
  int64_t created = 0;
  std::string model;
};

std::string IdFor(const Job& job) {
  return NewId(job.anthropic ? "msg_" : job.responses ? "resp_" : job.chat ? "chatcmpl-" : "cmpl-");
}

Json FinishReason(const std::string& r) { return r == "cancelled" ? Json("stop") : Json(r); }


// Fails when a text prompt of `bytes` bytes cannot fit the context: every
// token covers at most `max_token_bytes` bytes of text, so such a prompt has
// at least bytes / max_token_bytes tokens (invalid UTF-8 only grows it).
absl::Status CheckPromptBytes(size_t bytes, size_t max_token_bytes, int n_ctx,
                              const char* param) {
  const size_t at_least = (bytes + max_token_bytes - 1) / max_token_bytes;
  if (at_least < static_cast<size_t>(n_ctx)) return absl::OkStatus();
  return WithParam(ContextOverflowError(at_least, n_ctx, /*at_least=*/true,
                                        absl::StrCat(" (", bytes, " bytes)")),
                   param);
}

// Tokenizes a prompt, stopping once it cannot fit the context.
absl::StatusOr<std::vector<int32_t>> EncodePrompt(const Tokenizer& tok, const std::string& text,
                                                  bool add_special, int n_ctx,
                                                  const char* param) {
  absl::StatusOr<std::vector<int32_t>> ids = EncodeWithinContext(tok, text, add_special, n_ctx);
  if (ids.ok() || ids.status().code() != absl::StatusCode::kInvalidArgument) return ids;
  return WithParam(ids.status(), param);
}

// The parts of a request body that become a prompt; `job->c` parsed first.
// A chat request's prompt text: its messages (volatile system text left
// out), tools and template kwargs through the chat template; `job->tools`
// gets the request's tools.
absl::StatusOr<std::string> RenderChatPrompt(const Json& body, const ServedModel& served,
                                             Job* job) {
  auto m = body.find("messages");
  if (m == body.end()) return Bad("messages", "messages is required");
  if (m->is_array()) {
    RETURN_IF_ERROR(WithParam(CheckMessageCount(m->size()), "messages"));
  }
  ChatPromptOptions co;
  // chat_template_kwargs: every key becomes a template variable (as
  // llama-server passes them); enable_thinking also steers the thinking
  // defaults. reasoning_effort (OpenAI's field) is the variable gpt-oss's
  // template reads, as llama-server passes it.
  if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) return Bad("chat_template_kwargs", "chat_template_kwargs must be an object");
    ASSIGN_OR_RETURN(co.enable_thinking, Bool(*k, "enable_thinking", true));
    co.extra_context = Json::object();
    for (auto it = k->begin(); it != k->end(); ++it) co.extra_context[it.key()] = it.value();
  }
  if (auto e = body.find("reasoning_effort"); e != body.end() && !e->is_null()) {
    static constexpr std::string_view kEfforts[] = {"minimal", "low", "medium", "high"};
    if (!e->is_string() ||
        std::find(std::begin(kEfforts), std::end(kEfforts), e->get<std::string>()) ==
            std::end(kEfforts)) {
      return Bad("reasoning_effort",
                 "reasoning_effort must be one of \"minimal\", \"low\", \"medium\", \"high\"");
    }
    if (co.extra_context.is_null()) co.extra_context = Json::object();
    co.extra_context["reasoning_effort"] = *e;
  }
  // llama-server's add_generation_prompt and continue_final_message (a
  // trailing assistant message is continued either way: chat_prompt.h).
  ASSIGN_OR_RETURN(co.add_generation_prompt, Bool(body, "add_generation_prompt", true));
  if (auto c = body.find("continue_final_message"); c != body.end() && !c->is_null() && *c != Json(false)) {
    if (*c == Json(true)) {
      co.continue_final_message = ContinueFinalMessage::kAuto;
    } else if (*c == Json("content")) {
      co.continue_final_message = ContinueFinalMessage::kContent;
    } else if (*c == Json("reasoning_content")) {
      co.continue_final_message = ContinueFinalMessage::kReasoning;
    } else {
      return Bad("continue_final_message",
                 "continue_final_message must be true, false, \"content\" or \"reasoning_content\"");
    }
  }
  auto field = [&](const char* key) { return body.contains(key) ? body[key] : Json(); };
  ASSIGN_OR_RETURN(job->tools, ParseToolRequest(field("tools"), field("tool_choice"),
                                                field("parallel_tool_calls")));
  if (job->tools.offered()) co.tools = job->tools.tools;
  absl::StatusOr<std::string> prompt = served.chat->Render(
      served.volatile_system != nullptr ? served.volatile_system->StripMessages(*m) : *m, co);
  if (!prompt.ok()) {
    const bool cont = absl::StartsWith(prompt.status().message(), "continue_final_message");
    return WithParam(prompt.status(), cont ? "continue_final_message" : "messages");
  }
  return prompt;
}

absl::Status PreparePrompt(const Json& body, const ServedModel& served, size_t max_token_bytes,
                           Job* job) {
  const Tokenizer& tok = served.engine->tokenizer();
  const int n_ctx = served.engine->n_ctx();
  if (job->chat) {
    absl::StatusOr<std::string> prompt = RenderChatPrompt(body, served, job);
    if (!prompt.ok()) return prompt.status();
    // tool_choice required / named: a call is forced (before response_format).
    absl::StatusOr<std::shared_ptr<const grammar::Grammar>> call = ToolChoiceConstraint(
        job->tools, served.chat->tool_family(), chat::PromptOpensReasoning(*prompt, served.chat->output_format()),
        VocabIndex::SpecialTokenTest(tok));
    if (!call.ok()) {
      return WithParam(call.status(), served.chat->tool_family() == chat::ToolCallFamily::kNone ? "tool_choice" : "tools");
    }
    if (*call != nullptr) {
      if (auto g = body.find("grammar"); g != body.end() && g->is_string() && !g->empty()) {
        return Bad("grammar",
                   "grammar cannot be combined with a forced tool call (tool_choice required or "
                   "a named function): both constrain the output");
      }
      job->c.params.constraint = *std::move(call);
      job->c.json_output = false;
    }
    RETURN_IF_ERROR(CheckPromptBytes(prompt->size(), max_token_bytes, n_ctx, "messages"));
    job->prompt_text = *prompt;
    const bool has_bos = !served.chat->bos_token().empty() &&
                         prompt->rfind(served.chat->bos_token(), 0) == 0;
    ASSIGN_OR_RETURN(job->c.params.prompt,
                     EncodePrompt(tok, *prompt, !has_bos, n_ctx, "messages"));
    return absl::OkStatus();
  }
  auto p = body.find("prompt");
  if (p == body.end()) return Bad("prompt", "prompt is required");
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = p->begin();
  if (p->is_string()) {
    const std::string& text = p->get_ref<const std::string&>();
    RETURN_IF_ERROR(CheckPromptBytes(text.size(), max_token_bytes, n_ctx, "prompt"));
    ASSIGN_OR_RETURN(job->c.params.prompt, EncodePrompt(tok, text, true, n_ctx, "prompt"));
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    if (p->size() >= static_cast<size_t>(n_ctx)) {
      return WithParam(ContextOverflowError(p->size(), n_ctx, /*at_least=*/false), "prompt");
    }
    for (const auto& t : *p) {
      if (!t.is_number_integer()) return Bad("prompt", "prompt token ids must be integers");
      job->c.params.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  } else {
    return Bad("prompt", "prompt must be a string, one string in an array, or token ids");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RequestHandle>> Prepare(const std::string& text,
                                                       const ServedModel& served,
                                                       size_t max_token_bytes, Job* job) {
  ASSIGN_OR_RETURN(Json body, ParseBody(text));
  if (job->anthropic) {
    ASSIGN_OR_RETURN(body, AnthropicToChat(body, /*count_tokens=*/false));
  }
  if (job->responses) {
    ASSIGN_OR_RETURN(job->resp, ResponsesToChat(body, job->store.get()));
    body = job->resp.chat;
    job->resp.echo["model"] = served.name;  // the model that answers, as on the chat routes
  }
  RETURN_IF_ERROR(ParseCommon(body, job->chat, served, &job->c));
  RETURN_IF_ERROR(PreparePrompt(body, served, max_token_bytes, job));
  job->id = IdFor(*job);
  job->created = Now();
  job->model = served.name;
  absl::StatusOr<std::shared_ptr<RequestHandle>> h = served.engine->Submit(job->c.params);
  if (!h.ok() && h.status().code() == absl::StatusCode::kInvalidArgument &&
      ParamOf(h.status()).is_null()) {
    return WithParam(h.status(), job->chat ? "messages" : "prompt");
  }
  return h;
}

// /v1/messages/count_tokens: the prompt's tokens, nothing submitted.
absl::StatusOr<size_t> CountPromptTokens(const std::string& text, const ServedModel& served,
                                         size_t max_token_bytes, Job* job) {
  ASSIGN_OR_RETURN(Json body, ParseBody(text));
  ASSIGN_OR_RETURN(body, AnthropicToChat(body, /*count_tokens=*/true));
  RETURN_IF_ERROR(ParseCommon(body, /*chat=*/true, served, &job->c));
  RETURN_IF_ERROR(PreparePrompt(body, served, max_token_bytes, job));
  return job->c.params.prompt.size();
}

// llama-server's POST /tokenize: {"tokens": [...]} of `content` (a string,
// or strings and token ids mixed: only the first string gets BOS/EOS);
// with_pieces: [{"id", "piece"}], the piece a string when it is valid
// UTF-8, else its bytes.
absl::StatusOr<Json> TokenizeBody(const std::string& text, const ServedModel& served) {
  ASSIGN_OR_RETURN(Json body, ParseBody(text));
  ASSIGN_OR_RETURN(bool add_special, Bool(body, "add_special", false));
  ASSIGN_OR_RETURN(bool parse_special, Bool(body, "parse_special", true));
  ASSIGN_OR_RETURN(bool with_pieces, Bool(body, "with_pieces", false));
  const Tokenizer& tok = served.engine->tokenizer();
  std::vector<int32_t> ids;
  auto content = body.find("content");
  if (content != body.end()) {
    const Json parts = content->is_array() ? *content : Json::array({*content});
    bool first = true;
    for (const Json& part : parts) {
      if (part.is_string()) {
        ASSIGN_OR_RETURN(std::vector<int32_t> more,
                         tok.Encode(part.get_ref<const std::string&>(), parse_special,
                                    add_special && first));
        ids.insert(ids.end(), more.begin(), more.end());
      } else if (part.is_number_integer() && part.get<int64_t>() >= 0 &&
                 part.get<int64_t>() < tok.n_vocab()) {
        ids.push_back(static_cast<int32_t>(part.get<int64_t>()));
      } else {
        return Bad("content", absl::StrCat("content must be a string or an array of strings and "
                                           "token ids in [0, ",
                                           tok.n_vocab(), ")"));
      }
      first = false;
    }
  }
  Json tokens = Json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string& piece = tok.Piece(id);
    Json p = piece;
    if (!IsValidUtf8(piece)) {
      p = Json::array();
      for (unsigned char c : piece) p.push_back(static_cast<int>(c));
    }
    tokens.push_back({{"id", id}, {"piece", std::move(p)}});
  }
  return Json{{"tokens", std::move(tokens)}};
}

// llama-server's POST /detokenize: {"content": text} of `tokens`.
absl::StatusOr<Json> DetokenizeBody(const std::string& text, const ServedModel& served) {
  ASSIGN_OR_RETURN(Json body, ParseBody(text));
  std::vector<int32_t> ids;
  if (auto t = body.find("tokens"); t != body.end()) {
    if (!t->is_array()) return Bad("tokens", "tokens must be an array of token ids");
    const int32_t n_vocab = served.engine->tokenizer().n_vocab();
    for (const Json& id : *t) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_vocab) {
        return Bad("tokens", absl::StrCat("tokens must be an array of token ids in [0, ", n_vocab,
                                          "), got ", id.dump()));
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  absl::StatusOr<std::string> content = served.engine->tokenizer().Decode(ids);
  if (!content.ok()) return WithParam(content.status(), "tokens");
  return Json{{"content", *content}};
}

// llama-server's POST /apply-template: {"prompt": text}, the chat request's
// prompt as /v1/chat/completions renders it (not tokenized, not run).
absl::StatusOr<Json> ApplyTemplateBody(const std::string& text, const ServedModel& served) {
  ASSIGN_OR_RETURN(Json body, ParseBody(text));
  Job job;
  job.chat = true;
  ASSIGN_OR_RETURN(std::string prompt, RenderChatPrompt(body, served, &job));
  return Json{{"prompt", std::move(prompt)}};
}

// An error answer in the request's API's shape.
HttpReply ErrorReplyFor(const Job& job, const absl::Status& s) {
  if (!job.anthropic) return ErrorReply(s);
  // Anthropic's words for a prompt over the context, which clients (Claude
  // Code's compaction) look for.
  size_t n_prompt_tokens = 0;
  int n_ctx = 0;
  HttpReply r = AnthropicErrorReply(
      HttpStatus(s), ContextOverflowOf(s, &n_prompt_tokens, &n_ctx)
                         ? absl::StrCat("prompt is too long: ", n_prompt_tokens, " tokens > ",
                                        n_ctx, " maximum (", s.message(), ")")
                         : std::string(s.message()));
  if (r.status == 429) r.headers.emplace_back("Retry-After", "1");
  return r;
}

Json LogprobsJson(const Tokenizer& tok, const Job& job, const std::vector<SampledToken>& toks) {
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

Json Chunk(const Job& job, Json choice) {
  return {{"id", job.id},
          {"object", job.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", job.created},
          {"model", job.model},
          {"choices", Json::array({std::move(choice)})}};
}

// A stream's choice: the chat `delta`, or the completion's `text`.
Json ChoiceDelta(const Job& job, Json delta, const std::string& text) {
  Json c = {{"index", 0}};
  if (job.chat) {
    c["delta"] = std::move(delta);
  } else {
    c["text"] = text;
  }
  c["logprobs"] = nullptr;
  c["finish_reason"] = nullptr;
  return c;
}

// choices[index] of a whole answer.
Json WholeChoice(const ServedModel& served, const Job& job, int index, const std::string& text,
                 const std::vector<SampledToken>& sampled, const GenerateOutcome& o) {
  Json choice = {{"index", index}};
  bool has_calls = false;
  if (job.chat) {
    ChatDelta split;
    if (job.c.json_output) {
      split.content = text;  // the constrained JSON, whole
    } else {
      split = SplitChatOutput(text, served.chat->output_format(),
                              chat::PromptOpensReasoning(job.prompt_text, served.chat->output_format()),
                              served.chat->tool_family(), job.tools);
    }
    has_calls = !split.tool_calls.empty();
    choice["message"] = ChatMessageJson(split);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] =
      job.c.logprobs ? LogprobsJson(served.engine->tokenizer(), job, sampled) : Json(nullptr);
  choice["finish_reason"] = FinishReason(ToolFinishReason(o.finish_reason, has_calls));
  return choice;
}

HttpReply WholeReply(const Job& job, Json choices, const GenerateOutcome& usage,
                     const RequestTimings& timings) {
  Json body = {{"id", job.id},
               {"object", job.chat ? "chat.completion" : "text_completion"},
               {"created", job.created},
               {"model", job.model},
               {"choices", std::move(choices)},
               {"usage", Usage(usage)},
               {"timings", LlamaTimings(timings)}};
  HttpReply r;
  r.body = Dump(body);
  return r;
}

// One completion request in flight, on its response's executor (the
// connection's strand): the engine's wake-ups (posted by the engine
// thread), the connection's (its write queue drained, the client went
// away) and the start all run Pump there, so the state needs no lock.
//
// n = 1: one request; streamed, each token becomes a chunk as its delta
// arrives, else the text is gathered for one reply. n > 1: choice 0 runs
// first; once its prompt is evaluated (its first token) the others start
// and take the prompt from the prefix cache. With a seed, choice i samples
// with seed + i (so it gives what a single request with that seed gives).
// Usage counts the prompt (and its cached tokens) once and the completion
// tokens of every choice. A failed choice fails the request (the others
// are cancelled); the client leaving cancels all.
//
// Backpressure: while more than kStreamHighWaterBytes wait to be written,
// nothing is taken from the engine (the deltas wait, buffered, in the
// handles; the engine goes on) until the connection says the queue
// drained; a client that stops reading is dropped by the write timeout,
// which cancels its requests.
//
// The object owns itself (self_) until every request ended and the answer
// is queued; the wake-ups hold weak references.
class Completion : public std::enable_shared_from_this<Completion> {
 public:
  Completion(const ServedModel& served, Job job, std::string ep,
             std::shared_ptr<HttpResponder> out, std::function<void()> done)
      : served_(served),
        job_(std::move(job)),
        ep_(std::move(ep)),
        out_(std::move(out)),
        done_(std::move(done)) {}

  // On the responder's executor.
  void Start(std::shared_ptr<RequestHandle> first) {
    self_ = shared_from_this();
    const int n = job_.c.n;
    if (job_.anthropic) anthropic_.emplace(job_.id, job_.model);
    if (job_.responses) {
      responses_.emplace(job_.id, job_.created, job_.resp.echo, job_.resp.summary);
    }
    choices_.resize(n);
    for (Choice& c : choices_) {
      c.reasoning = std::make_unique<ChatOutputStream>(
          served_.chat->output_format(), chat::PromptOpensReasoning(job_.prompt_text, served_.chat->output_format()),
          served_.chat->tool_family(), job_.tools);
    }
    std::weak_ptr<Completion> weak = weak_from_this();
    out_->SetWake([weak] {
      if (auto c = weak.lock()) c->Run();
    });
    hs_.push_back(std::move(first));
    if (n == 1) {
      if (job_.c.stream) StartStream(1);
      submitted_all_ = true;
    }
    Subscribe(0);
    Run();
  }

 private:
  struct Choice {
    std::string text;                  // not streamed: the text so far
    std::vector<SampledToken> sampled;  // not streamed: with logprobs
    std::unique_ptr<ChatOutputStream> reasoning;
    int calls = 0;  // tool calls streamed so far
    bool ended = false;
    absl::StatusOr<GenerateOutcome> outcome = GenerateOutcome{};
  };

  void Subscribe(int i) {
    std::weak_ptr<Completion> weak = weak_from_this();
    // Weak: the engine thread destroys the callback after the request's
    // end, maybe after the server was torn down, so it must own nothing
    // (while it runs, under the handle's lock, the end is not seen yet and
    // the completion holds the responder).
    std::weak_ptr<HttpResponder> out = out_;
    // Engine thread: only a post to the connection's strand.
    hs_[i]->Subscribe([weak, out] {
      if (std::shared_ptr<HttpResponder> o = out.lock()) {
        o->Post([weak] {
          if (auto c = weak.lock()) c->Run();
        });
      }
    });
  }

  void Run() {
    if (finished_) return;
    if (running_) {  // called back from inside Pump (through the responder)
      rerun_ = true;
      return;
    }
    const std::shared_ptr<Completion> keep = shared_from_this();  // End may drop self_
    running_ = true;
    do {
      rerun_ = false;
      RunOnce();
    } while (rerun_ && !finished_);
    running_ = false;
  }

  void RunOnce() {
    try {
      Pump();
    } catch (const std::exception& e) {
      // Nothing more is written; the requests are cancelled and the
      // object ends once the engine confirmed their ends.
      if (!broken_) {
        broken_ = true;
        CancelAll();
        if (!streaming_) {
          out_->Reply(job_.anthropic ? AnthropicErrorReply(500, e.what())
                                     : OpenAiApi::ProtocolError(500, "internal_error", e.what()));
        } else {
          out_->EndStream();
        }
      }
      if (AllEnded()) End();
    }
  }

  void CancelAll() {
    for (auto& h : hs_) h->Cancel();
  }
  bool AllEnded() const {
    if (!submitted_all_) return false;
    for (size_t i = 0; i < hs_.size(); ++i) {
      if (!choices_[i].ended) return false;
    }
    return true;
  }

  void StartStream(int n) {
    HttpReply head;
    head.content_type = "text/event-stream";
    head.headers.emplace_back("Cache-Control", "no-cache");
    out_->StartStream(std::move(head));
    streaming_ = true;
    if (job_.responses) out_->WriteChunk(responses_->Start());
    for (int i = 0; i < n && job_.chat && !job_.anthropic && !job_.responses; ++i) {
      Send(Chunk(job_, {{"index", i},
                        {"delta", {{"role", "assistant"}, {"content", ""}}},
                        {"logprobs", nullptr},
                        {"finish_reason", nullptr}}));
    }
  }

  void Send(const Json& j) { out_->WriteChunk(absl::StrCat("data: ", Dump(j), "\n\n")); }

  // llama-server's progress chunk: an empty delta (chat: role assistant,
  // content null; completions: text "") with prompt_progress.
  void SendProgress(int i, const PromptProgress& p) {
    Json ch = ChoiceDelta(job_, {{"role", "assistant"}, {"content", nullptr}}, "");
    ch["index"] = i;
    Json chunk = Chunk(job_, std::move(ch));
    chunk["prompt_progress"] = {
        {"total", p.total}, {"cache", p.cache}, {"processed", p.processed}, {"time_ms", p.time_ms}};
    Send(chunk);
  }

  void Pump() {
    if (!gone_ && out_->ClientGone()) {
      gone_ = true;
      CancelAll();
    }
    if (!submitted_all_ && (gone_ || hs_[0]->started())) SubmitOthers();
    if (!gone_ && !broken_ && out_->QueuedBytes() > kStreamHighWaterBytes) {
      return;  // the connection wakes us once the queue drained
    }
    std::vector<GenerateDelta> taken;
    for (size_t i = 0; i < hs_.size(); ++i) {
      Choice& c = choices_[i];
      if (c.ended) continue;
      absl::StatusOr<GenerateOutcome> result = GenerateOutcome{};
      std::vector<PromptProgress> progress;
      const bool done = hs_[i]->Take(&taken, &result, &progress);
      if (streaming_ && !gone_ && !broken_ && !job_.anthropic && !job_.responses) {
        for (const PromptProgress& p : progress) SendProgress(static_cast<int>(i), p);
      }
      if (!gone_ && !broken_) {
        for (const GenerateDelta& d : taken) OnDelta(static_cast<int>(i), d);
      }
      taken.clear();
      if (done) {
        c.ended = true;
        c.outcome = std::move(result);
        if (!broken_) OnChoiceEnd(static_cast<int>(i));
      }
    }
    if (AllEnded()) End();
  }

  // n > 1: choice 0 started (or the client is gone): the other choices.
  void SubmitOthers() {
    submitted_all_ = true;
    for (int i = 1; i < job_.c.n && failed_.ok() && !gone_; ++i) {
      GenerateParams p = job_.c.params;
      if (p.sampling.has_seed) p.sampling.seed += static_cast<uint64_t>(i);
      absl::StatusOr<std::shared_ptr<RequestHandle>> h = served_.engine->Submit(std::move(p));
      if (h.ok()) {
        hs_.push_back(std::move(*h));
        Subscribe(static_cast<int>(hs_.size()) - 1);
      } else {
        failed_ = h.status();
        CancelAll();
      }
    }
    if (job_.c.stream && !gone_) StartStream(static_cast<int>(hs_.size()));
  }

  void OnDelta(int i, const GenerateDelta& d) {
    Choice& c = choices_[i];
    if (job_.c.logprobs && !job_.c.stream) c.sampled.push_back(d.sampled);
    if (!job_.c.stream) {
      c.text += d.text;
      return;
    }
    if (job_.anthropic || job_.responses) {
      ChatDelta piece;
      if (job_.c.json_output) {
        piece.content = d.text;  // the constrained JSON, not split
      } else {
        piece = c.reasoning->Push(d.text);
      }
      c.calls += static_cast<int>(piece.tool_calls.size());
      out_->WriteChunk(job_.responses ? responses_->Push(piece)
                                      : AnthropicStart() + anthropic_->Push(piece));
      return;
    }
    // One chunk per token (the text, with the token's logprobs), then one
    // per delta of a call completed by it. Constrained output is the JSON
    // as generated, not split.
    std::vector<Json> deltas = {Json()};
    if (job_.chat && job_.c.json_output) {
      ChatDelta raw;
      raw.content = d.text;
      deltas = ChatDeltasJson(raw, false, &c.calls);
    } else if (job_.chat) {
      deltas = ChatDeltasJson(c.reasoning->Push(d.text), false, &c.calls);
    }
    for (size_t k = 0; k < deltas.size(); ++k) {
      Json ch = ChoiceDelta(job_, std::move(deltas[k]), d.text);
      ch["index"] = i;
      if (k == 0 && job_.c.logprobs) {
        ch["logprobs"] = LogprobsJson(served_.engine->tokenizer(), job_, {d.sampled});
      }
      Send(Chunk(job_, std::move(ch)));
    }
  }

  // What was held back (text, calls), then the choice's last chunk: its
  // delta empty, or the held text when that is all there was. (n = 1: the
  // last chunk also carries the timings unless a usage chunk follows.)
  void LastChunks(int i, const GenerateOutcome& o) {
    Choice& c = choices_[i];
    std::vector<Json> deltas;
    if (job_.chat && !job_.c.json_output) deltas = ChatDeltasJson(c.reasoning->Finish(), true, &c.calls);
    Json last_delta = Json::object();
    if (deltas.size() == 1 && !deltas[0].contains("tool_calls")) {
      last_delta = std::move(deltas[0]);
      deltas.clear();
    }
    for (Json& d : deltas) {
      Json ch = ChoiceDelta(job_, std::move(d), "");
      ch["index"] = i;
      Send(Chunk(job_, std::move(ch)));
    }
    Json ch = ChoiceDelta(job_, std::move(last_delta), "");
    ch["index"] = i;
    ch["finish_reason"] = FinishReason(ToolFinishReason(o.finish_reason, c.calls > 0));
    Json last = Chunk(job_, std::move(ch));
    if (job_.c.n == 1 && !job_.c.include_usage) last["timings"] = LlamaTimings(hs_[0]->timings());
    Send(last);
  }

  void OnChoiceEnd(int i) {
    Choice& c = choices_[i];
    if (!c.outcome.ok()) {
      if (failed_.ok()) failed_ = c.outcome.status();
      CancelAll();
      return;
    }
    // n > 1: each choice's end is streamed as it comes (n = 1: in End).
    if (job_.c.n > 1 && job_.c.stream && !gone_ && failed_.ok()) LastChunks(i, *c.outcome);
  }

  // Every request ended: counted, logged, the answer's end queued.
  void End() {
    finished_ = true;
    if (!broken_) Answer();
    out_->SetWake(nullptr);
    std::function<void()> done = std::move(done_);
    if (done) done();
    self_.reset();  // may destroy this
  }

  void Answer() {
    MetricsAndLog();
    if (gone_) return;
    const RequestTimings timings = hs_[0]->timings();
    if (job_.anthropic) return AnthropicAnswer();
    if (job_.responses) return ResponsesAnswer();
    if (job_.c.n == 1) {
      const absl::StatusOr<GenerateOutcome>& o = choices_[0].outcome;
      if (!job_.c.stream) {
        if (!o.ok()) return out_->Reply(ErrorReply(o.status()));
        return out_->Reply(WholeReply(
            job_, {WholeChoice(served_, job_, 0, choices_[0].text, choices_[0].sampled, *o)}, *o,
            timings));
      }
      if (!o.ok()) {
        Send(ErrorJson(o.status()));
      } else {
        LastChunks(0, *o);
        if (job_.c.include_usage) {
          Json u = Chunk(job_, nullptr);
          u["choices"] = Json::array();
          u["usage"] = Usage(*o);
          u["timings"] = LlamaTimings(timings);
          Send(u);
        }
      }
      out_->WriteChunk("data: [DONE]\n\n");
      return out_->EndStream();
    }
    const int n = static_cast<int>(hs_.size());
    GenerateOutcome usage = failed_.ok() ? *choices_[0].outcome : GenerateOutcome{};
    usage.completion_tokens = 0;
    for (const Choice& c : choices_) {
      if (c.outcome.ok()) usage.completion_tokens += c.outcome->completion_tokens;
    }
    if (!job_.c.stream) {
      if (!failed_.ok()) return out_->Reply(ErrorReply(failed_));
      Json choices = Json::array();
      for (int i = 0; i < n; ++i) {
        choices.push_back(WholeChoice(served_, job_, i, choices_[i].text, choices_[i].sampled,
                                      *choices_[i].outcome));
      }
      return out_->Reply(WholeReply(job_, std::move(choices), usage, timings));
    }
    if (!failed_.ok()) {
      Send(ErrorJson(failed_));
    } else if (job_.c.include_usage) {
      Json u = Chunk(job_, nullptr);
      u["choices"] = Json::array();
      u["usage"] = Usage(usage);
      u["timings"] = LlamaTimings(timings);
      Send(u);
    }
    out_->WriteChunk("data: [DONE]\n\n");
    out_->EndStream();
  }

  // message_start, once, before the stream's first other event: its usage
  // is the prompt's (the prefix cache's share known once it was admitted).
  std::string AnthropicStart() {
    if (anthropic_->started()) return "";
    const RequestTimings t = hs_[0]->timings();
    GenerateOutcome prompt;
    prompt.prompt_tokens = t.prompt_tokens;
    prompt.cached_tokens = t.cached_tokens;
    return anthropic_->Start(AnthropicUsage(prompt));
  }

  // Anthropic's answer (n = 1): the message, or the stream's last events.
  void AnthropicAnswer() {
    Choice& c = choices_[0];
    const absl::StatusOr<GenerateOutcome>& o = c.outcome;
    if (!job_.c.stream) {
      if (!o.ok()) return out_->Reply(ErrorReplyFor(job_, o.status()));
      ChatDelta split;
      if (job_.c.json_output) {
        split.content = c.text;  // the constrained JSON, whole
      } else {
        split = SplitChatOutput(c.text, served_.chat->output_format(),
                                chat::PromptOpensReasoning(job_.prompt_text, served_.chat->output_format()),
                                served_.chat->tool_family(), job_.tools);
      }
      HttpReply r;
      r.body = Dump(AnthropicMessage(job_.id, job_.model, split,
                                     AnthropicStopOf(*o, !split.tool_calls.empty()),
                                     AnthropicUsage(*o)));
      return out_->Reply(std::move(r));
    }
    std::string events = AnthropicStart();
    if (!o.ok()) {
      events += AnthropicStream::Error(HttpStatus(o.status()), std::string(o.status().message()));
    } else {
      const ChatDelta rest = job_.c.json_output ? ChatDelta() : c.reasoning->Finish();
      const bool calls = c.calls > 0 || !rest.tool_calls.empty();
      events += anthropic_->Finish(rest, AnthropicStopOf(*o, calls), AnthropicUsage(*o));
    }
    out_->WriteChunk(std::move(events));
    out_->EndStream();
  }

  // The Responses API's answer (n = 1): the response object, or the
  // stream's last events; stored unless store is false.
  void ResponsesAnswer() {
    Choice& c = choices_[0];
    const absl::StatusOr<GenerateOutcome>& o = c.outcome;
    if (!job_.c.stream) {
      if (!o.ok()) return out_->Reply(ErrorReply(o.status()));
      ChatDelta split;
      if (job_.c.json_output) {
        split.content = c.text;  // the constrained JSON, whole
      } else {
        split = SplitChatOutput(c.text, served_.chat->output_format(),
                                chat::PromptOpensReasoning(job_.prompt_text, served_.chat->output_format()),
                                served_.chat->tool_family(), job_.tools);
      }
      Json response = ResponseObject(
          job_.id, job_.created, job_.resp.echo, "completed",
          ResponsesOutput(job_.id, split, job_.resp.summary),
          ResponsesUsage(*o, ReasoningTokens(split)), o->finish_reason == "length");
      StoreResponse(response, split);
      HttpReply r;
      r.body = Dump(response);
      return out_->Reply(std::move(r));
    }
    std::string events;
    if (!o.ok()) {
      const Json e = ErrorJson(o.status())["error"];
      events = responses_->Error(e["code"].is_string() ? e["code"].get<std::string>()
                                                       : e["type"].get<std::string>(),
                                 std::string(o.status().message()));
    } else {
      const ChatDelta rest = job_.c.json_output ? ChatDelta() : c.reasoning->Finish();
      ChatDelta all = responses_->answer();
      all.reasoning_content += rest.reasoning_content;
      Json response;
      events = responses_->Finish(rest, ResponsesUsage(*o, ReasoningTokens(all)),
                                  o->finish_reason == "length", &response);
      StoreResponse(response, responses_->answer());
    }
    out_->WriteChunk(std::move(events));
    out_->EndStream();
  }

  // The reasoning's tokens: its text re-tokenized.
  int64_t ReasoningTokens(const ChatDelta& answer) const {
    if (answer.reasoning_content.empty()) return 0;
    absl::StatusOr<std::vector<int32_t>> ids =
        served_.engine->tokenizer().Encode(answer.reasoning_content, false, false);
    return ids.ok() ? static_cast<int64_t>(ids->size()) : 0;
  }

  void StoreResponse(const Json& response, const ChatDelta& answer) {
    if (!job_.resp.store || job_.store == nullptr) return;
    Json messages = job_.resp.history;
    messages.push_back(ChatMessageJson(answer));
    job_.store->Put(job_.id, {response, std::move(messages)});
  }

  void MetricsAndLog() {
    const RequestTimings timings = hs_[0]->timings();
    if (job_.c.n == 1) {
      const absl::StatusOr<GenerateOutcome>& o = choices_[0].outcome;
      const bool cancelled = gone_ || (o.ok() && o->finish_reason == "cancelled");
      if (!job_.c.stream) {
        served_.engine->metrics().CountRequest(
            "http", ep_, o.ok() && gone_ ? "cancelled" : ServingMetrics::Outcome(o.status()));
        LogRequest({job_.id, "http", ep_, job_.model, timings,
                    cancelled ? "cancelled" : RequestOutcome(o.status()),
                    o.ok() ? o->finish_reason : ""});
        return;
      }
      const std::string outcome = !o.ok() ? ServingMetrics::Outcome(o.status())
                                  : cancelled ? "cancelled"
                                              : "ok";
      served_.engine->metrics().CountRequest("http", ep_, outcome);
      LogRequest({job_.id, "http", ep_, job_.model, timings,
                  o.ok() ? outcome : RequestOutcome(o.status()), o.ok() ? o->finish_reason : ""});
      return;
    }
    const std::string outcome = !failed_.ok() ? ServingMetrics::Outcome(failed_)
                                : gone_       ? "cancelled"
                                              : "ok";
    served_.engine->metrics().CountRequest("http", ep_, outcome);
    const absl::StatusOr<GenerateOutcome>& o0 = choices_[0].outcome;
    LogRequest({job_.id, "http", ep_, job_.model, timings,
                failed_.ok() ? outcome : RequestOutcome(failed_),
                o0.ok() ? o0->finish_reason : ""});
  }

  const ServedModel& served_;
  const Job job_;
  const std::string ep_;
  const std::shared_ptr<HttpResponder> out_;
  std::function<void()> done_;
  std::shared_ptr<Completion> self_;  // set from Start to End
  std::vector<std::shared_ptr<RequestHandle>> hs_;
  std::vector<Choice> choices_;
  std::optional<AnthropicStream> anthropic_;  // an Anthropic stream's state
  std::optional<ResponsesStream> responses_;  // a Responses stream's state
  bool submitted_all_ = false;  // n > 1: the other choices were submitted
  bool streaming_ = false;      // the stream's head is queued
  bool gone_ = false;           // the client went away: requests cancelled
  bool broken_ = false;         // an exception: nothing more is written
  bool finished_ = false;
  bool running_ = false, rerun_ = false;  // Run's re-entry guard
  absl::Status failed_ = absl::OkStatus();  // n > 1: the first failure
};

}  // namespace

OpenAiApi::OpenAiApi(ServedModel served)
    : served_(std::move(served)),
      responses_(std::make_shared<ResponseStore>(ResponseStore::Options{
          static_cast<size_t>(served_.responses_stored), absl::Seconds(served_.responses_ttl_s)})) {
  const Tokenizer& tok = served_.engine->tokenizer();
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    max_token_bytes_ = std::max(max_token_bytes_, tok.Piece(id).size());
  }
}

struct OpenAiApi::Prepared {
  Job job;
  std::string endpoint;
  absl::StatusOr<std::shared_ptr<RequestHandle>> handle = absl::UnknownError("not prepared");
  std::optional<HttpReply> reply;  // answered without the engine (count_tokens)
};

std::shared_ptr<OpenAiApi::Prepared> OpenAiApi::PrepareCompletion(const std::string& body,
                                                                  Endpoint endpoint) {
  auto p = std::make_shared<Prepared>();
  p->job.chat = endpoint != Endpoint::kCompletions;
  p->job.anthropic = endpoint == Endpoint::kMessages || endpoint == Endpoint::kCountTokens;
  p->job.responses = endpoint == Endpoint::kResponses;
  if (p->job.responses) p->job.store = responses_;
  if (endpoint == Endpoint::kTokenize || endpoint == Endpoint::kDetokenize ||
      endpoint == Endpoint::kApplyTemplate) {
    p->endpoint = endpoint == Endpoint::kTokenize     ? "tokenize"
                  : endpoint == Endpoint::kDetokenize ? "detokenize"
                                                      : "apply_template";
    absl::StatusOr<Json> answer =
        endpoint == Endpoint::kTokenize     ? TokenizeBody(body, served_)
        : endpoint == Endpoint::kDetokenize ? DetokenizeBody(body, served_)
                                            : ApplyTemplateBody(body, served_);
    served_.engine->metrics().CountRequest(
        "http", p->endpoint, answer.ok() ? "ok" : ServingMetrics::Outcome(answer.status()));
    if (answer.ok()) {
      p->reply.emplace();
      p->reply->body = Dump(*answer);
    } else {
      p->reply = ErrorReply(answer.status());
    }
    return p;
  }
  if (endpoint == Endpoint::kCountTokens) {
    p->endpoint = "count_tokens";
    absl::StatusOr<size_t> n = CountPromptTokens(body, served_, max_token_bytes_, &p->job);
    served_.engine->metrics().CountRequest(
        "http", p->endpoint, n.ok() ? "ok" : ServingMetrics::Outcome(n.status()));
    if (n.ok()) {
      p->reply.emplace();
      p->reply->body = Dump(Json{{"input_tokens", *n}});
    } else {
      p->reply = ErrorReplyFor(p->job, n.status());
    }
    return p;
  }
  p->endpoint = endpoint == Endpoint::kChat        ? "chat_completions"
                : endpoint == Endpoint::kMessages  ? "messages"
                : endpoint == Endpoint::kResponses ? "responses"
                                                   : "completions";
  p->handle =
      served_.readiness != nullptr && served_.readiness->draining()
          ? ShuttingDownError("the server is shutting down (draining): not accepting new requests")
          : Prepare(body, served_, max_token_bytes_, &p->job);
  return p;
}

void OpenAiApi::StartCompletion(std::shared_ptr<Prepared> prepared,
                                std::shared_ptr<HttpResponder> out, std::function<void()> done) {
  Prepared& p = *prepared;
  if (p.reply.has_value()) {
    out->Reply(*std::move(p.reply));
    if (done) done();
    return;
  }
  if (!p.handle.ok()) {
    served_.engine->metrics().CountRequest("http", p.endpoint,
                                           ServingMetrics::Outcome(p.handle.status()));
    if (p.job.id.empty()) p.job.id = IdFor(p.job);
    LogRequest({p.job.id, "http", p.endpoint, served_.name, RequestTimings{},
                RequestOutcome(p.handle.status()), ""});
    out->Reply(ErrorReplyFor(p.job, p.handle.status()));
    if (done) done();
    return;
  }
  auto c = std::make_shared<Completion>(served_, std::move(p.job), p.endpoint, std::move(out),
                                        std::move(done));
  c->Start(std::move(*p.handle));
}

namespace {

HttpReply ResponseNotFound(const std::string& id) {
  absl::Status s = absl::NotFoundError(absl::StrCat(
      "Response with id '", id, "' not found (never stored, stored with store: false, deleted "
      "or expired)."));
  s.SetPayload(kErrorCodePayload, absl::Cord("response_not_found"));
  return ErrorReply(s);
}

// OpenAI's model object, with Anthropic's fields beside (type,
// display_name, created_at), so that both SDKs read it.
Json ModelObject(const ServedModel& served, const std::string& id) {
  return {{"id", id},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "moesplit"},
          {"context_length", served.engine->n_ctx()},
          {"type", "model"},
          {"display_name", id},
          {"created_at", "1970-01-01T00:00:00Z"}};
}

}  // namespace

HttpReply OpenAiApi::GetResponse(const std::string& id) {
  std::optional<ResponseStore::Entry> e = responses_->Get(id);
  served_.engine->metrics().CountRequest("http", "responses_get", e ? "ok" : "invalid_argument");
  if (!e.has_value()) return ResponseNotFound(id);
  HttpReply r;
  r.body = Dump(e->response);
  return r;
}

HttpReply OpenAiApi::DeleteResponse(const std::string& id) {
  const bool deleted = responses_->Delete(id);
  served_.engine->metrics().CountRequest("http", "responses_delete", deleted ? "ok" : "invalid_argument");
  if (!deleted) return ResponseNotFound(id);
  HttpReply r;
  r.body = Dump(Json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
  return r;
}

HttpReply OpenAiApi::Models() {
  Json data = Json::array();
  const std::vector<std::string> names = served_.ListedNames();
  for (const std::string& n : names) data.push_back(ModelObject(served_, n));
  HttpReply r;
  // Anthropic's list page (has_more, first_id, last_id) beside OpenAI's.
  r.body = Dump(Json{{"object", "list"},
                     {"data", std::move(data)},
                     {"has_more", false},
                     {"first_id", names.front()},
                     {"last_id", names.back()}});
  served_.engine->metrics().CountRequest("http", "models", "ok");
  return r;
}

HttpReply OpenAiApi::Model(const std::string& id) {
  if (absl::Status s = served_.CheckName(id); !s.ok() || id.empty()) {
    served_.engine->metrics().CountRequest("http", "models", "invalid_argument");
    return ErrorReply(id.empty() ? absl::NotFoundError("no model id given") : s);
  }
  HttpReply r;
  r.body = Dump(ModelObject(served_, id));
  served_.engine->metrics().CountRequest("http", "models", "ok");
  return r;
}

HttpReply OpenAiApi::Metrics() {
  prometheus::TextSerializer ser;
  HttpReply r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = ser.Serialize(served_.engine->registry().Collect());
  return r;
}

HttpReply OpenAiApi::Health() {
  HttpReply r;
  if (served_.readiness == nullptr) {
    r.body = "{\"status\":\"ok\"}";
    return r;
  }
  const ReadinessReport report = served_.readiness->Check();
  r.status = report.ready ? 200 : 503;
  r.body = report.Json();
  return r;
}

HttpReply OpenAiApi::Liveness() {
  HttpReply r;
  r.body = "{\"status\":\"ok\"}";
  return r;
}

HttpReply OpenAiApi::ProtocolError(int http_status, const std::string& code,
                                   const std::string& message) {
  HttpReply r;
  r.status = http_status;
  const char* type = http_status >= 500 ? "server_error" : "invalid_request_error";
  r.body = Dump(Json{{"error",
                      {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}});
  return r;
}

}  // namespace moesplit::dense
