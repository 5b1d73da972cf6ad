#include "services/dense/inference_service.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

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

InferenceService::~InferenceService() = default;

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

// Streams responses produced by a body running on its own thread.
template <typename Resp>
class StreamReactor final : public grpc::ServerWriteReactor<Resp> {
 public:
  using Body = std::function<absl::Status(StreamReactor*)>;
  StreamReactor(const ServedModel& served, grpc::CallbackServerContext* ctx, std::string endpoint,
                Body body)
      : served_(served), ctx_(ctx), endpoint_(std::move(endpoint)) {
    worker_ = std::thread([this, b = std::move(body)] { Run(b); });
  }

  // False once the client is gone (the body should stop).
  bool Emit(Resp r) {
    std::unique_lock<std::mutex> l(mu_);
    if (cancelled_) return false;
    queue_.push_back(std::move(r));
    WriteNextLocked();
    return true;
  }
  bool Cancelled() {
    std::lock_guard<std::mutex> l(mu_);
    return cancelled_ || ctx_->IsCancelled();
  }
  // The engine request the body runs and how it ended (the request log).
  void Track(std::shared_ptr<RequestHandle> handle) { handle_ = std::move(handle); }
  void SetFinishReason(std::string reason) { finish_reason_ = std::move(reason); }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> l(mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
    WriteNextLocked();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_ = true;
    WriteNextLocked();
  }
  void OnDone() override {
    if (worker_.joinable()) {
      if (worker_.get_id() == std::this_thread::get_id()) {
        worker_.detach();
      } else {
        worker_.join();
      }
    }
    delete this;
  }

 private:
  void Run(const Body& body) {
    absl::Status s = body(this);
    std::unique_lock<std::mutex> l(mu_);
    std::string outcome = ServingMetrics::Outcome(s);
    if (s.ok() && cancelled_) outcome = "cancelled";
    if (outcome == "cancelled" && ctx_->deadline() <= std::chrono::system_clock::now()) {
      outcome = "deadline_exceeded";
    }
    served_.engine->metrics().CountRequest("grpc", endpoint_, outcome);
    static std::atomic<uint64_t> next_id{1};
    RequestRecord record;
    record.id = absl::StrCat("grpc-", next_id.fetch_add(1));
    record.api = "grpc";
    record.endpoint = endpoint_;
    record.model = served_.name;
    if (handle_ != nullptr) record.timings = handle_->timings();
    record.outcome = s.ok() && !cancelled_ ? "ok" : cancelled_ ? "cancelled" : RequestOutcome(s);
    if (record.outcome == "cancelled" && ctx_->deadline() <= std::chrono::system_clock::now()) {
      record.outcome = "deadline_exceeded";
    }
    record.finish_reason = s.ok() ? finish_reason_ : "";
    LogRequest(record);
    final_ = ToGrpcStatus(s);
    done_ = true;
    WriteNextLocked();
  }

