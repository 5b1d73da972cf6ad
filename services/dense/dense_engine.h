// DenseEngine: the dense service's model runner and request scheduler. Owns
// the model's dense weights (read from the GGUF mapping; routed experts are
// never touched here), the tokenizer, one KV cache per running sequence and
// the forward pass, and calls the routed experts through an ExpertBackend —
// RemoteExperts over the expert-workers, or an in-process store for tests.
//
// Continuous batching. One engine thread runs steps; each step evaluates,
// in ONE Forward::EvalBatch (one ExpertCall per layer):
//   - one decode token for every running sequence that has a prompt behind
//     it, then
//   - chunks of waiting prompts (chunked prefill, oldest first) up to
//     options.step_tokens tokens in the step (at least one prompt token when
//     decodes fill it), so long prompts never starve running decodes.
// At most options.max_sequences sequences run; up to options.max_queue more
// wait for a slot; beyond that Submit fails RESOURCE_EXHAUSTED. Because the
// forward pass gives a token the same bits whatever shares its step
// (forward.h), a greedy request produces exactly what it produces alone.
//
// Sequence state: each running sequence holds one runner slot
// (sequence_runner.h, CPU or GPU alike); on the CPU its state holds
// min(context, prompt + max_tokens) positions (context when max_tokens is
// 0), allocated when the sequence starts and freed the moment it ends
// (finished, failed or cancelled); the GPU runner's slots are planned for
// the full context at start-up.
//
// Prefix cache (prefix_cache.h; options.prefix_cache): a starting sequence
// copies the longest cached prefix of its prompt into its slot (at least
// one prompt token is still evaluated) and prefills the rest; every block
// of 64 tokens a sequence completes, in prefill or decode, is inserted.
// With DeltaNet layers prefill chunks also end where a recurrent state is
// kept (every 8 blocks and the prompt's last block boundary). Outputs do
// not change (a token's bits do not depend on its step);
// GenerateOutcome::cached_tokens says how many prompt tokens were reused.
//
// Thread-safe: Submit/Generate and the handles may be used from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/thread_pool.h"
#include "common/model/forward.h"
#include "common/model/model.h"
#include "common/plan/serving_defaults.h"
#include "common/sampling/sampler.h"
#include "common/sampling/stop_matcher.h"
#include "common/sampling/token_constraint.h"
#include "common/tokenizer/tokenizer.h"
#include "common/transport/remote_experts.h"
#include "services/dense/prefix_cache.h"
#include "services/dense/sequence_runner.h"
#include "services/dense/serving_metrics.h"

