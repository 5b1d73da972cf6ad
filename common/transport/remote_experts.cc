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

bool RemoteExperts::BuildSubCall(const model::ExpertCall& call, int w, int t0, int t1,
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

absl::Status RemoteExperts::Compute(const model::ExpertCall& call, model::ExpertResult* result) {
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(ComputeCalls(call, result));
  absl::MutexLock lock(&observer_mu_);
  if (observer_) {
    observer_(call, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              result->worker_ns);
  }
  return absl::OkStatus();
}

absl::Status RemoteExperts::ComputeCalls(const model::ExpertCall& call,
                                         model::ExpertResult* result) {
  if (call.layer < 0 || call.layer >= n_layer_) {
    return absl::InvalidArgumentError(absl::StrCat("expert call layer ", call.layer,
                                                   " out of range [0, ", n_layer_, ")"));
  }
  if (call.token_offsets.size() != static_cast<size_t>(call.n_tokens) + 1 ||
      call.hidden.size() != static_cast<size_t>(call.n_tokens) * call.d) {
    return absl::InvalidArgumentError("malformed expert call (sizes)");
  }
  for (int32_t e : call.expert_ids) {
    if (e < 0 || e >= n_expert_) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert id ", e, " out of range [0, ", n_expert_, ")"));
    }
  }
  // Token chunks: the smallest max_tokens among the workers.
  int chunk = call.n_tokens > 0 ? call.n_tokens : 1;
  for (const auto& d : workers_) chunk = std::min(chunk, std::max(1, d.max_tokens));
  const int n_workers = static_cast<int>(clients_.size());
  if (n_workers == 1 && chunk >= call.n_tokens && !call.expert_ids.empty()) {
    // One worker owning every expert (the shards cover the model), one
    // chunk: the call goes as it is and its result is the answer, without
    // the sub-call copy, the zeroed sum and the add (three passes over
    // n_tokens x d floats; ~1% of a 512-token prefill).
    ASSIGN_OR_RETURN(uint64_t ticket, clients_[0]->Submit(call));
    RETURN_IF_ERROR(clients_[0]->Wait(ticket, result));
    result->call_id = call.call_id;
    return absl::OkStatus();
  }
  result->call_id = call.call_id;
  result->worker_ns = 0;
  result->partial.assign(call.hidden.size(), 0.0f);
  subs_.resize(n_workers);
  results_.resize(n_workers);
  for (int t0 = 0; t0 < call.n_tokens; t0 += chunk) {
    const int t1 = std::min(call.n_tokens, t0 + chunk);
    std::vector<int64_t> tickets(n_workers, -1);
    absl::Status first_error;
    uint64_t chunk_worker_ns = 0;  // the slowest worker of the chunk
    for (int w = 0; w < n_workers; ++w) {
      if (!BuildSubCall(call, w, t0, t1, &subs_[w])) continue;
      auto ticket = clients_[w]->Submit(subs_[w]);
      if (!ticket.ok()) {
        if (first_error.ok()) first_error = ticket.status();
        continue;
      }
      tickets[w] = static_cast<int64_t>(*ticket);
    }
    for (int w = 0; w < n_workers; ++w) {
      if (tickets[w] < 0) continue;
      absl::Status s = clients_[w]->Wait(static_cast<uint64_t>(tickets[w]), &results_[w]);
      if (!s.ok()) {
        if (first_error.ok()) first_error = s;
        continue;
      }
      if (!first_error.ok()) continue;
      chunk_worker_ns = std::max(chunk_worker_ns, results_[w].worker_ns);
      float* dst = result->partial.data() + static_cast<size_t>(t0) * call.d;
      const std::vector<float>& p = results_[w].partial;
      for (size_t i = 0; i < p.size(); ++i) dst[i] += p[i];
    }
    RETURN_IF_ERROR(first_error);
    result->worker_ns += chunk_worker_ns;
  }
  return absl::OkStatus();
}

}  // namespace moesplit::transport
