#include "services/cli/engine.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"
#include "services/dense/dense_engine.h"

namespace moesplit::cli {

void AddExpertsFlags(FlagParser& flags, ExpertsFlag* dst) {
  flags.AddString("experts", &dst->experts,
                  "where routed experts run: local | shm | grpc (start --workers "
                  "workers) | shm://NAME,grpc://HOST:PORT (running workers)")
      .Meta("WHERE");
  flags.AddInt("workers", &dst->workers, "expert-workers to start for --experts shm|grpc")
      .Range(1, 64);
  flags.AddInt("expert-timeout", &dst->timeout_ms, "ms before an unanswered expert call fails")
      .Range(1, 86400000)
      .Meta("MS");
}

namespace {

// The expert backend --experts asks for.
absl::Status OpenExperts(const std::string& path, const ExpertsFlag& flag,
                         std::shared_ptr<const model::Model> model, ThreadPool* pool,
                         std::unique_ptr<LocalWorkers>* workers,
                         std::unique_ptr<model::ExpertBackend>* out) {
  if (flag.experts == "local") {
    *out = std::make_unique<model::InProcessExperts>(model::LocalExpertStore(model, pool), pool);
    return absl::OkStatus();
  }
  std::vector<std::string> addresses;
  if (flag.experts == "shm" || flag.experts == "grpc") {
    LocalWorkerOptions o;
    o.model = path;
    o.n_workers = static_cast<int>(flag.workers);
    o.n_layer = model->n_layer();
    o.transport = flag.experts;
    o.threads = pool->size();
    ASSIGN_OR_RETURN(*workers, LocalWorkers::Start(o));
    addresses = (*workers)->addresses();
  } else {
    for (absl::string_view a : absl::StrSplit(flag.experts, ',', absl::SkipEmpty())) {
      addresses.emplace_back(a);
    }
  }
  transport::ClientOptions co;
  co.model_identity = model->file().Identity();
  co.timeout = std::chrono::milliseconds(flag.timeout_ms);
  ASSIGN_OR_RETURN(*out, dense::ConnectExperts(addresses, co, model->n_layer(),
                                               static_cast<int>(model->hparams().n_expert),
                                               std::chrono::milliseconds(10000)));
  return absl::OkStatus();
}

}  // namespace

Engine::~Engine() {
  forward_.reset();
  experts_.reset();
  if (workers_) workers_->Stop();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(const std::string& path,
                                                     int threads,
                                                     const ExpertsFlag& experts) {
  std::unique_ptr<Engine> e(new Engine());
  ASSIGN_OR_RETURN(e->model_, model::Model::Open(path));
  ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromGguf(e->model_->file()));
  e->pool_ = std::make_unique<ThreadPool>(threads);
  RETURN_IF_ERROR(OpenExperts(path, experts, e->model_, e->pool_.get(), &e->workers_,
                              &e->experts_));
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