namespace moesplit::dense {

struct EngineOptions {
  std::string model_path;
  // Expert-worker addresses (shm://NAME, grpc://HOST:PORT); empty = compute
  // routed experts in-process (tests, single binary).
  std::vector<std::string> experts;
  std::chrono::milliseconds expert_timeout{10000};
  std::chrono::milliseconds connect_timeout{60000};  // waiting for workers at start
  // TLS towards grpc:// workers (ClientOptions::tls): --tls-ca, the client
  // certificate --tls-cert/--tls-key, --tls-server-name.
  auth::TlsPem worker_tls = {};
  int threads = 0;
  int n_ctx = defaults::kContext;
  int max_sequences = defaults::kParallel;  // --parallel
  int max_queue = defaults::kMaxQueue;      // --max-queue
  int step_tokens = defaults::kStepTokens;  // tokens per forward step (decodes + prefill chunks)
  // Where the dense part runs: auto | cpu | cuda, the GPU memory budget
  // (0 = free memory) and the GPU KV cache type (sequence_runner.h). On the
  // GPU the runner holds max_sequences KV caches of n_ctx (the memory
  // planner checks they fit the budget) and batches them like the CPU.
  std::string backend = "auto";
  uint64_t gpu_memory = 0;
  std::string kv_type{defaults::kKvType};
  // GPU hot-expert cache slots and streamed-prefill threshold (-1 automatic,
  // 0 off; RunnerOptions), page-locking of the experts' host source.
  int64_t expert_cache_slots = -1;
  int64_t prefill_stream_min_tokens = -1;
  bool pin_experts = false;
  // Automatic prefix caching (prefix_cache.h, docs/prefix-cache.md): on
  // by default; the primary tier's budget (0 = what the runner's
  // sequence slots hold at the full context, state_bytes_capacity) and the
  // host tier's (--cache-ram; 0 = none: evicted blocks are dropped). On a
  // GPU runner cache_device (--cache-device; 0 = none) is a device-memory
  // tier in front of them, planned in the GPU budget (InvalidArgument with
  // backend "cpu"; ignored, with a warning, when "auto" runs on the CPU).
  bool prefix_cache = true;
  uint64_t cache_device = 0;
  uint64_t cache_memory = 0;
  uint64_t cache_ram = 0;
  int cache_block_tokens = kDefaultBlockTokens;
  // Metrics go here when set (must outlive the engine); else a private registry.
  std::shared_ptr<prometheus::Registry> registry;
  // Called on the engine thread right after each token is sampled, with the
  // sampling time (benchmarks: tests/bench/stream_bench.cc). Must be cheap
  // and must not call the engine.
  std::function<void(std::chrono::steady_clock::time_point)> on_sampled;
};

struct GenerateParams {
  std::vector<int32_t> prompt;
  int max_tokens = 0;  // 0: until end of generation or the context is full
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (matched across tokens)
  // Constrained decoding (response_format; common/sampling/json_schema.h):
  // each step samples only among the tokens that keep the output a prefix of
  // a sentence of this grammar (control tokens never, EOG only when it is
  // complete); once the sentence is complete and nothing may follow, the
  // request ends with "stop" at once. Null: unconstrained.
  std::shared_ptr<const grammar::Grammar> constraint;
  // End-of-generation tokens are never sampled (llama.cpp's ignore_eos, as
  // benchmark clients send it): the request runs to max_tokens, a stop
  // string or the end of the context.
  bool ignore_eos = false;
  // llama-server's return_progress: RequestHandle::Take reports the
  // prompt's progress once the sequence is admitted (the prefix cache
  // import counted) and after each prompt chunk it evaluates.
  bool report_progress = false;
  // The prefix cache (llama-server's cache_prompt): false, the request
  // neither reads its prompt's prefix from the cache nor stores its blocks
  // there; it evaluates the whole prompt.
  bool cache_prompt = true;
};

// llama-server's prompt_progress: the prompt's tokens, those reused from
// the prefix cache, those in the sequence's state (cached + evaluated), and
// the milliseconds since the sequence was admitted.
struct PromptProgress {
  int total = 0;
  int cache = 0;
  int processed = 0;
  int64_t time_ms = 0;
};

struct GenerateDelta {
  std::string text;   // UTF-8, possibly empty (a held-back character or stop prefix)
  int32_t token = -1;
  SampledToken sampled;  // logprobs when asked
};

// A request's counts and times (RequestHandle::timings): tokens, arrival to
// the first generated token (-1 when none came), first to last generated
// token, arrival to the end (to now while it runs).
struct RequestTimings {
  int prompt_tokens = 0;
  int cached_tokens = 0;  // of them, reused from the prefix cache
  int generated_tokens = 0;
  double ttft_s = -1;
  double decode_s = 0;
  double duration_s = 0;
  // Generated tokens per second after the first: (generated - 1) / decode_s,
  // 0 with fewer than two tokens.
  double decode_tokens_per_s() const {
    return generated_tokens > 1 && decode_s > 0 ? (generated_tokens - 1) / decode_s : 0.0;
  }
};

// The payload key of a status whose OpenAI error `code` is set by the
// engine (e.g. "shutting_down"); the HTTP API reports it.
inline constexpr char kErrorCodePayload[] = "moesplit/error_code";
// UNAVAILABLE with code "shutting_down".
absl::Status ShuttingDownError(const std::string& message);

struct GenerateOutcome {
  std::string finish_reason;  // "stop" | "length" | "cancelled"
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens reused from the prefix cache (not evaluated)
  std::string stop_string;  // the stop string that ended it ("stop"), else empty
};

class DenseEngine;

// One submitted request. Its output is pushed: the engine thread appends
// each token's delta (and, at the end, the outcome) to the handle and wakes
// the handle's one consumer (Subscribe), which takes them (Take) on a thread
// of its own choosing. The engine never waits for a consumer: deltas not
// taken yet stay buffered in the handle (at most one per generated token, so
// at most max_tokens, or the context, per request). Wait() is the blocking
// consumer on top of that (CLI, tests).
class RequestHandle {
 public:
  // Registers the consumer's wake-up (one consumer per handle; a second
  // Subscribe replaces the first). `ready` is called whenever the handle
  // has something new for Take (a delta or the end) and Take was called
  // since the last call (or never): at most one wake-up is outstanding,
  // however many deltas come. It runs on the engine thread (or, when
  // something is pending already, on the caller's thread inside Subscribe)
  // with the handle's lock held, so it must not block and must not call
  // this handle or the engine: it only enqueues work and wakes the
  // consumer (e.g. posts to an executor, notifies a condition variable).
  // Once the request ended and that was signalled, the callback is
  // destroyed (so it may hold strong references without a cycle leaking).
  void Subscribe(std::function<void()> ready);
  // Moves the deltas produced since the last Take to *deltas (appended, in
  // order) and re-arms the wake-up. Returns true once the request has ended
  // and every delta was taken; *result then holds the outcome (see Wait).
  // With `progress`: the prompt progress reports not taken yet, appended in
  // order (GenerateParams::report_progress; one per prompt chunk at most);
  // each wakes the consumer as a delta does.
  bool Take(std::vector<GenerateDelta>* deltas, absl::StatusOr<GenerateOutcome>* result,
            std::vector<PromptProgress>* progress = nullptr);
  // Calls on_delta for each token in order, on the calling thread (return
  // false to cancel), until the request ends. A cancelled sequence is
  // removed and its KV freed before Wait returns, with finish_reason
  // "cancelled". Errors: UNAVAILABLE (an expert worker failed, shutdown),
  // RESOURCE_EXHAUSTED (KV allocation), INTERNAL. Uses Subscribe: not
  // together with another consumer.
  absl::StatusOr<GenerateOutcome> Wait(const std::function<bool(const GenerateDelta&)>& on_delta);
  // Whether the request's first token or its end came (its prompt is then
  // evaluated and, with the prefix cache, cached for requests sharing it).
  bool started() const;
  // Asks the engine to stop the request: it ends, "cancelled", at the
  // engine's next step (any thread).
  void Cancel() { cancelled_ = true; }
  // Counts and times so far (final once the request ended).
  RequestTimings timings() const;
  ~RequestHandle();

