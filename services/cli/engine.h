// Engine: everything `logits` and `generate` need to run a model on the CPU —
// the validated Model, its tokenizer, a thread pool, the in-process routed
// experts and the forward pass — opened from one GGUF path.
//
// Ownership: the Engine owns all of them; destroy it after the last use of
// any SequenceState evaluated with it. Not thread-safe (one command at a time).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/model/forward.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "services/cli/flags.h"
#include "services/cli/local_workers.h"

namespace moesplit::cli {

// Where the routed experts are computed (`--experts`, `--workers`):
//   "local"                 in this process (the default);
//   "shm" | "grpc"          `workers` expert-workers started for this command
//                           (layers split evenly), stopped when it ends;
//   "shm://N,grpc://H:P"    running workers at these addresses.
struct ExpertsFlag {
  std::string experts = "local";
  int64_t workers = 1;
  int64_t timeout_ms = 10000;
};

class Engine {
 public:
  // Errors of Model::Open (NotFound for a missing file, InvalidArgument for
  // an unsupported architecture or type) and Tokenizer::FromGguf; those of
  // starting or reaching the expert-workers (Unavailable, FailedPrecondition).
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& path,
                                                      int threads,
                                                      const ExpertsFlag& experts = {});
  ~Engine();

  const model::Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const model::Forward& forward() const { return *forward_; }
  std::shared_ptr<const model::Model> shared_model() const { return model_; }
  // The routed-expert backend --experts chose (in-process or the workers).
  model::ExpertBackend* experts() const { return experts_.get(); }
  ThreadPool* pool() const { return pool_.get(); }
  int64_t n_vocab() const { return model_->hparams().n_vocab; }

  // InvalidArgument naming the first id outside [0, n_vocab).
  absl::Status CheckTokens(const std::vector<int32_t>& tokens) const;

 private:
  Engine() = default;
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<LocalWorkers> workers_;  // started for this command
  std::unique_ptr<model::ExpertBackend> experts_;
  std::unique_ptr<model::Forward> forward_;
};

// Registers --experts, --workers and --expert-timeout on `flags`.
void AddExpertsFlags(FlagParser& flags, ExpertsFlag* dst);

// Parses "1,2,3" (commas and/or whitespace between ids). InvalidArgument for
// an empty list or a token that is not a non-negative 32-bit integer.
absl::StatusOr<std::vector<int32_t>> ParseTokenList(absl::string_view text);

}  // namespace moesplit::cli