  void WriteNextLocked() {
    if (writing_ || finished_) return;
    if (!queue_.empty() && !cancelled_) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      this->StartWrite(&current_);
      return;
    }
    if (!done_) return;  // let the body notice and finish first
    finished_ = true;
    this->Finish(cancelled_ ? grpc::Status(grpc::StatusCode::CANCELLED, "cancelled") : final_);
  }

  const ServedModel& served_;
  grpc::CallbackServerContext* const ctx_;
  const std::string endpoint_;
  // Set by the body's thread, read by it after the body returns.
  std::shared_ptr<RequestHandle> handle_;
  std::string finish_reason_;
  std::thread worker_;
  std::mutex mu_;
  std::deque<Resp> queue_;
  Resp current_;
  bool writing_ = false, done_ = false, cancelled_ = false, finished_ = false;
  grpc::Status final_;
};

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* request) {
  using Reactor = StreamReactor<v1::GenerateResponse>;
  if (grpc::Status a = Authorize(ctx); !a.ok()) return new RefusedStream<v1::GenerateResponse>(a);
  return new Reactor(served_, ctx, "generate", [this, r = *request](Reactor* out) -> absl::Status {
    DenseEngine& engine = *served_.engine;
    RETURN_IF_ERROR(served_.CheckName(r.model()));
    GenerateParams p;
    if (r.prompt_tokens_size() > 0) {
      p.prompt.assign(r.prompt_tokens().begin(), r.prompt_tokens().end());
    } else {
      if (!IsValidUtf8(r.prompt())) return absl::InvalidArgumentError("prompt is not valid UTF-8");
      ASSIGN_OR_RETURN(p.prompt, EncodeWithinContext(engine.tokenizer(), r.prompt(),
                                                     /*add_special=*/true, engine.n_ctx()));
    }
    RETURN_IF_ERROR(CheckStop(r.stop()));
    p.max_tokens = r.max_tokens();
    ASSIGN_OR_RETURN(p.sampling, ToSampling(r.sampling(), r.logprobs()));
    p.ignore_eos = r.sampling().ignore_eos();
    p.stop.assign(r.stop().begin(), r.stop().end());
    ASSIGN_OR_RETURN(p.constraint, ToConstraint(r.response_format()));
    ASSIGN_OR_RETURN(auto handle, engine.Submit(std::move(p)));
    out->Track(handle);
    ASSIGN_OR_RETURN(
        GenerateOutcome o,
        handle->Wait(
            [&](const GenerateDelta& d) {
              v1::GenerateResponse resp;
              resp.set_text(d.text);
              resp.add_token_ids(d.token);
              if (r.logprobs() > 0) AddLogprobs(engine.tokenizer(), d.sampled, resp.mutable_logprobs());
              return out->Emit(std::move(resp));
            },
            [out] { return out->Cancelled(); }));
    out->SetFinishReason(o.finish_reason);
    v1::GenerateResponse last;
    last.set_finish_reason(o.finish_reason);
    last.mutable_usage()->set_prompt_tokens(o.prompt_tokens);
    last.mutable_usage()->set_completion_tokens(o.completion_tokens);
    last.mutable_usage()->set_cached_tokens(o.cached_tokens);
    out->Emit(std::move(last));
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::ChatResponse>* InferenceService::Chat(
    grpc::CallbackServerContext* ctx, const v1::ChatRequest* request) {
  using Reactor = StreamReactor<v1::ChatResponse>;
  if (grpc::Status a = Authorize(ctx); !a.ok()) return new RefusedStream<v1::ChatResponse>(a);
  return new Reactor(served_, ctx, "chat", [this, r = *request](Reactor* out) -> absl::Status {
    DenseEngine& engine = *served_.engine;
    RETURN_IF_ERROR(served_.CheckName(r.model()));
    RETURN_IF_ERROR(CheckMessageCount(r.messages_size()));
    ASSIGN_OR_RETURN(const nlohmann::ordered_json messages, ChatMessagesJson(r));
    RETURN_IF_ERROR(CheckStop(r.stop()));
    ASSIGN_OR_RETURN(const ToolRequest tools, ToToolRequest(r));
    ChatPromptOptions co;
    co.enable_thinking = !r.disable_thinking();
    if (tools.offered()) co.tools = tools.tools;
    ASSIGN_OR_RETURN(const std::string prompt, served_.chat->Render(messages, co));
    const bool has_bos = !served_.chat->bos_token().empty() &&
                         prompt.rfind(served_.chat->bos_token(), 0) == 0;
    GenerateParams p;
    ASSIGN_OR_RETURN(p.prompt,
                     EncodeWithinContext(engine.tokenizer(), prompt, !has_bos, engine.n_ctx()));
    p.max_tokens = r.max_tokens();
    ASSIGN_OR_RETURN(p.sampling, ToSampling(r.sampling(), r.logprobs()));
    p.ignore_eos = r.sampling().ignore_eos();
    p.stop.assign(r.stop().begin(), r.stop().end());
    ASSIGN_OR_RETURN(p.constraint, ToConstraint(r.response_format()));
    bool constrained = p.constraint != nullptr;  // content = the JSON as generated
    // tool_choice required / named: a call is forced (before response_format).
    ASSIGN_OR_RETURN(std::shared_ptr<const grammar::Grammar> call,
                     ToolChoiceConstraint(tools, served_.chat->tool_family(),
                                          chat::PromptOpensReasoning(prompt),
                                          VocabIndex::SpecialTokenTest(engine.tokenizer())));
    if (call != nullptr) {
      p.constraint = std::move(call);
      constrained = false;
    }
    ASSIGN_OR_RETURN(auto handle, engine.Submit(std::move(p)));
    out->Track(handle);
    ChatOutputStream reasoning(served_.chat->output_format(), chat::PromptOpensReasoning(prompt),
                               served_.chat->tool_family(), tools);
    bool has_calls = false;
    ASSIGN_OR_RETURN(
        GenerateOutcome o,
        handle->Wait(
            [&](const GenerateDelta& d) {
              ChatDelta split;
              if (constrained) {
                split.content = d.text;
              } else {
                split = reasoning.Push(d.text);
              }
              v1::ChatResponse resp;
              resp.set_content(std::move(split.content));
              resp.set_reasoning_content(std::move(split.reasoning_content));
              AddToolCalls(split.tool_calls, &resp);
              has_calls = has_calls || !split.tool_calls.empty();
              resp.add_token_ids(d.token);
              if (r.logprobs() > 0) AddLogprobs(engine.tokenizer(), d.sampled, resp.mutable_logprobs());
              return out->Emit(std::move(resp));
            },
            [out] { return out->Cancelled(); }));
    ChatDelta rest;
    if (!constrained) rest = reasoning.Finish();
    has_calls = has_calls || !rest.tool_calls.empty();
    const std::string finish = ToolFinishReason(o.finish_reason, has_calls);
    out->SetFinishReason(finish);
    v1::ChatResponse last;
    last.set_content(std::move(rest.content));
    last.set_reasoning_content(std::move(rest.reasoning_content));
    AddToolCalls(rest.tool_calls, &last);
    last.set_finish_reason(finish);
    last.mutable_usage()->set_prompt_tokens(o.prompt_tokens);
    last.mutable_usage()->set_completion_tokens(o.completion_tokens);
    last.mutable_usage()->set_cached_tokens(o.cached_tokens);
    out->Emit(std::move(last));
    return absl::OkStatus();
  });
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
      if (role != "routed_experts") dense += bytes;
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