 private:
  friend class DenseEngine;
  RequestHandle() = default;
  // Engine side, mu_ held: wakes the consumer when armed.
  void NotifyLocked();
  // Ends the request with `result` and wakes the consumer (mu_ not held).
  void End(absl::StatusOr<GenerateOutcome> result);

  // Constant after Submit.
  GenerateParams params_;
  std::chrono::steady_clock::time_point submitted_;
  ServingMetrics* metrics_ = nullptr;

  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  std::deque<GenerateDelta> deltas_;                        // guarded by mu_
  bool done_ = false;                                       // guarded by mu_
  absl::StatusOr<GenerateOutcome> result_ = GenerateOutcome{};  // guarded by mu_
  std::function<void()> ready_;  // guarded by mu_: the consumer's wake-up
  bool armed_ = true;            // guarded by mu_: Take came since the last wake-up
  // Set by the engine thread, guarded by mu_.
  int generated_ = 0;
  int cached_ = 0;
  std::chrono::steady_clock::time_point first_token_, last_token_, finished_;
  bool has_first_token_ = false, has_finished_ = false;
  std::vector<PromptProgress> progress_;  // not taken yet
};

class DenseEngine {
 public:
  // NotFound/InvalidArgument for the model or options; UNAVAILABLE/
  // FAILED_PRECONDITION when the workers cannot be reached in time, serve
  // another model, leave experts unowned or overlap.
  static absl::StatusOr<std::unique_ptr<DenseEngine>> Create(const EngineOptions& options);
  ~DenseEngine();  // stops the engine thread; pending requests end UNAVAILABLE

  // Validates and queues a request. Errors, before any work: InvalidArgument
  // (empty prompt, token out of range, prompt longer than the context naming
  // both numbers, negative max_tokens, bad sampling parameters or stop
  // strings); RESOURCE_EXHAUSTED when max_sequences run and max_queue wait.
  absl::StatusOr<std::shared_ptr<RequestHandle>> Submit(GenerateParams params);

  // Submit + Wait.
  absl::StatusOr<GenerateOutcome> Generate(const GenerateParams& params,
                                           const std::function<bool(const GenerateDelta&)>& on_delta);

