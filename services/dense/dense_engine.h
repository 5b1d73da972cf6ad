// DenseEngine: the dense service's model runner. Owns the model's dense
// weights (read from the GGUF mapping; routed experts are never touched
// here), the tokenizer, the KV cache and the forward pass, and calls the
// routed experts through an ExpertBackend — RemoteExperts over the
// expert-workers, or an in-process store for tests.
//
// One sequence runs at a time (requests queue on a mutex); continuous
// batching comes with the scheduler.
//
// Thread-safe: Generate() may be called from many threads.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/thread_pool.h"
#include "common/model/forward.h"
#include "common/model/model.h"
#include "common/sampling/sampler.h"
#include "common/sampling/stop_matcher.h"
#include "common/tokenizer/tokenizer.h"
#include "common/transport/remote_experts.h"
#include "services/dense/sequence_runner.h"

namespace moesplit::dense {

struct EngineOptions {
  std::string model_path;
  // Expert-worker addresses (shm://NAME, grpc://HOST:PORT); empty = compute
  // routed experts in-process (tests, single binary).
  std::vector<std::string> experts;
  std::chrono::milliseconds expert_timeout{10000};
  std::chrono::milliseconds connect_timeout{60000};  // waiting for workers at start
  int threads = 0;
  int n_ctx = 4096;
  // Where the dense part runs: auto | cpu | cuda, the GPU memory budget
  // (0 = free memory) and the GPU KV cache type (sequence_runner.h).
  std::string backend = "auto";
  uint64_t gpu_memory = 0;
  std::string kv_type = "f16";
};

struct GenerateParams {
  std::vector<int32_t> prompt;
  int max_tokens = 0;  // 0: until end of generation or the context is full
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (matched across tokens)
};

struct GenerateDelta {
  std::string text;   // UTF-8, possibly empty (a held-back character or stop prefix)
  int32_t token = -1;
  SampledToken sampled;  // logprobs when asked
};

struct GenerateOutcome {
  std::string finish_reason;  // "stop" | "length" | "cancelled"
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

class DenseEngine {
 public:
  // NotFound/InvalidArgument for the model; UNAVAILABLE/FAILED_PRECONDITION
  // when the workers cannot be reached in time, serve another model, leave
  // experts unowned or overlap.
  static absl::StatusOr<std::unique_ptr<DenseEngine>> Create(const EngineOptions& options);

  // Runs one sequence from an empty cache; `on_delta` is called per token
  // (return false to stop: finish_reason "cancelled"). Errors, before any
  // work: InvalidArgument (empty prompt, token out of range, prompt longer
  // than the context naming both numbers, bad sampling parameters or stop
  // strings); during it: UNAVAILABLE naming the expert worker that failed.
  absl::StatusOr<GenerateOutcome> Generate(const GenerateParams& params,
                                           const std::function<bool(const GenerateDelta&)>& on_delta);

  const model::Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int n_ctx() const { return n_ctx_; }
  // The remote experts, or nullptr when computing in-process.
  transport::RemoteExperts* remote() const { return remote_.get(); }
  const std::vector<std::string>& expert_addresses() const { return expert_addresses_; }
  // "cpu" or "cuda:<device>": where the dense forward runs.
  std::string backend_name() const { return runner_->name(); }

 private:
  DenseEngine() = default;
  absl::Status CheckPrompt(const std::vector<int32_t>& prompt) const;

  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<transport::RemoteExperts> remote_;
  std::unique_ptr<model::ExpertBackend> local_;
  std::vector<std::string> expert_addresses_;
  int n_ctx_ = 0;

  std::mutex mu_;  // one sequence at a time
  std::unique_ptr<SequenceRunner> runner_;  // forward + KV cache; guarded by mu_
};

// Connects to every address, waiting up to `timeout` for workers that are not
// up yet, and builds the owner table.
absl::StatusOr<std::unique_ptr<transport::RemoteExperts>> ConnectExperts(
    const std::vector<std::string>& addresses, const transport::ClientOptions& options,
    int n_layer, int n_expert, std::chrono::milliseconds timeout);

}  // namespace moesplit::dense
