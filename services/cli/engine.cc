#include "services/cli/engine.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"

namespace moesplit::cli {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(const std::string& path,
                                                     int threads) {
  std::unique_ptr<Engine> e(new Engine());
  ASSIGN_OR_RETURN(e->model_, model::Model::Open(path));
  ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromGguf(e->model_->file()));
  e->pool_ = std::make_unique<ThreadPool>(threads);
  e->experts_ = std::make_unique<model::InProcessExperts>(
      model::ExpertStore(e->model_), e->pool_.get());
  e->forward_ = std::make_unique<model::Forward>(e->model_, e->experts_.get(),
                                                 e->pool_.get());
  return e;
}

absl::Status Engine::CheckTokens(const std::vector<int32_t>& tokens) const {
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", t, " out of range [0, ", n_vocab(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ParseTokenList(absl::string_view text) {
  std::vector<int32_t> out;
  for (absl::string_view piece :
       absl::StrSplit(text, absl::ByAnyChar(", \t\r\n"), absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(piece, &v) || v < 0 || v > INT32_MAX) {
      if (absl::SimpleAtoi(piece, &v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", v, " out of range"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("bad token id '", piece, "' in --tokens"));
    }
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) return absl::InvalidArgumentError("--tokens is empty");
  return out;
}

}  // namespace moesplit::cli