  const model::Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int n_ctx() const { return n_ctx_; }
  int max_sequences() const { return options_.max_sequences; }
  int max_queue() const { return options_.max_queue; }
  // State bytes (KV + recurrent) of one sequence at full context.
  uint64_t kv_bytes_per_sequence() const {
    return runner_->state_bytes_capacity() / static_cast<uint64_t>(runner_->slots());
  }
  ServingMetrics& metrics() { return *metrics_; }
  // "cpu" or "cuda:<device>": where the dense forward runs.
  std::string backend_name() const { return runner_->name(); }
  // The GPU runner's cache and streaming state (zeros on the CPU); thread-safe.
  GpuRunnerInfo gpu_info() const { return runner_->gpu_info(); }
  // The GPU memory plan the runner allocated from; nullptr on the CPU.
  const plan::MemoryPlan* memory_plan() const { return runner_->memory_plan(); }
  prometheus::Registry& registry() { return *registry_; }
  // The prefix cache, or nullptr when off.
  const PrefixCache* prefix_cache() const { return cache_.get(); }
  // Sequences running and requests queued now.
  int running() const;
  int queued() const;
  // Draining: every later Submit fails with ShuttingDownError; what runs or
  // waits goes on. Idempotent.
  void BeginDrain();
  // Ends every running and queued request now with `status` (their Wait
  // returns it, Take reports it; slots and KV are freed). Returns how many there were.
  int AbortAll(absl::Status status);
  // The remote experts, or nullptr when computing in-process.
  transport::RemoteExperts* remote() const { return remote_.get(); }
  const std::vector<std::string>& expert_addresses() const { return expert_addresses_; }

 private:
  struct Sequence;
  DenseEngine() = default;
  absl::Status CheckPrompt(const std::vector<int32_t>& prompt) const;
  void Loop();
  // Starts queued requests while slots are free (engine thread).
  void Admit();
  absl::Status StartSequence(std::shared_ptr<RequestHandle> r);
  // One forward step over the running sequences (engine thread).
  void Step();
  // Samples the next token of `s` from `logits` and delivers it; false when
  // the sequence ended.
  absl::StatusOr<bool> Advance(Sequence& s);
  void Finish(std::list<Sequence>::iterator it, absl::StatusOr<GenerateOutcome> result);
  // Prefix cache (engine thread): imports the longest cached prefix of the
  // prompt into s's fresh slot; inserts the blocks s completed; the
  // position a prefill chunk from `from` must stop at so that a recurrent
  // state is taken there (INT64_MAX: none before the prompt's end).
  void ImportPrefix(Sequence& s);
  // GenerateParams::report_progress: the prompt progress for Take.
  void ReportProgress(Sequence& s);
  void InsertBlocks(Sequence& s);
  int64_t PrefillStop(const Sequence& s, int64_t from) const;
  bool KeepsState(const Sequence& s, int64_t pos) const;
  void UpdateCacheMetrics();
  void UpdateGauges();

  // Constant after Create.
  EngineOptions options_;
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<transport::RemoteExperts> remote_;
  std::unique_ptr<model::ExpertBackend> local_;
  // The sequences' state and the forward pass, CPU or GPU alike.
  std::unique_ptr<SequenceRunner> runner_;
  std::vector<bool> slot_used_;  // per runner slot: held by a sequence (engine thread)
  std::vector<std::string> expert_addresses_;
  int n_ctx_ = 0;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ServingMetrics> metrics_;
  // The vocabulary's token trie for constrained requests: built by the
  // engine thread at the first one, shared by all.
  std::shared_ptr<const VocabIndex> vocab_index_;
  std::unique_ptr<PrefixCache> cache_;  // null when off
  PrefixCacheStats cache_reported_;     // engine thread: what the counters show

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<RequestHandle>> waiting_;  // guarded by mu_
  int running_ = 0;                                    // guarded by mu_
  bool stop_ = false;                                  // guarded by mu_
  bool draining_ = false;                              // guarded by mu_
  std::optional<absl::Status> abort_;                  // guarded by mu_: AbortAll pending

  std::list<Sequence> sequences_;  // engine thread only
  std::thread loop_;
};

// Connects to every address, waiting up to `timeout` for workers that are not
// up yet, and builds the owner table.
absl::StatusOr<std::unique_ptr<transport::RemoteExperts>> ConnectExperts(
    const std::vector<std::string>& addresses, const transport::ClientOptions& options,
    int n_layer, int n_expert, std::chrono::milliseconds timeout);

}  // namespace moesplit::dense
