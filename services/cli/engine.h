// Engine: everything `logits` and `generate` need to run a model on the CPU —
// the validated Model, its tokenizer, a thread pool, the in-process routed
// experts and the forward pass — opened from one GGUF path.
//
// Ownership: the Engine owns all of them; destroy it after the last use of
// any KvCache evaluated with it. Not thread-safe (one command at a time).
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

namespace moesplit::cli {

class Engine {
 public:
  // Errors of Model::Open (NotFound for a missing file, InvalidArgument for
  // an unsupported architecture or type) and Tokenizer::FromGguf.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& path,
                                                      int threads);

  const model::Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const model::Forward& forward() const { return *forward_; }
  int64_t n_vocab() const { return model_->hparams().n_vocab; }

  // InvalidArgument naming the first id outside [0, n_vocab).
  absl::Status CheckTokens(const std::vector<int32_t>& tokens) const;

 private:
  Engine() = default;
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<model::InProcessExperts> experts_;
  std::unique_ptr<model::Forward> forward_;
};

// Parses "1,2,3" (commas and/or whitespace between ids). InvalidArgument for
// an empty list or a token that is not a non-negative 32-bit integer.
absl::StatusOr<std::vector<int32_t>> ParseTokenList(absl::string_view text);

}  // namespace moesplit::cli
