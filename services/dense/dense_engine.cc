#include "services/dense/dense_engine.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "services/dense/request_limits.h"

namespace moesplit::dense {

absl::StatusOr<std::unique_ptr<transport::RemoteExperts>> ConnectExperts(
    const std::vector<std::string>& addresses, const transport::ClientOptions& options,
    int n_layer, int n_expert, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  auto next_report = start + std::chrono::seconds(2);
  for (;;) {
    std::vector<std::unique_ptr<transport::ExpertClient>> clients;
    for (const auto& a : addresses) {
      ASSIGN_OR_RETURN(auto c, transport::OpenExpertClient(a, options));
      clients.push_back(std::move(c));
    }
    // Which workers are not up yet (each says why), for the waiting line.
    std::vector<std::string> waiting;
    for (auto& c : clients) {
      if (absl::Status s = c->Describe().status(); !s.ok()) {
        if (s.code() != absl::StatusCode::kUnavailable) return s;
        waiting.push_back(std::string(s.message()));
      }
    }
    if (waiting.empty()) {
      return transport::RemoteExperts::Connect(std::move(clients), n_layer, n_expert);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "expert workers not up after ", timeout.count(), " ms (--connect-timeout): ",
          absl::StrJoin(waiting, "; ")));
    }
    if (now >= next_report) {
      Log(LogLevel::kInfo, "moesplit-dense",
          absl::StrCat("waiting for workers (", addresses.size() - waiting.size(), " of ",
                       addresses.size(), " up, ",
                       std::chrono::duration_cast<std::chrono::seconds>(now - start).count(),
                       " s): ", absl::StrJoin(waiting, "; ")));
      next_report = now + std::chrono::seconds(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

absl::Status ShuttingDownError(const std::string& message) {
  absl::Status s = absl::UnavailableError(message);
  s.SetPayload(kErrorCodePayload, absl::Cord("shutting_down"));
  return s;
}

struct DenseEngine::Sequence {
  std::shared_ptr<RequestHandle> req;
  Sampler sampler;
  StopMatcher stops;
  StreamDecoder decoder;
  std::optional<TokenConstraint> constraint{};  // GenerateParams::constraint
  size_t prefilled = 0;  // prompt tokens in the sequence's state
  int32_t next = -1;     // the last sampled token, fed in the next step
  int completion = 0;
  int limit = 0;
  std::vector<float> logits{};
  std::chrono::steady_clock::time_point last_token{};
  GenerateOutcome outcome{};
  int slot = -1;  // the runner slot holding the sequence's state
  // Prefix cache: the tokens in the state (prompt, then the generated ones
  // fed back), the whole blocks of them cached (inserted or imported) and
  // the key of the last.
  std::vector<int32_t> fed{};
  int64_t cached_blocks = 0;
  uint64_t block_key = PrefixCache::kRootKey;
  std::chrono::steady_clock::time_point admitted = std::chrono::steady_clock::now();

  bool decoding() const { return prefilled == req->params_.prompt.size(); }
};

absl::StatusOr<std::unique_ptr<DenseEngine>> DenseEngine::Create(const EngineOptions& options) {
  if (options.max_sequences < 1 || options.max_queue < 0 || options.step_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need max_sequences >= 1, max_queue >= 0, step_tokens >= 1; got ",
        options.max_sequences, ", ", options.max_queue, ", ", options.step_tokens));
  }
  std::unique_ptr<DenseEngine> e(new DenseEngine());
  e->options_ = options;
  ASSIGN_OR_RETURN(e->model_, model::Model::Open(options.model_path));
  ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromGguf(e->model_->file()));
  e->pool_ = std::make_unique<ThreadPool>(options.threads);
  const auto& hp = e->model_->hparams();
  model::ExpertBackend* backend = nullptr;
  if (options.experts.empty()) {
    e->local_ = std::make_unique<model::InProcessExperts>(model::LocalExpertStore(e->model_, e->pool_.get()),
                                                          e->pool_.get());
    backend = e->local_.get();
  } else {
    transport::ClientOptions co;
    co.model_identity = e->model_->file().Identity();
    co.expert_ffn = model::ExpertFfnName(e->model_->hparams().expert_ffn);
    co.timeout = options.expert_timeout;
    co.tls = options.worker_tls;
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
  ro.n_parallel = options.max_sequences;
  ro.expert_cache_slots = options.expert_cache_slots;
  ro.prefill_stream_min_tokens = options.prefill_stream_min_tokens;
  ro.pin_experts = options.pin_experts;
  ro.max_step = options.step_tokens;
  if (options.prefix_cache && options.cache_device > 0) {
    if (options.backend == "cpu") {
      return absl::InvalidArgumentError(
          "a prefix-cache device tier (cache_device) needs the GPU backend, not --backend cpu");
    }
    ro.prefix_cache_device = options.cache_device;
  }
  ASSIGN_OR_RETURN(e->runner_, CreateSequenceRunner(e->model_, backend, e->pool_.get(), ro));
  e->options_.max_sequences = e->runner_->slots();
  e->slot_used_.assign(e->runner_->slots(), false);
  e->registry_ = options.registry ? options.registry : std::make_shared<prometheus::Registry>();
  e->metrics_ = std::make_unique<ServingMetrics>(*e->registry_);
  e->metrics_->max_sequences.Set(e->options_.max_sequences);
  e->metrics_->queue_capacity.Set(options.max_queue);
  e->metrics_->kv_capacity_bytes.Set(static_cast<double>(e->runner_->state_bytes_capacity()));
  if (options.prefix_cache) {
    if (options.cache_block_tokens < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefix cache block of ", options.cache_block_tokens, " tokens"));
    }
    PrefixCacheOptions co;
    co.block_tokens = options.cache_block_tokens;
    co.primary_bytes = options.cache_memory > 0 ? options.cache_memory
                                                : e->runner_->state_bytes_capacity();
    co.host_bytes = options.cache_ram;
    if (options.cache_device > 0 && !e->runner_->has_device_memory()) {
      Log(LogLevel::kWarning, "moesplit-dense",
          absl::StrCat("prefix cache: no device tier on the ", e->runner_->name(),
                       " runner (--cache-device ignored)"));
    } else if (options.cache_device > 0) {
      co.device_bytes = options.cache_device;
      co.upload = [runner = e->runner_.get()](absl::Span<const uint8_t> kv) {
        return runner->UploadKv(kv);
      };
    }
    e->cache_ = std::make_unique<PrefixCache>(co);
    e->metrics_->prefix_cache_primary_capacity.Set(static_cast<double>(co.primary_bytes));
    e->metrics_->prefix_cache_host_capacity.Set(static_cast<double>(co.host_bytes));
    e->metrics_->prefix_cache_device_capacity.Set(static_cast<double>(co.device_bytes));
  }
  e->loop_ = std::thread([p = e.get()] { p->Loop(); });
  return e;
}

DenseEngine::~DenseEngine() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

int DenseEngine::running() const {
  std::lock_guard<std::mutex> l(mu_);
  return running_;
}

int DenseEngine::queued() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(waiting_.size());
}

