#include "common/transport/remote_experts.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::transport {

std::string DescribeRange(int layer_begin, int layer_end, int expert_begin, int expert_end) {
  auto range = [](int b, int e) {
    return e - b == 1 ? absl::StrCat(b) : absl::StrCat(b, "-", e - 1);
  };
  return absl::StrCat("experts ", range(expert_begin, expert_end), " of layer",
                      layer_end - layer_begin == 1 ? " " : "s ", range(layer_begin, layer_end));
}

absl::StatusOr<std::unique_ptr<RemoteExperts>> RemoteExperts::Connect(
    std::vector<std::unique_ptr<ExpertClient>> clients, int n_layer, int n_expert) {
  if (clients.empty()) return absl::InvalidArgumentError("no expert workers given");
  std::unique_ptr<RemoteExperts> r(new RemoteExperts());
  r->n_layer_ = n_layer;
  r->n_expert_ = n_expert;
  r->owner_.assign(static_cast<size_t>(n_layer) * n_expert, -1);
  for (size_t w = 0; w < clients.size(); ++w) {
    ASSIGN_OR_RETURN(WorkerDescription d, clients[w]->Describe());
    if (d.n_layer != n_layer || d.n_expert != n_expert) {
      return absl::FailedPreconditionError(absl::StrCat(
          "expert worker ", clients[w]->address(), " has ", d.n_layer, " layers x ", d.n_expert,
          " experts, the model has ", n_layer, " x ", n_expert));
    }
    if (d.layer_begin < 0 || d.layer_end > n_layer || d.expert_begin < 0 ||
        d.expert_end > n_expert || d.layer_begin >= d.layer_end ||
        d.expert_begin >= d.expert_end) {
      return absl::FailedPreconditionError(absl::StrCat(
          "expert worker ", clients[w]->address(), " describes an invalid shard: ",
          DescribeRange(d.layer_begin, d.layer_end, d.expert_begin, d.expert_end)));
    }
    for (int l = d.layer_begin; l < d.layer_end; ++l) {
      for (int e = d.expert_begin; e < d.expert_end; ++e) {
        int& o = r->owner_[static_cast<size_t>(l) * n_expert + e];
        if (o >= 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              "expert shards overlap: expert ", e, " of layer ", l, " is owned by both ",
              clients[o]->address(), " (",
              DescribeRange(r->workers_[o].layer_begin, r->workers_[o].layer_end,
                            r->workers_[o].expert_begin, r->workers_[o].expert_end),
              ") and ", clients[w]->address(), " (",
              DescribeRange(d.layer_begin, d.layer_end, d.expert_begin, d.expert_end), ")"));
        }
        o = static_cast<int>(w);
      }
    }
    r->workers_.push_back(std::move(d));
  }
  for (int l = 0; l < n_layer; ++l) {
    for (int e = 0; e < n_expert; ++e) {
      if (r->owner_[static_cast<size_t>(l) * n_expert + e] >= 0) continue;
      int e_end = e;
      while (e_end < n_expert && r->owner_[static_cast<size_t>(l) * n_expert + e_end] < 0) ++e_end;
      return absl::FailedPreconditionError(absl::StrCat(
          "no expert worker owns ", DescribeRange(l, l + 1, e, e_end),
          " (the workers' shards must cover every layer and expert)"));
    }
  }
  r->clients_ = std::move(clients);
  return r;
}

bool RemoteExperts::BuildSubCall(const model::ExpertCallView& call, int w, int t0, int t1,
                                 model::ExpertCall* sub) const {
  const int d = call.d;
  sub->call_id = call.call_id;
  sub->layer = call.layer;
  sub->n_tokens = t1 - t0;
  sub->d = d;
  sub->hidden.assign(call.hidden.begin() + static_cast<size_t>(t0) * d,
                     call.hidden.begin() + static_cast<size_t>(t1) * d);
  const int* owner = owner_.data() + static_cast<size_t>(call.layer) * n_expert_;
  return model::FilterRouting(call, t0, t1, [&](int e) { return owner[e] == w; },
                              &sub->token_offsets, &sub->expert_ids, &sub->weights) > 0;
}

void RemoteExperts::SetRoundTripObserver(RoundTripObserver observer) {
  absl::MutexLock lock(&observer_mu_);
  observer_ = std::move(observer);
}

absl::Status RemoteExperts::Check(const model::ExpertCallView& call) const {
  if (call.layer < 0 || call.layer >= n_layer_) {
    return absl::InvalidArgumentError(absl::StrCat("expert call layer ", call.layer,
                                                   " out of range [0, ", n_layer_, ")"));
  }
  if (call.n_tokens < 0 || call.token_offsets.size() != static_cast<size_t>(call.n_tokens) + 1 ||
      call.hidden.size() != static_cast<size_t>(call.n_tokens) * call.d) {
    return absl::InvalidArgumentError("malformed expert call (sizes)");
  }
  for (int32_t e : call.expert_ids) {
    if (e < 0 || e >= n_expert_) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert id ", e, " out of range [0, ", n_expert_, ")"));
    }
  }
  return absl::OkStatus();
}

// Token chunks: the smallest max_tokens among the workers.
int RemoteExperts::ChunkTokens(const model::ExpertCallView& call) const {
  int chunk = call.n_tokens > 0 ? call.n_tokens : 1;
  for (const auto& d : workers_) chunk = std::min(chunk, std::max(1, d.max_tokens));
  return chunk;
}

