#include "services/dense/inference_service.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/transport/grpc_status.h"

namespace moesplit::dense {

namespace v1 = moesplit::v1;

InferenceService::~InferenceService() = default;

// Writes queued responses one at a time; the generation thread enqueues.
class InferenceService::GenerateReactor final
    : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateReactor(DenseEngine* engine, grpc::CallbackServerContext* ctx,
                  const v1::GenerateRequest& request)
      : engine_(engine), ctx_(ctx) {
    absl::StatusOr<GenerateParams> params = ToParams(request);
    if (!params.ok()) {
      Finish(ToGrpcStatus(params.status()));
      return;
    }
    worker_ = std::thread([this, p = std::move(*params)] { Run(p); });
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> l(mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
    WriteNextLocked();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_ = true;
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
  absl::StatusOr<GenerateParams> ToParams(const v1::GenerateRequest& r) {
    if (!r.model().empty() && r.model() != engine_->model().file().GetStringOr("general.name", "").value_or("")) {
      return absl::NotFoundError(absl::StrCat("model '", r.model(), "' is not served here"));
    }
    GenerateParams p;
    if (r.prompt_tokens_size() > 0) {
      p.prompt.assign(r.prompt_tokens().begin(), r.prompt_tokens().end());
    } else {
      auto ids = engine_->tokenizer().Encode(r.prompt(), /*parse_special=*/true);
      if (!ids.ok()) return ids.status();
      p.prompt = std::move(*ids);
    }
    if (r.max_tokens() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("max_tokens ", r.max_tokens(), " < 0"));
    }
    p.max_tokens = r.max_tokens();
    const auto& s = r.sampling();
    p.sampling.temperature = s.temperature();
    p.sampling.top_k = s.top_k();
    p.sampling.top_p = s.top_p() > 0 ? s.top_p() : 1.0f;
    p.sampling.min_p = s.min_p();
    p.sampling.repetition_penalty = s.repetition_penalty() > 0 ? s.repetition_penalty() : 1.0f;
    p.sampling.presence_penalty = s.presence_penalty();
    p.sampling.frequency_penalty = s.frequency_penalty();
    p.sampling.seed = s.seed();
    p.sampling.has_seed = s.has_seed() || s.seed() != 0;
    p.sampling.logprobs = r.logprobs();
    p.sampling.return_logprob = r.logprobs() > 0;
    p.stop.assign(r.stop().begin(), r.stop().end());
    return p;
  }

  void Run(const GenerateParams& p) {
    auto outcome = engine_->Generate(p, [&](const GenerateDelta& d) {
      v1::GenerateResponse resp;
      resp.set_text(d.text);
      if (d.token >= 0) resp.add_token_ids(d.token);
      return Enqueue(std::move(resp));
    });
    std::unique_lock<std::mutex> l(mu_);
    if (!outcome.ok()) {
      final_ = ToGrpcStatus(outcome.status());
    } else {
      v1::GenerateResponse last;
      last.set_finish_reason(outcome->finish_reason);
      last.mutable_usage()->set_prompt_tokens(outcome->prompt_tokens);
      last.mutable_usage()->set_completion_tokens(outcome->completion_tokens);
      queue_.push_back(std::move(last));
      final_ = grpc::Status::OK;
    }
    done_ = true;
    WriteNextLocked();
  }

  // False once the client is gone (the generation stops).
  bool Enqueue(v1::GenerateResponse r) {
    std::unique_lock<std::mutex> l(mu_);
    if (cancelled_ || ctx_->IsCancelled()) return false;
    queue_.push_back(std::move(r));
    WriteNextLocked();
    return true;
  }

  void WriteNextLocked() {
    if (writing_ || finished_) return;
    if (!queue_.empty() && !cancelled_) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      StartWrite(&current_);
      return;
    }
    if (done_ || cancelled_) {
      if (!done_) return;  // let the generation notice and finish first
      finished_ = true;
      Finish(cancelled_ ? grpc::Status(grpc::StatusCode::CANCELLED, "cancelled") : final_);
    }
  }

  DenseEngine* const engine_;
  grpc::CallbackServerContext* const ctx_;
  std::thread worker_;
  std::mutex mu_;
  std::deque<v1::GenerateResponse> queue_;
  v1::GenerateResponse current_;
  bool writing_ = false, done_ = false, cancelled_ = false, finished_ = false;
  grpc::Status final_;
};

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* request) {
  return new GenerateReactor(engine_, ctx, *request);
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* ctx,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto ids = engine_->tokenizer().Encode(request->text(), request->parse_special());
  if (ids.ok()) *response->mutable_tokens() = {ids->begin(), ids->end()};
  reactor->Finish(ToGrpcStatus(ids.status()));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* ctx,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  std::vector<int32_t> ids(request->tokens().begin(), request->tokens().end());
  auto text = engine_->tokenizer().Decode(ids);
  if (text.ok()) response->set_text(*text);
  reactor->Finish(ToGrpcStatus(text.status()));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::GetModel(grpc::CallbackServerContext* ctx,
                                                     const v1::GetModelRequest*,
                                                     v1::GetModelResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  const auto& m = engine_->model();
  response->set_name(m.file().GetStringOr("general.name", "").value_or(""));
  response->set_architecture(m.hparams().arch);
  response->set_context_length(engine_->n_ctx());
  response->set_identity(m.file().Identity());
  for (const auto& t : m.file().tensors()) {
    (*response->mutable_bytes_by_type())[std::string(GgmlTypeName(t.type))] += t.n_bytes;
  }
  for (const auto& a : engine_->expert_addresses()) response->add_expert_workers(a);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace moesplit::dense