absl::Status DenseEngine::CheckPrompt(const std::vector<int32_t>& prompt) const {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (static_cast<int>(prompt.size()) >= n_ctx_) {
    return ContextOverflowError(prompt.size(), n_ctx_, /*at_least=*/false);
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= tokenizer_->n_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", t, " is outside [0, ",
                                                     tokenizer_->n_vocab(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RequestHandle>> DenseEngine::Submit(GenerateParams params) {
  RETURN_IF_ERROR(CheckPrompt(params.prompt));
  if (params.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens ", params.max_tokens, " < 0"));
  }
  RETURN_IF_ERROR(Validate(params.sampling, static_cast<int>(model_->hparams().n_vocab)));
  RETURN_IF_ERROR(StopMatcher::Create(params.stop).status());
  std::shared_ptr<RequestHandle> r(new RequestHandle());
  r->params_ = std::move(params);
  r->submitted_ = std::chrono::steady_clock::now();
  r->metrics_ = metrics_.get();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return absl::UnavailableError("the server is shutting down");
    if (draining_) {
      return ShuttingDownError("the server is shutting down (draining): not accepting new requests");
    }
    const int in_system = running_ + static_cast<int>(waiting_.size());
    if (in_system >= options_.max_sequences + options_.max_queue) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "server busy: ", running_, " sequences running (--parallel ", options_.max_sequences,
          ") and ", waiting_.size(), " requests queued (--max-queue ", options_.max_queue,
          "); retry later"));
    }
    waiting_.push_back(r);
    metrics_->queue_depth.Set(static_cast<double>(waiting_.size()));
  }
  cv_.notify_all();
  return r;
}