absl::Status RemoteExperts::SubmitChunk(const model::ExpertCallView& call, int t0, int t1,
                                        bool whole) {
  const int n_workers = static_cast<int>(clients_.size());
  tickets_.assign(n_workers, -1);
  subs_.resize(n_workers);
  absl::Status first_error;
  for (int w = 0; w < n_workers; ++w) {
    if (whole && w > 0) break;
    if (!whole && !BuildSubCall(call, w, t0, t1, &subs_[w])) continue;
    auto ticket = whole ? clients_[w]->Submit(call) : clients_[w]->Submit(subs_[w]);
    if (!ticket.ok()) {
      if (first_error.ok()) first_error = ticket.status();
      continue;
    }
    tickets_[w] = static_cast<int64_t>(*ticket);
  }
  return first_error;
}

absl::Status RemoteExperts::CollectChunk(const model::ExpertCallView& call, int t0, int t1,
                                         bool whole, float* partial,
                                         uint64_t* chunk_worker_ns) {
  const int n_workers = static_cast<int>(clients_.size());
  const size_t n = static_cast<size_t>(t1 - t0) * call.d;
  float* dst = partial + static_cast<size_t>(t0) * call.d;
  results_.resize(n_workers);
  absl::Status first_error;
  *chunk_worker_ns = 0;  // the slowest worker of the chunk
  if (!whole) std::fill(dst, dst + n, 0.0f);
  for (int w = 0; w < n_workers; ++w) {
    if (tickets_[w] < 0) continue;
    uint64_t worker_ns = 0;
    absl::Status s;
    if (whole) {
      s = clients_[w]->Wait(static_cast<uint64_t>(tickets_[w]), dst, n, &worker_ns);
    } else {
      results_[w].resize(n);
      s = clients_[w]->Wait(static_cast<uint64_t>(tickets_[w]), results_[w].data(), n,
                            &worker_ns);
    }
    if (!s.ok()) {
      if (first_error.ok()) first_error = s;
      continue;
    }
    if (!first_error.ok()) continue;
    *chunk_worker_ns = std::max(*chunk_worker_ns, worker_ns);
    if (!whole) {
      const float* p = results_[w].data();
      for (size_t i = 0; i < n; ++i) dst[i] += p[i];
    }
  }
  return first_error;
}

absl::Status RemoteExperts::ComputeInto(const model::ExpertCallView& call, float* partial,
                                        uint64_t* worker_ns) {
  RETURN_IF_ERROR(Start(call, partial, worker_ns));
  return Finish();
}

absl::Status RemoteExperts::Start(const model::ExpertCallView& call, float* partial,
                                  uint64_t* worker_ns) {
  if (pending_.active) {
    return absl::FailedPreconditionError("an expert call is already in flight (Finish it first)");
  }
  RETURN_IF_ERROR(Check(call));
  pending_ = Pending{};
  pending_.active = true;
  pending_.call = call;
  pending_.partial = partial;
  pending_.worker_ns = worker_ns;
  pending_.start = std::chrono::steady_clock::now();
  const int chunk = ChunkTokens(call);
  if (chunk >= call.n_tokens) {
    // One chunk: submitted now, collected in Finish. One worker owning every
    // expert (the shards cover the model) takes the call as it is and
    // answers into the caller's partial: no sub-call copy, zeroed sum or add
    // (three passes over n_tokens x d floats; ~1% of a 512-token prefill).
    pending_.whole = clients_.size() == 1 && !call.expert_ids.empty();
    pending_.submitted = true;
    pending_.status = SubmitChunk(call, 0, call.n_tokens, pending_.whole);
    return absl::OkStatus();
  }
  // Several chunks: each waits for the previous one, so the call runs here.
  uint64_t total_ns = 0;
  for (int t0 = 0; t0 < call.n_tokens && pending_.status.ok(); t0 += chunk) {
    const int t1 = std::min(call.n_tokens, t0 + chunk);
    absl::Status s = SubmitChunk(call, t0, t1, false);
    uint64_t chunk_ns = 0;
    absl::Status c = CollectChunk(call, t0, t1, false, partial, &chunk_ns);
    pending_.status = !s.ok() ? s : c;
    total_ns += chunk_ns;
  }
  pending_.chunk_worker_ns = total_ns;
  return absl::OkStatus();
}

absl::Status RemoteExperts::Finish() {
  if (!pending_.active) return absl::FailedPreconditionError("no expert call in flight");
  Pending& p = pending_;
  p.active = false;
  absl::Status status = p.status;
  if (p.submitted) {
    // Every ticket Start got is collected, even after an error (the rings
    // stay in step); a call no worker has entries of gives zeros.
    uint64_t ns = 0;
    const absl::Status c = CollectChunk(p.call, 0, p.call.n_tokens, p.whole, p.partial, &ns);
    if (status.ok()) status = c;
    p.chunk_worker_ns = ns;
  }
  RETURN_IF_ERROR(status);
  if (p.worker_ns != nullptr) *p.worker_ns = p.chunk_worker_ns;
  absl::MutexLock lock(&observer_mu_);
  if (observer_) {
    observer_(p.call,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count(),
              p.chunk_worker_ns);
  }
  return absl::OkStatus();
}

}  // namespace moesplit::transport
