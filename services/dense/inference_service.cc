#include "services/dense/inference_service.h"

#include "services/dense/volatile_system.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"
#include "common/base/utf8.h"
#include "common/chat/reasoning.h"
#include "common/plan/memory_plan.h"
#include "common/sampling/token_constraint.h"
#include "common/transport/grpc_status.h"
#include "services/dense/chat_tools.h"
#include "services/dense/request_limits.h"
#include "services/dense/request_log.h"
#include "services/dense/response_format.h"

namespace moesplit::dense {

namespace v1 = moesplit::v1;
namespace net = boost::asio;

std::string ServedModelName(const model::Model& model, const std::string& path) {
  std::string name = model.file().GetStringOr("general.name", "").value_or("");
  if (!name.empty()) return name;
  name = std::filesystem::path(path).filename().string();
  if (name.size() > 5 && name.substr(name.size() - 5) == ".gguf") name.resize(name.size() - 5);
  return name;
}

absl::Status ServedModel::CheckName(const std::string& requested) const {
  if (requested.empty() || requested == name || requested == default_name) {
    return absl::OkStatus();
  }
  for (const std::string& n : names) {
    if (requested == n) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("model '", IsValidUtf8(requested) ? requested : "?",
                                          "' is not served here (this server serves '",
                                          absl::StrJoin(ListedNames(), "', '"), "')"));
}

std::vector<std::string> ServedModel::ListedNames() const {
  if (!names.empty()) return names;
  return {name};
}

void SetServedNames(const std::string& default_name, const std::string& served_model_names,
                    ServedModel* served) {
  served->default_name = default_name;
  served->names.clear();
  for (absl::string_view n : absl::StrSplit(served_model_names, ',', absl::SkipEmpty())) {
    if (std::find(served->names.begin(), served->names.end(), n) == served->names.end()) {
      served->names.emplace_back(n);
    }
  }
  served->name = served->names.empty() ? default_name : served->names[0];
}

namespace {

// InvalidArgument for a stop list longer than kMaxStop (the HTTP API's
// limit) or naming the first stop string that is not valid UTF-8.
absl::Status CheckStop(const google::protobuf::RepeatedPtrField<std::string>& stop) {
  RETURN_IF_ERROR(CheckStopCount(stop.size()));
  for (int i = 0; i < stop.size(); ++i) {
    if (!IsValidUtf8(stop.Get(i))) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is not valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SamplingParams> ToSampling(const v1::SamplingParams& s, int32_t logprobs) {
  SamplingParams p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  p.top_p = s.top_p() == 0 ? 1.0f : s.top_p();
  p.min_p = s.min_p();
  p.repetition_penalty = s.repetition_penalty() == 0 ? 1.0f : s.repetition_penalty();
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  p.seed = s.seed();
  p.has_seed = s.has_seed() || s.seed() != 0;
  if (logprobs < 0) {
    return absl::InvalidArgumentError(absl::StrCat("logprobs must be >= 0, got ", logprobs));
  }
  p.logprobs = logprobs;
  p.return_logprob = logprobs > 0;
  return p;
}

// The request's ResponseFormat as the HTTP API's response_format, compiled
// (null for none/text); the same errors as there.
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> ToConstraint(
    const v1::ResponseFormat& f) {
  if (f.type().empty()) return nullptr;
  nlohmann::ordered_json rf = {{"type", f.type()}};
  if (f.type() == "json_schema") {
    nlohmann::ordered_json js = nlohmann::ordered_json::object();
    if (!f.name().empty()) js["name"] = f.name();
    js["strict"] = f.strict();
    if (!f.schema().empty()) {
      try {
        js["schema"] = nlohmann::ordered_json::parse(f.schema());
      } catch (const nlohmann::ordered_json::exception& e) {
        return absl::InvalidArgumentError(
            absl::StrCat("response_format.schema is not valid JSON: ", e.what()));
      }
    }
    rf["json_schema"] = std::move(js);
  }
  return CompileResponseFormat(rf);
}

void AddLogprobs(const Tokenizer& tok, const SampledToken& s,
                 google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out) {
  auto add = [&](int32_t id, float lp) {
    v1::TokenLogprob* t = out->Add();
    t->set_token(id);
    if (id >= 0 && id < tok.n_vocab()) {
      const std::string& piece = tok.Piece(id);  // one token: maybe part of a character
      t->set_text(ReplaceInvalidUtf8(piece));
      t->set_text_bytes(piece);
    }
    t->set_logprob(lp);
  };
  add(s.token, s.logprob);
  for (const TokenLogprob& t : s.top_logprobs) add(t.token, t.logprob);
}

// ChatRequest's tools_json / tool_choice_json / no_parallel_tool_calls, as
// the HTTP API's fields. tool_choice_json may also be a bare word (auto).
absl::StatusOr<ToolRequest> ToToolRequest(const v1::ChatRequest& r) {
  using Json = nlohmann::ordered_json;
  Json tools, choice;
  if (!r.tools_json().empty()) {
    tools = Json::parse(r.tools_json(), nullptr, /*allow_exceptions=*/false);
    if (tools.is_discarded()) return absl::InvalidArgumentError("tools_json is not valid JSON");
  }
  if (!r.tool_choice_json().empty()) {
    choice = Json::parse(r.tool_choice_json(), nullptr, /*allow_exceptions=*/false);
    if (choice.is_discarded()) {
      if (!IsValidUtf8(r.tool_choice_json())) {
        return absl::InvalidArgumentError("tool_choice_json is not valid UTF-8");
      }
      choice = r.tool_choice_json();
    }
  }
  return ParseToolRequest(tools, choice, r.no_parallel_tool_calls() ? Json(false) : Json());
}

// The request's messages as the template's JSON (tool calls and results
// included).
absl::StatusOr<nlohmann::ordered_json> ChatMessagesJson(const v1::ChatRequest& r) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (int i = 0; i < r.messages_size(); ++i) {
    const v1::ChatMessage& m = r.messages(i);
    for (const auto& [field, value] :
         {std::pair<const char*, const std::string*>{"role", &m.role()},
          {"content", &m.content()}, {"reasoning_content", &m.reasoning_content()},
          {"tool_call_id", &m.tool_call_id()}}) {
      if (!IsValidUtf8(*value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "].", field, " is not valid UTF-8"));
      }
    }
    nlohmann::ordered_json j = {{"role", m.role()}, {"content", m.content()}};
    if (!m.reasoning_content().empty()) j["reasoning_content"] = m.reasoning_content();
    if (m.tool_calls_size() > 0) {
      nlohmann::ordered_json calls = nlohmann::ordered_json::array();
      for (const v1::ToolCall& c : m.tool_calls()) {
        calls.push_back({{"id", c.id()},
                         {"type", "function"},
                         {"function", {{"name", c.name()}, {"arguments", c.arguments()}}}});
      }
      j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) j["tool_call_id"] = m.tool_call_id();
    messages.push_back(std::move(j));
  }
  return messages;
}

void AddToolCalls(const std::vector<chat::ToolCall>& calls, v1::ChatResponse* resp) {
  for (const chat::ToolCall& c : calls) {
    v1::ToolCall* t = resp->add_tool_calls();
    t->set_id(c.id);
    t->set_name(c.name);
    t->set_arguments(c.arguments);
  }
}

}  // namespace

grpc::Status InferenceService::Authorize(grpc::CallbackServerContext* ctx) const {
  if (served_.auth == nullptr) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const absl::string_view value = it == md.end()
                                      ? absl::string_view()
                                      : absl::string_view(it->second.data(), it->second.size());
  if (served_.auth->Check(value, ApiAuth::kGrpc)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      it == md.end() ? "no API key: send the metadata authorization: Bearer KEY"
                                     : "invalid API key in the authorization metadata");
}

namespace {

// A streaming call refused before it started.
template <typename Resp>
class RefusedStream final : public grpc::ServerWriteReactor<Resp> {
 public:
  explicit RefusedStream(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

// The executor streaming calls run on, and the count of calls still open
// (the destructor waits for it to drop to 0 before stopping the threads).
struct InferenceService::Executor {
  // The calls' strands: the engine's output turned into writes.
  net::thread_pool pool{static_cast<size_t>(InferenceService::kExecutorThreads)};
  // Set-up (parse, render, tokenize, submit), apart: a long prompt delays
  // no other call's output.
  net::thread_pool setup{static_cast<size_t>(InferenceService::kExecutorThreads)};
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;  // guarded by mu
};

namespace {

// One streaming call (Generate or Chat). Its state lives on strand_: the
// set-up, the engine's wake-ups and gRPC's reactions (OnWriteDone,
// OnCancel, OnDone) are all posted there, so nothing here needs a lock.
// The object deletes itself on the strand after OnDone: everything posted
// before that (every wake-up comes before the request's end, which comes
// before Finish, which comes before OnDone) has run by then.
template <typename Resp>
class StreamCall : public grpc::ServerWriteReactor<Resp> {
 public:
  StreamCall(const ServedModel& served, InferenceService::Executor* executor,
             grpc::CallbackServerContext* ctx, std::string endpoint)
      : served_(served),
        executor_(executor),
        strand_(net::make_strand(executor->pool)),
        ctx_(ctx),
        deadline_(ctx->deadline()),
        endpoint_(std::move(endpoint)) {
    std::lock_guard<std::mutex> l(executor_->mu);
    ++executor_->calls;
  }
  ~StreamCall() override = default;

  // Starts the call (once constructed; the subclass is complete then):
  // Submit on the set-up pool, the rest on the strand. (Nothing else
  // touches what Submit sets until the strand has its result; the call
  // cannot end before that.)
  void Begin() {
    net::post(executor_->setup, [this] {
      absl::StatusOr<std::shared_ptr<RequestHandle>> h = Submit();
      Post([this, h = std::move(h)] { Started(h); });
    });
  }

  void OnWriteDone(bool ok) override {
    Post([this, ok] {
      writing_ = false;
      if (!ok) CancelOnStrand();
      Pump();
    });
  }
  void OnCancel() override {
    Post([this] {
      CancelOnStrand();
      Pump();
    });
  }
  void OnDone() override {
    Post([this] {
      InferenceService::Executor* e = executor_;
      delete this;
      std::lock_guard<std::mutex> l(e->mu);
      if (--e->calls == 0) e->cv.notify_all();
    });
  }

 protected:
  // The endpoint's part (strand): parse and submit the request; turn a
  // delta into responses; the last response of a request that ended well.
  virtual absl::StatusOr<std::shared_ptr<RequestHandle>> Submit() = 0;
  virtual void Deltas(const GenerateDelta& d, std::deque<Resp>* out) = 0;
  virtual Resp Last(const GenerateOutcome& o) = 0;
  // The finish reason the log records (Chat: tool_calls where calls came).
  std::string finish_reason_;

  const ServedModel& served_;

 private:
  template <typename F>
  void Post(F f) {
    net::post(strand_, std::move(f));
  }

  void Started(const absl::StatusOr<std::shared_ptr<RequestHandle>>& h) {
    if (!h.ok()) return End(h.status());
    handle_ = *h;
    // The response headers go out now, not with the first token: a client
    // waiting through a long prefill sees the call accepted.
    this->StartSendInitialMetadata();
    if (cancelled_) handle_->Cancel();  // OnCancel came first
    // The engine thread only posts: the deltas are taken and converted here.
    handle_->Subscribe([this] { Post([this] { Pump(); }); });
  }

  void CancelOnStrand() {
    cancelled_ = true;
    pending_.clear();
    if (handle_ != nullptr) handle_->Cancel();
  }

  // Takes what the engine produced, converts it, writes the next response
  // (one write in flight) and finishes once all is written.
  void Pump() {
    if (finished_) return;
    if (handle_ != nullptr && !ended_) {
      absl::StatusOr<GenerateOutcome> result = GenerateOutcome{};
      std::vector<PromptProgress> progress;
      const bool done = handle_->Take(&taken_, &result, &progress);
      for (const PromptProgress& p : progress) {
        if (cancelled_) break;
        Resp r;
        v1::PromptProgress* m = r.mutable_prompt_progress();
        m->set_total(p.total);
        m->set_cache(p.cache);
        m->set_processed(p.processed);
        m->set_time_ms(p.time_ms);
        pending_.push_back(std::move(r));
      }
      if (!cancelled_) {
        for (const GenerateDelta& d : taken_) Deltas(d, &pending_);
      }
      taken_.clear();
      if (done) {
        if (result.ok() && !cancelled_) pending_.push_back(Last(*result));
        End(result.status());
        return;
      }
    }
    WriteNext();
  }

  // The request ended (or never started) with `s`: logged and counted.
  void End(absl::Status s) {
    ended_ = true;
    const bool past_deadline = deadline_ <= std::chrono::system_clock::now();
    std::string outcome = ServingMetrics::Outcome(s);
    if (s.ok() && cancelled_) outcome = "cancelled";
    if (outcome == "cancelled" && past_deadline) outcome = "deadline_exceeded";
    served_.engine->metrics().CountRequest("grpc", endpoint_, outcome);
    static std::atomic<uint64_t> next_id{1};
    RequestRecord record;
    record.id = absl::StrCat("grpc-", next_id.fetch_add(1));
    record.api = "grpc";
    record.endpoint = endpoint_;
    record.model = served_.name;
    if (handle_ != nullptr) record.timings = handle_->timings();
    record.outcome = s.ok() && !cancelled_ ? "ok" : cancelled_ ? "cancelled" : RequestOutcome(s);
    if (record.outcome == "cancelled" && past_deadline) record.outcome = "deadline_exceeded";
    record.finish_reason = s.ok() ? finish_reason_ : "";
    LogRequest(record);
    final_ = ToGrpcStatus(s);
    WriteNext();
  }

  void WriteNext() {
    if (writing_ || finished_) return;
    if (!pending_.empty() && !cancelled_) {
      current_ = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
      this->StartWrite(&current_);
      return;
    }
    if (!ended_) return;  // more to come from the engine
    finished_ = true;
    this->Finish(cancelled_ ? grpc::Status(grpc::StatusCode::CANCELLED, "cancelled") : final_);
  }

  InferenceService::Executor* const executor_;
  net::strand<net::thread_pool::executor_type> strand_;
  grpc::CallbackServerContext* const ctx_;  // valid until OnDone
  const std::chrono::system_clock::time_point deadline_;
  const std::string endpoint_;
  // Strand only.
  std::shared_ptr<RequestHandle> handle_;
  std::vector<GenerateDelta> taken_;
  std::deque<Resp> pending_;  // converted, not yet written
  Resp current_;              // being written
  bool writing_ = false, ended_ = false, cancelled_ = false, finished_ = false;
  grpc::Status final_;
};

class GenerateCall final : public StreamCall<v1::GenerateResponse> {
 public:
  GenerateCall(const ServedModel& served, InferenceService::Executor* executor,
               grpc::CallbackServerContext* ctx, const v1::GenerateRequest& r)
      : StreamCall(served, executor, ctx, "generate"), r_(r) {}

 private:
  absl::StatusOr<std::shared_ptr<RequestHandle>> Submit() override {
    DenseEngine& engine = *served_.engine;
    RETURN_IF_ERROR(served_.CheckName(r_.model()));
    GenerateParams p;
    if (r_.prompt_tokens_size() > 0) {
      p.prompt.assign(r_.prompt_tokens().begin(), r_.prompt_tokens().end());
    } else {
      if (!IsValidUtf8(r_.prompt())) return absl::InvalidArgumentError("prompt is not valid UTF-8");
      ASSIGN_OR_RETURN(p.prompt, EncodeWithinContext(engine.tokenizer(), r_.prompt(),
                                                     /*add_special=*/true, engine.n_ctx()));
    }
    RETURN_IF_ERROR(CheckStop(r_.stop()));
    p.max_tokens = r_.max_tokens();
    ASSIGN_OR_RETURN(p.sampling, ToSampling(r_.sampling(), r_.logprobs()));
    p.ignore_eos = r_.sampling().ignore_eos();
    p.report_progress = r_.return_progress();
    p.stop.assign(r_.stop().begin(), r_.stop().end());
    ASSIGN_OR_RETURN(p.constraint, ToConstraint(r_.response_format()));
    return engine.Submit(std::move(p));
  }

  void Deltas(const GenerateDelta& d, std::deque<v1::GenerateResponse>* out) override {
    v1::GenerateResponse resp;
    resp.set_text(d.text);
    resp.add_token_ids(d.token);
    if (r_.logprobs() > 0) {
      AddLogprobs(served_.engine->tokenizer(), d.sampled, resp.mutable_logprobs());
    }
    out->push_back(std::move(resp));
  }

  v1::GenerateResponse Last(const GenerateOutcome& o) override {
    finish_reason_ = o.finish_reason;
    v1::GenerateResponse last;
    last.set_finish_reason(o.finish_reason);
    last.mutable_usage()->set_prompt_tokens(o.prompt_tokens);
    last.mutable_usage()->set_completion_tokens(o.completion_tokens);
    last.mutable_usage()->set_cached_tokens(o.cached_tokens);
    return last;
  }

  const v1::GenerateRequest r_;
};

class ChatCall final : public StreamCall<v1::ChatResponse> {
 public:
  ChatCall(const ServedModel& served, InferenceService::Executor* executor,
           grpc::CallbackServerContext* ctx, const v1::ChatRequest& r)
      : StreamCall(served, executor, ctx, "chat"), r_(r) {}

 private:
  absl::StatusOr<std::shared_ptr<RequestHandle>> Submit() override {
    DenseEngine& engine = *served_.engine;
    RETURN_IF_ERROR(served_.CheckName(r_.model()));
    RETURN_IF_ERROR(CheckMessageCount(r_.messages_size()));
    ASSIGN_OR_RETURN(const nlohmann::ordered_json messages, ChatMessagesJson(r_));
    RETURN_IF_ERROR(CheckStop(r_.stop()));
    ASSIGN_OR_RETURN(const ToolRequest tools, ToToolRequest(r_));
    ChatPromptOptions co;
    co.enable_thinking = !r_.disable_thinking();
    if (tools.offered()) co.tools = tools.tools;
    ASSIGN_OR_RETURN(const std::string prompt,
                     served_.chat->Render(served_.volatile_system != nullptr
                                              ? served_.volatile_system->StripMessages(messages)
                                              : messages,
                                          co));
    const bool has_bos = !served_.chat->bos_token().empty() &&
                         prompt.rfind(served_.chat->bos_token(), 0) == 0;
    GenerateParams p;
    ASSIGN_OR_RETURN(p.prompt,
                     EncodeWithinContext(engine.tokenizer(), prompt, !has_bos, engine.n_ctx()));
    p.max_tokens = r_.max_tokens();
    ASSIGN_OR_RETURN(p.sampling, ToSampling(r_.sampling(), r_.logprobs()));
    p.ignore_eos = r_.sampling().ignore_eos();
    p.report_progress = r_.return_progress();
    p.stop.assign(r_.stop().begin(), r_.stop().end());
    ASSIGN_OR_RETURN(p.constraint, ToConstraint(r_.response_format()));
    constrained_ = p.constraint != nullptr;  // content = the JSON as generated
    // tool_choice required / named: a call is forced (before response_format).
    ASSIGN_OR_RETURN(std::shared_ptr<const grammar::Grammar> call,
                     ToolChoiceConstraint(tools, served_.chat->tool_family(),
                                          chat::PromptOpensReasoning(prompt, served_.chat->output_format()),
                                          VocabIndex::SpecialTokenTest(engine.tokenizer())));
    if (call != nullptr) {
      p.constraint = std::move(call);
      constrained_ = false;
    }
    ASSIGN_OR_RETURN(auto handle, engine.Submit(std::move(p)));
    reasoning_.emplace(served_.chat->output_format(), chat::PromptOpensReasoning(prompt, served_.chat->output_format()),
                       served_.chat->tool_family(), tools);
    return handle;
  }

  void Deltas(const GenerateDelta& d, std::deque<v1::ChatResponse>* out) override {
    ChatDelta split;
    if (constrained_) {
      split.content = d.text;
    } else {
      split = reasoning_->Push(d.text);
    }
    v1::ChatResponse resp;
    resp.set_content(std::move(split.content));
    resp.set_reasoning_content(std::move(split.reasoning_content));
    AddToolCalls(split.tool_calls, &resp);
    has_calls_ = has_calls_ || !split.tool_calls.empty();
    resp.add_token_ids(d.token);
    if (r_.logprobs() > 0) {
      AddLogprobs(served_.engine->tokenizer(), d.sampled, resp.mutable_logprobs());
    }
    out->push_back(std::move(resp));
  }

  v1::ChatResponse Last(const GenerateOutcome& o) override {
    ChatDelta rest;
    if (!constrained_) rest = reasoning_->Finish();
    has_calls_ = has_calls_ || !rest.tool_calls.empty();
    const std::string finish = ToolFinishReason(o.finish_reason, has_calls_);
    finish_reason_ = finish;
    v1::ChatResponse last;
    last.set_content(std::move(rest.content));
    last.set_reasoning_content(std::move(rest.reasoning_content));
    AddToolCalls(rest.tool_calls, &last);
    last.set_finish_reason(finish);
    last.mutable_usage()->set_prompt_tokens(o.prompt_tokens);
    last.mutable_usage()->set_completion_tokens(o.completion_tokens);
    last.mutable_usage()->set_cached_tokens(o.cached_tokens);
    return last;
  }

  const v1::ChatRequest r_;
  bool constrained_ = false;
  bool has_calls_ = false;
  std::optional<ChatOutputStream> reasoning_;
};

}  // namespace

InferenceService::InferenceService(ServedModel served)
    : served_(std::move(served)), executor_(std::make_unique<Executor>()) {}

InferenceService::~InferenceService() {
  {
    std::unique_lock<std::mutex> l(executor_->mu);
    executor_->cv.wait(l, [&] { return executor_->calls == 0; });
  }
  executor_->setup.join();
  executor_->pool.join();
}

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* request) {
  if (grpc::Status a = Authorize(ctx); !a.ok()) return new RefusedStream<v1::GenerateResponse>(a);
  auto* call = new GenerateCall(served_, executor_.get(), ctx, *request);
  call->Begin();
  return call;
}

grpc::ServerWriteReactor<v1::ChatResponse>* InferenceService::Chat(
    grpc::CallbackServerContext* ctx, const v1::ChatRequest* request) {
  if (grpc::Status a = Authorize(ctx); !a.ok()) return new RefusedStream<v1::ChatResponse>(a);
  auto* call = new ChatCall(served_, executor_.get(), ctx, *request);
  call->Begin();
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* ctx,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  if (grpc::Status a = Authorize(ctx); !a.ok()) {
    reactor->Finish(a);
    return reactor;
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      IsValidUtf8(request->text())
          ? served_.engine->tokenizer().Encode(request->text(), request->parse_special())
          : absl::InvalidArgumentError("text is not valid UTF-8");
  if (ids.ok()) *response->mutable_tokens() = {ids->begin(), ids->end()};
  served_.engine->metrics().CountRequest("grpc", "tokenize", ServingMetrics::Outcome(ids.status()));
  reactor->Finish(ToGrpcStatus(ids.status()));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* ctx,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  if (grpc::Status a = Authorize(ctx); !a.ok()) {
    reactor->Finish(a);
    return reactor;
  }
  std::vector<int32_t> ids(request->tokens().begin(), request->tokens().end());
  auto text = served_.engine->tokenizer().Decode(ids);
  if (text.ok()) {
    response->set_text(ReplaceInvalidUtf8(*text));
    response->set_text_bytes(std::move(*text));
  }
  served_.engine->metrics().CountRequest("grpc", "detokenize",
                                         ServingMetrics::Outcome(text.status()));
  reactor->Finish(ToGrpcStatus(text.status()));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::GetModel(grpc::CallbackServerContext* ctx,
                                                     const v1::GetModelRequest*,
                                                     v1::GetModelResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  if (grpc::Status a = Authorize(ctx); !a.ok()) {
    reactor->Finish(a);
    return reactor;
  }
  const DenseEngine& engine = *served_.engine;
  const auto& m = engine.model();
  // Strings from the GGUF and the command line: made valid for proto3.
  response->set_name(ReplaceInvalidUtf8(served_.name));
  response->set_architecture(ReplaceInvalidUtf8(m.hparams().arch));
  response->set_context_length(engine.n_ctx());
  response->set_identity(m.file().Identity());
  for (const auto& t : m.file().tensors()) {
    (*response->mutable_bytes_by_type())[std::string(GgmlTypeName(t.type))] += t.n_bytes;
  }
  for (const auto& a : engine.expert_addresses()) {
    response->add_expert_workers(ReplaceInvalidUtf8(a));
  }
  v1::MemoryPlan* out = response->mutable_memory_plan();
  out->set_backend(engine.backend_name());
  if (const plan::MemoryPlan* p = engine.memory_plan(); p != nullptr) {
    out->set_budget_bytes(p->options.budget_bytes);
    out->set_dense_weights_bytes(p->dense.total());
    out->set_kv_cache_bytes(p->kv_cache);
    out->set_recurrent_state_bytes(p->recurrent_state);
    out->set_workspace_bytes(p->workspace.total());
    out->set_margin_bytes(p->margin);
    out->set_prefix_cache_device_bytes(p->prefix_cache_device);
    out->set_expert_cache_bytes(p->expert_cache.bytes);
    out->set_expert_cache_slots(p->expert_cache.slots);
    out->set_host_token_embd_bytes(p->host_token_embd);
  } else {
    uint64_t dense = 0;
    for (const auto& [role, bytes] : m.Summary().bytes_by_role) {
      // The routed experts live on the workers; NextN / MTP blocks are kept
      // aside, not run.
      if (role != "routed_experts" && role != "nextn") dense += bytes;
    }
    out->set_dense_weights_bytes(dense);
    out->set_kv_cache_bytes(engine.kv_bytes_per_sequence() * engine.max_sequences());
  }
  response->set_max_sequences(engine.max_sequences());
  response->set_kv_bytes_per_sequence(engine.kv_bytes_per_sequence());
  response->set_has_chat_template(served_.chat->warning().empty());
  served_.engine->metrics().CountRequest("grpc", "models", "ok");
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace moesplit::dense