absl::StatusOr<GenerateOutcome> DenseEngine::Generate(
    const GenerateParams& params, const std::function<bool(const GenerateDelta&)>& on_delta) {
  ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> r, Submit(params));
  return r->Wait(on_delta);
}

RequestHandle::~RequestHandle() = default;

RequestTimings RequestHandle::timings() const {
  std::lock_guard<std::mutex> l(mu_);
  RequestTimings t;
  using secs = std::chrono::duration<double>;
  t.prompt_tokens = static_cast<int>(params_.prompt.size());
  t.generated_tokens = generated_;
  t.cached_tokens = cached_;
  if (has_first_token_) {
    t.ttft_s = secs(first_token_ - submitted_).count();
    t.decode_s = secs(last_token_ - first_token_).count();
  }
  t.duration_s = secs((has_finished_ ? finished_ : std::chrono::steady_clock::now()) - submitted_)
                     .count();
  return t;
}

void DenseEngine::BeginDrain() {
  std::lock_guard<std::mutex> l(mu_);
  draining_ = true;
}

int DenseEngine::AbortAll(absl::Status status) {
  int n;
  {
    std::lock_guard<std::mutex> l(mu_);
    n = running_ + static_cast<int>(waiting_.size());
    abort_ = std::move(status);
  }
  cv_.notify_all();
  return n;
}

void RequestHandle::Subscribe(std::function<void()> ready) {
  std::lock_guard<std::mutex> l(mu_);
  armed_ = true;
  if (done_ || !deltas_.empty()) {
    // Something is pending already: wake the consumer now.
    armed_ = false;
    ready();
    if (done_) return;  // nothing more will come: the callback is not kept
  }
  ready_ = std::move(ready);
}

bool RequestHandle::Take(std::vector<GenerateDelta>* deltas,
                         absl::StatusOr<GenerateOutcome>* result,
                         std::vector<PromptProgress>* progress) {
  std::lock_guard<std::mutex> l(mu_);
  if (progress != nullptr) progress->insert(progress->end(), progress_.begin(), progress_.end());
  progress_.clear();
  for (GenerateDelta& d : deltas_) deltas->push_back(std::move(d));
  deltas_.clear();
  armed_ = true;
  if (!done_) return false;
  *result = result_;
  return true;
}

bool RequestHandle::started() const {
  std::lock_guard<std::mutex> l(mu_);
  return has_first_token_ || done_;
}

void RequestHandle::NotifyLocked() {
  if (!armed_ || !ready_) return;
  armed_ = false;
  ready_();
}

void RequestHandle::End(absl::StatusOr<GenerateOutcome> result) {
  std::function<void()> ready;  // destroyed after the lock is released
  std::lock_guard<std::mutex> l(mu_);
  done_ = true;
  result_ = std::move(result);
  finished_ = std::chrono::steady_clock::now();
  has_finished_ = true;
  // Called with the lock held: a consumer's Take cannot see the end before
  // the wake-up was delivered (so it may tear its executor down after it).
  NotifyLocked();
  ready.swap(ready_);
}

absl::StatusOr<GenerateOutcome> RequestHandle::Wait(
    const std::function<bool(const GenerateDelta&)>& on_delta) {
  struct Waker {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
  };
  auto w = std::make_shared<Waker>();
  Subscribe([w] {
    std::lock_guard<std::mutex> l(w->mu);
    w->ready = true;
    w->cv.notify_one();
  });
  std::vector<GenerateDelta> batch;
  absl::StatusOr<GenerateOutcome> result = GenerateOutcome{};
  for (;;) {
    {
      std::unique_lock<std::mutex> l(w->mu);
      w->cv.wait(l, [&] { return w->ready; });
      w->ready = false;
    }
    const bool done = Take(&batch, &result);
    for (const GenerateDelta& d : batch) {
      if (!cancelled_ && !on_delta(d)) cancelled_ = true;
    }
    batch.clear();
    if (done) return result;
  }
}

// ------------------------------------------------------------ engine thread

