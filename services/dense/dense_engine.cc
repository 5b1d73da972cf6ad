#include "services/dense/dense_engine.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::dense {

absl::StatusOr<std::unique_ptr<transport::RemoteExperts>> ConnectExperts(
    const std::vector<std::string>& addresses, const transport::ClientOptions& options,
    int n_layer, int n_expert, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<std::unique_ptr<transport::ExpertClient>> clients;
    for (const auto& a : addresses) {
      ASSIGN_OR_RETURN(auto c, transport::OpenExpertClient(a, options));
      clients.push_back(std::move(c));
    }
    auto remote = transport::RemoteExperts::Connect(std::move(clients), n_layer, n_expert);
    // Only a worker that is not up yet is worth waiting for.
    if (remote.ok() || remote.status().code() != absl::StatusCode::kUnavailable ||
        std::chrono::steady_clock::now() >= deadline) {
      return remote;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

absl::StatusOr<std::unique_ptr<DenseEngine>> DenseEngine::Create(const EngineOptions& options) {
  std::unique_ptr<DenseEngine> e(new DenseEngine());
  ASSIGN_OR_RETURN(e->model_, model::Model::Open(options.model_path));
  ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromGguf(e->model_->file()));
  e->pool_ = std::make_unique<ThreadPool>(options.threads);
  const auto& hp = e->model_->hparams();
  model::ExpertBackend* backend = nullptr;
  if (options.experts.empty()) {
    e->local_ = std::make_unique<model::InProcessExperts>(model::ExpertStore(e->model_),
                                                          e->pool_.get());
    backend = e->local_.get();
  } else {
    transport::ClientOptions co;
    co.model_identity = e->model_->file().Identity();
    co.timeout = options.expert_timeout;
    ASSIGN_OR_RETURN(e->remote_, ConnectExperts(options.experts, co, e->model_->n_layer(),
                                                static_cast<int>(hp.n_expert),
                                                options.connect_timeout));
    backend = e->remote_.get();
    e->expert_addresses_ = options.experts;
  }
  e->n_ctx_ = static_cast<int>(std::min<int64_t>(options.n_ctx, hp.n_ctx_train));
  RunnerOptions ro;
  ro.backend = options.backend;
  ro.n_ctx = e->n_ctx_;
  ro.gpu_memory = options.gpu_memory;
  ro.kv_type = options.kv_type;
  ASSIGN_OR_RETURN(e->runner_, CreateSequenceRunner(e->model_, backend, e->pool_.get(), ro));
  return e;
}

absl::Status DenseEngine::CheckPrompt(const std::vector<int32_t>& prompt) const {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (static_cast<int>(prompt.size()) >= n_ctx_) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt.size(),
                                                   " tokens, the context holds ", n_ctx_));
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= tokenizer_->n_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", t, " is outside [0, ",
                                                     tokenizer_->n_vocab(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerateOutcome> DenseEngine::Generate(
    const GenerateParams& params, const std::function<bool(const GenerateDelta&)>& on_delta) {
  RETURN_IF_ERROR(CheckPrompt(params.prompt));
  if (params.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens ", params.max_tokens, " < 0"));
  }
  const int n_vocab = static_cast<int>(model_->hparams().n_vocab);
  ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(params.sampling, n_vocab));
  ASSIGN_OR_RETURN(StopMatcher stops, StopMatcher::Create(params.stop));
  RETURN_IF_ERROR(sampler.Accept(params.prompt));
  std::lock_guard<std::mutex> lock(mu_);
  runner_->Clear();
  GenerateOutcome out;
  out.prompt_tokens = static_cast<int>(params.prompt.size());
  std::vector<float> logits;
  RETURN_IF_ERROR(runner_->Eval(params.prompt, model::LogitsMode::kLast, &logits));
  StreamDecoder decoder(tokenizer_.get(), /*render_special=*/false);
  const int limit = params.max_tokens > 0 ? params.max_tokens : n_ctx_;
  GenerateDelta delta;
  for (;;) {
    RETURN_IF_ERROR(sampler.Sample(logits, &delta.sampled));
    delta.token = delta.sampled.token;
    ++out.completion_tokens;
    const bool eog = tokenizer_->IsEndOfGeneration(delta.token);
    std::string piece;
    if (eog) {
      piece = decoder.Flush();
    } else {
      ASSIGN_OR_RETURN(piece, decoder.Push(delta.token));
    }
    StopMatcher::Result r = stops.Feed(piece);
    const bool full = out.completion_tokens >= limit || runner_->n_past() + 1 >= n_ctx_;
    delta.text = std::move(r.text);
    if (eog || (full && !r.stopped)) delta.text += stops.Flush();
    if (!on_delta(delta)) {
      out.finish_reason = "cancelled";
      return out;
    }
    if (eog || r.stopped) {
      out.finish_reason = "stop";
      return out;
    }
    if (full) {
      out.finish_reason = "length";
      return out;
    }
    const int32_t next[1] = {delta.token};
    RETURN_IF_ERROR(runner_->Eval(next, model::LogitsMode::kLast, &logits));
  }
}

}  // namespace moesplit::dense