void DenseEngine::Loop() {
  for (;;) {
    std::optional<absl::Status> abort;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] {
        return stop_ || abort_.has_value() || !waiting_.empty() || !sequences_.empty();
      });
      if (stop_) break;
      abort.swap(abort_);
    }
    if (abort.has_value()) {
      while (!sequences_.empty()) Finish(sequences_.begin(), *abort);
      std::lock_guard<std::mutex> l(mu_);
      for (auto& r : waiting_) r->End(*abort);
      waiting_.clear();
      metrics_->queue_depth.Set(0);
      continue;
    }
    Step();
  }
  const absl::Status down = absl::UnavailableError("the server is shutting down");
  while (!sequences_.empty()) Finish(sequences_.begin(), down);
  std::lock_guard<std::mutex> l(mu_);
  for (auto& r : waiting_) r->End(down);
  waiting_.clear();
}

void DenseEngine::Admit() {
  for (;;) {
    std::shared_ptr<RequestHandle> r;
    std::vector<std::shared_ptr<RequestHandle>> cancelled;
    {
      std::lock_guard<std::mutex> l(mu_);
      // Cancelled requests leave the queue at once.
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if ((*it)->cancelled_) {
          cancelled.push_back(std::move(*it));
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      if (!waiting_.empty() && running_ < options_.max_sequences) {
        r = std::move(waiting_.front());
        waiting_.pop_front();
        ++running_;
      }
    }
    for (auto& c : cancelled) {
      GenerateOutcome o;
      o.finish_reason = "cancelled";
      o.prompt_tokens = static_cast<int>(c->params_.prompt.size());
      c->End(o);
    }
    if (r == nullptr) return;
    if (absl::Status s = StartSequence(r); !s.ok()) {
      {
        std::lock_guard<std::mutex> l(mu_);
        --running_;
      }
      r->End(s);
    }
  }
}

absl::Status DenseEngine::StartSequence(std::shared_ptr<RequestHandle> r) {
  const GenerateParams& p = r->params_;
  const int n_vocab = static_cast<int>(model_->hparams().n_vocab);
  ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(p.sampling, n_vocab));
  ASSIGN_OR_RETURN(StopMatcher stops, StopMatcher::Create(p.stop));
  RETURN_IF_ERROR(sampler.Accept(p.prompt));
  std::optional<TokenConstraint> constraint;
  if (p.constraint != nullptr) {
    if (vocab_index_ == nullptr) {
      ASSIGN_OR_RETURN(vocab_index_, VocabIndex::FromTokenizer(*tokenizer_, n_vocab));
    }
    constraint.emplace(p.constraint, vocab_index_);
  }
  const int64_t prompt = static_cast<int64_t>(p.prompt.size());
  const int limit = p.max_tokens > 0 ? p.max_tokens : n_ctx_;
  const int64_t positions = std::min<int64_t>(n_ctx_, prompt + limit);
  // max_sequences is the runner's slot count, so one is free.
  int slot = -1;
  for (size_t i = 0; i < slot_used_.size() && slot < 0; ++i) {
    if (!slot_used_[i]) slot = static_cast<int>(i);
  }
  if (slot < 0) return absl::ResourceExhaustedError("no free sequence slot");
  RETURN_IF_ERROR(runner_->Start(slot, positions));
  slot_used_[slot] = true;
  sequences_.push_back(Sequence{.req = std::move(r),
                                .sampler = std::move(sampler),
                                .stops = std::move(stops),
                                .decoder = StreamDecoder(tokenizer_.get(), false)});
  Sequence& s = sequences_.back();
  s.constraint = std::move(constraint);
  s.slot = slot;
  s.limit = limit;
  s.outcome.prompt_tokens = static_cast<int>(prompt);
  if (cache_ != nullptr && p.cache_prompt) ImportPrefix(s);
  ReportProgress(s);
  return absl::OkStatus();
}

void DenseEngine::ReportProgress(Sequence& s) {
  if (!s.req->params_.report_progress) return;
  PromptProgress p;
  p.total = static_cast<int>(s.req->params_.prompt.size());
  p.cache = s.outcome.cached_tokens;
  p.processed = static_cast<int>(s.prefilled);
  p.time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - s.admitted)
                  .count();
  std::lock_guard<std::mutex> l(s.req->mu_);
  s.req->progress_.push_back(p);
  s.req->NotifyLocked();
}

void DenseEngine::ImportPrefix(Sequence& s) {
  const auto& prompt = s.req->params_.prompt;
  // At least one prompt token is evaluated: the first logits come from a step.
  PrefixCache::Match m = cache_->Lookup(prompt, static_cast<int64_t>(prompt.size()) - 1,
                                        runner_->recurrent_bytes() > 0);
  if (m.blocks.empty()) return;
  const int64_t B = cache_->block_tokens();
  absl::Status st = absl::OkStatus();
  for (size_t i = 0; i < m.blocks.size() && st.ok(); ++i) {
    const PrefixCache::Block& b = *m.blocks[i];
    const int64_t pos = static_cast<int64_t>(i) * B;
    st = b.device_kv != nullptr ? runner_->ImportKvDevice(s.slot, pos, *b.device_kv)
                                : runner_->ImportKv(s.slot, pos, b.kv);
  }
  if (st.ok()) st = runner_->Resume(s.slot, m.tokens, m.blocks.back()->state);
  if (!st.ok()) {
    // Evaluate the whole prompt instead (the slot back to empty).
    Log(LogLevel::kWarning, "moesplit-dense",
        absl::StrCat("prefix cache: import failed, evaluating the prompt: ", st.message()));
    (void)runner_->Resume(s.slot, 0, std::vector<uint8_t>(runner_->recurrent_bytes(), 0));
    return;
  }
  s.prefilled = static_cast<size_t>(m.tokens);
  s.fed.assign(prompt.begin(), prompt.begin() + m.tokens);
  s.cached_blocks = static_cast<int64_t>(m.blocks.size());
  s.block_key = m.blocks.back()->key;
  s.outcome.cached_tokens = static_cast<int>(m.tokens);
  std::lock_guard<std::mutex> l(s.req->mu_);
  s.req->cached_ = s.outcome.cached_tokens;
}

bool DenseEngine::KeepsState(const Sequence& s, int64_t pos) const {
  // Recurrent states are large (a full state per checkpoint): one every
  // kStateBlocks blocks, and at the prompt's last block boundary, where
  // the next turn of a conversation resumes.
  constexpr int64_t kStateBlocks = 8;
  const int64_t B = cache_->block_tokens();
  const int64_t prompt = static_cast<int64_t>(s.req->params_.prompt.size());
  return pos > 0 && pos % B == 0 && (pos % (B * kStateBlocks) == 0 || pos == prompt / B * B);
}

int64_t DenseEngine::PrefillStop(const Sequence& s, int64_t from) const {
  if (cache_ == nullptr || !s.req->params_.cache_prompt || runner_->recurrent_bytes() == 0) {
    return INT64_MAX;
  }
  const int64_t B = cache_->block_tokens();
  const int64_t prompt = static_cast<int64_t>(s.req->params_.prompt.size());
  for (int64_t pos = (from / B + 1) * B; pos < prompt; pos += B) {
    if (KeepsState(s, pos)) return pos;
  }
  return INT64_MAX;
}

void DenseEngine::InsertBlocks(Sequence& s) {
  const int64_t B = cache_->block_tokens();
  const int64_t n_past = runner_->n_past(s.slot);
  const bool recurrent = runner_->recurrent_bytes() > 0;
  while ((s.cached_blocks + 1) * B <= n_past) {
    const int64_t begin = s.cached_blocks * B, end = begin + B;
    const auto tokens = absl::MakeConstSpan(s.fed).subspan(begin, B);
    // A recurrent state exists only where the step ended.
    const bool with_state = recurrent && end == n_past && KeepsState(s, end);
    // (A recurrent model's blocks without a state are inserted too: the
    // chain must reach the next block that has one.)
    const uint64_t key = PrefixCache::ChainKey(s.block_key, tokens);
    if (cache_->Wants(key, with_state)) {
      std::vector<uint8_t> kv, state;
      DeviceRowsRef device_kv;
      absl::Status st = absl::OkStatus();
      if (cache_->options().device_bytes > 0) {
        // Into the device tier; where the device has no room, to the host.
        absl::StatusOr<DeviceRowsRef> rows = runner_->ExportKvDevice(s.slot, begin, end);
        if (rows.ok()) {
          device_kv = std::move(*rows);
        } else if (rows.status().code() != absl::StatusCode::kResourceExhausted) {
          st = rows.status();
        }
      }
      if (st.ok() && device_kv == nullptr) st = runner_->ExportKv(s.slot, begin, end, &kv);
      if (st.ok() && with_state) st = runner_->ExportRecurrent(s.slot, &state);
      if (!st.ok()) {
        Log(LogLevel::kWarning, "moesplit-dense",
            absl::StrCat("prefix cache: export failed: ", st.message()));
        return;
      }
      cache_->Insert(s.block_key, tokens, std::move(kv), std::move(state), std::move(device_kv));
    }
    s.block_key = key;
    ++s.cached_blocks;
  }
}

void DenseEngine::UpdateCacheMetrics() {
  if (cache_ == nullptr) return;
  const PrefixCacheStats now = cache_->stats();
  PrefixCacheStats& was = cache_reported_;
  auto add = [](prometheus::Counter& c, uint64_t now, uint64_t was) {
    if (now > was) c.Increment(static_cast<double>(now - was));
  };
  add(metrics_->prefix_cache_hits, now.hits, was.hits);
  add(metrics_->prefix_cache_misses, now.misses, was.misses);
  add(metrics_->prefix_cache_reused_tokens, now.reused_tokens, was.reused_tokens);
  add(metrics_->prefix_cache_host_hits, now.host_hits, was.host_hits);
  add(metrics_->prefix_cache_demotions, now.demoted, was.demoted);
  add(metrics_->prefix_cache_evictions, now.evicted, was.evicted);
  add(metrics_->prefix_cache_device_hits, now.device_hits, was.device_hits);
  add(metrics_->prefix_cache_uploads, now.uploaded, was.uploaded);
  add(metrics_->prefix_cache_device_demotions, now.device_demoted, was.device_demoted);
  metrics_->prefix_cache_device_bytes.Set(static_cast<double>(now.device_bytes));
  metrics_->prefix_cache_device_blocks.Set(static_cast<double>(now.device_blocks));
  metrics_->prefix_cache_primary_bytes.Set(static_cast<double>(now.primary_bytes));
  metrics_->prefix_cache_host_bytes.Set(static_cast<double>(now.host_bytes));
  metrics_->prefix_cache_primary_blocks.Set(static_cast<double>(now.primary_blocks));
  metrics_->prefix_cache_host_blocks.Set(static_cast<double>(now.host_blocks));
  was = now;
}

void DenseEngine::Step() {
  Admit();
  for (auto it = sequences_.begin(); it != sequences_.end();) {
    auto cur = it++;
    if (cur->req->cancelled_) {
      cur->outcome.finish_reason = "cancelled";
      Finish(cur, cur->outcome);
    }
  }
  UpdateGauges();
  if (sequences_.empty()) return;
  std::vector<RunnerEntry> batch;
  std::vector<std::list<Sequence>::iterator> who;
  std::vector<int64_t> chunk;  // prompt tokens per entry (0: a decode)
  int64_t n_tokens = 0;
  for (auto it = sequences_.begin(); it != sequences_.end(); ++it) {
    if (!it->decoding()) continue;
    batch.push_back({it->slot, absl::MakeConstSpan(&it->next, 1), model::LogitsMode::kLast,
                     &it->logits});
    who.push_back(it);
    chunk.push_back(0);
    ++n_tokens;
  }
  int64_t budget = std::max<int64_t>(options_.step_tokens - n_tokens, 1);
  for (auto it = sequences_.begin(); it != sequences_.end() && budget > 0; ++it) {
    if (it->decoding()) continue;
    const auto& prompt = it->req->params_.prompt;
    int64_t n = std::min<int64_t>(budget, prompt.size() - it->prefilled);
    // Recurrent models: the chunk ends where the prefix cache keeps a state.
    n = std::min<int64_t>(n, PrefillStop(*it, it->prefilled) - it->prefilled);
    const bool last = it->prefilled + n == prompt.size();
    batch.push_back({it->slot, absl::MakeConstSpan(prompt).subspan(it->prefilled, n),
                     last ? model::LogitsMode::kLast : model::LogitsMode::kNone, &it->logits});
    who.push_back(it);
    chunk.push_back(n);
    budget -= n;
    n_tokens += n;
  }
  metrics_->batch_tokens.Observe(static_cast<double>(n_tokens));
  if (absl::Status s = runner_->EvalBatch(batch); !s.ok()) {
    for (auto it : who) Finish(it, s);
    UpdateGauges();
    return;
  }
  for (size_t i = 0; i < who.size(); ++i) {
    Sequence& s = *who[i];
    if (cache_ != nullptr && s.req->params_.cache_prompt) {
      s.fed.insert(s.fed.end(), batch[i].tokens.begin(), batch[i].tokens.end());
      InsertBlocks(s);
    }
    if (chunk[i] > 0) {
      s.prefilled += chunk[i];
      metrics_->prompt_tokens.Increment(static_cast<double>(chunk[i]));
      ReportProgress(s);
      if (!s.decoding()) continue;
    }
    absl::StatusOr<bool> more = Advance(s);
    if (!more.ok()) {
      Finish(who[i], more.status());
    } else if (!*more) {
      Finish(who[i], s.outcome);
    }
  }
  UpdateGauges();
}

absl::StatusOr<bool> DenseEngine::Advance(Sequence& s) {
  GenerateDelta delta;
  absl::Span<const uint64_t> allowed;
  if (s.constraint.has_value()) allowed = s.constraint->AllowedTokens();
  if (s.req->params_.ignore_eos) {
    for (const int32_t id : tokenizer_->EndOfGenerationIds()) s.logits[id] = -INFINITY;
  }
  RETURN_IF_ERROR(s.sampler.Sample(s.logits, allowed, &delta.sampled));
  delta.token = delta.sampled.token;
  if (s.constraint.has_value()) RETURN_IF_ERROR(s.constraint->Accept(delta.token));
  const auto now = std::chrono::steady_clock::now();
  if (options_.on_sampled) options_.on_sampled(now);
  if (s.completion == 0) {
    metrics_->time_to_first_token.Observe(
        std::chrono::duration<double>(now - s.req->submitted_).count());
  } else {
    metrics_->inter_token_latency.Observe(std::chrono::duration<double>(now - s.last_token).count());
  }
  s.last_token = now;
  metrics_->generated_tokens.Increment();
  ++s.completion;
  s.outcome.completion_tokens = s.completion;
  const bool eog = tokenizer_->IsEndOfGeneration(delta.token);
  // The constrained output is complete and nothing may follow it.
  const bool done = !eog && s.constraint.has_value() && s.constraint->finished();
  std::string piece;
  if (eog) {
    piece = s.decoder.Flush();
  } else {
    ASSIGN_OR_RETURN(piece, s.decoder.Push(delta.token));
    if (done) piece += s.decoder.Flush();
  }
  StopMatcher::Result r = s.stops.Feed(piece);
  const bool full =
      s.completion >= s.limit || runner_->n_past(s.slot) >= runner_->capacity(s.slot);
  delta.text = std::move(r.text);
  if (eog || done || (full && !r.stopped)) {
    if (!eog && !done) delta.text += s.decoder.Flush();
    delta.text += s.stops.Flush();
  }
  s.next = delta.token;
  {
    std::lock_guard<std::mutex> l(s.req->mu_);
    s.req->deltas_.push_back(std::move(delta));
    if (!s.req->has_first_token_) {
      s.req->first_token_ = now;
      s.req->has_first_token_ = true;
    }
    s.req->last_token_ = now;
    s.req->generated_ = s.completion;
    s.req->NotifyLocked();
  }
  if (eog || done || r.stopped) {
    s.outcome.finish_reason = "stop";
    if (r.stopped) s.outcome.stop_string = s.stops.stops()[r.stop_index];
    return false;
  }
  if (full) {
    s.outcome.finish_reason = "length";
    return false;
  }
  return true;
}

void DenseEngine::Finish(std::list<Sequence>::iterator it,
                         absl::StatusOr<GenerateOutcome> result) {
  std::shared_ptr<RequestHandle> r = it->req;
  runner_->Release(it->slot);  // frees the sequence's state now
  slot_used_[it->slot] = false;
  sequences_.erase(it);
  metrics_->request_duration.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - r->submitted_).count());
  {
    std::lock_guard<std::mutex> l(mu_);
    --running_;
  }
  UpdateGauges();  // before the consumer wakes: it may read them at once
  r->End(std::move(result));
}

void DenseEngine::UpdateGauges() {
  metrics_->kv_used_bytes.Set(static_cast<double>(runner_->state_bytes_used()));
  UpdateCacheMetrics();
  std::lock_guard<std::mutex> l(mu_);
  metrics_->running_sequences.Set(running_);
  metrics_->queue_depth.Set(static_cast<double>(waiting_.size()));
}

}  // namespace moesplit::dense
