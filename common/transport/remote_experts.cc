#include "common/transport/remote_experts.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"

namespace moesplit::transport {

std::string DescribeRange(int layer_begin, int layer_end, int expert_begin, int expert_end) {
  auto range = [](int b, int e) {
    return e - b == 1 ? absl::StrCat(b) : absl::StrCat(b, "-", e - 1);
  };
  return absl::StrCat("experts ", range(expert_begin, expert_end), " of layer",
                      layer_end - layer_begin == 1 ? " " : "s ", range(layer_begin, layer_end));
}

namespace {

int64_t NowNs(std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now()) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string ShardText(const WorkerDescription& d) {
  return DescribeRange(d.layer_begin, d.layer_end, d.expert_begin, d.expert_end);
}

std::string ShardText(const ShardReplicas& s) {
  return DescribeRange(s.layer_begin, s.layer_end, s.expert_begin, s.expert_end);
}

// Clients named replicas of one shard (the same non-negative named_shards
// entry) must serve one shard (shard_of).
absl::Status CheckNamedShards(const std::vector<std::unique_ptr<ExpertClient>>& clients,
                              const std::vector<WorkerDescription>& workers,
                              const std::vector<int>& shard_of,
                              const std::vector<int>& named_shards) {
  for (size_t a = 0; a < named_shards.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      if (named_shards[a] < 0 || named_shards[a] != named_shards[b] ||
          shard_of[a] == shard_of[b]) {
        continue;
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "expert workers ", clients[b]->address(), " and ", clients[a]->address(),
          " are named replicas of one shard but serve ", ShardText(workers[b]), " and ",
          ShardText(workers[a])));
    }
  }
  return absl::OkStatus();
}

// Every client's Describe. A named replica (named_shards[w] >= 0) that is not
// up (UNAVAILABLE) while another replica of its name is gets that one's
// description and is marked in *absent; any other failure is returned.
absl::StatusOr<std::vector<WorkerDescription>> DescribeAll(
    const std::vector<std::unique_ptr<ExpertClient>>& clients,
    const std::vector<int>& named_shards, std::vector<bool>* absent) {
  std::vector<WorkerDescription> out(clients.size());
  std::vector<absl::Status> failed(clients.size());
  absent->assign(clients.size(), false);
  for (size_t w = 0; w < clients.size(); ++w) {
    absl::StatusOr<WorkerDescription> d = clients[w]->Describe();
    if (d.ok()) {
      out[w] = std::move(*d);
    } else if (d.status().code() == absl::StatusCode::kUnavailable && !named_shards.empty() &&
               named_shards[w] >= 0) {
      failed[w] = d.status();
      (*absent)[w] = true;
    } else {
      return d.status();
    }
  }
  for (size_t w = 0; w < clients.size(); ++w) {
    if (!(*absent)[w]) continue;
    size_t o = 0;
    while (o < clients.size() && ((*absent)[o] || named_shards[o] != named_shards[w])) ++o;
    if (o == clients.size()) return failed[w];  // no replica of its shard is up
    out[w] = out[o];
  }
  return out;
}

}  // namespace

bool IsReplicaFailure(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<std::unique_ptr<RemoteExperts>> RemoteExperts::Connect(
    std::vector<std::unique_ptr<ExpertClient>> clients, int n_layer, int n_expert,
    const std::vector<int>& named_shards) {
  if (clients.empty()) return absl::InvalidArgumentError("no expert workers given");
  if (!named_shards.empty() && named_shards.size() != clients.size()) {
    return absl::InvalidArgumentError(absl::StrCat(named_shards.size(), " shard names for ",
                                                   clients.size(), " expert workers"));
  }
  std::unique_ptr<RemoteExperts> r(new RemoteExperts());
  r->n_layer_ = n_layer;
  r->n_expert_ = n_expert;
  r->owner_.assign(static_cast<size_t>(n_layer) * n_expert, -1);
  std::vector<bool> absent;
  ASSIGN_OR_RETURN(std::vector<WorkerDescription> described,
                   DescribeAll(clients, named_shards, &absent));
  for (size_t w = 0; w < clients.size(); ++w) {
    WorkerDescription d = std::move(described[w]);
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
          ShardText(d)));
    }
    // The same layers and expert ids as a shard seen before: a replica of it.
    int shard = -1;
    for (size_t s = 0; s < r->shards_.size(); ++s) {
      const ShardReplicas& o = r->shards_[s];
      if (o.layer_begin == d.layer_begin && o.layer_end == d.layer_end &&
          o.expert_begin == d.expert_begin && o.expert_end == d.expert_end) {
        shard = static_cast<int>(s);
      }
    }
    if (shard < 0) {
      shard = static_cast<int>(r->shards_.size());
      for (int l = d.layer_begin; l < d.layer_end; ++l) {
        for (int e = d.expert_begin; e < d.expert_end; ++e) {
          int& o = r->owner_[static_cast<size_t>(l) * n_expert + e];
          if (o >= 0) {
            const int other = r->shards_[o].replicas.front();
            return absl::FailedPreconditionError(absl::StrCat(
                "expert shards overlap: expert ", e, " of layer ", l, " is owned by both ",
                clients[other]->address(), " (", ShardText(r->workers_[other]), ") and ",
                clients[w]->address(), " (", ShardText(d), ")"));
          }
          o = shard;
        }
      }
      r->shards_.push_back({d.layer_begin, d.layer_end, d.expert_begin, d.expert_end, {}});
    }
    r->shards_[shard].replicas.push_back(static_cast<int>(w));
    r->shard_of_.push_back(shard);
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
  RETURN_IF_ERROR(CheckNamedShards(clients, r->workers_, r->shard_of_, named_shards));
  r->replica_state_ = std::make_unique<ReplicaState[]>(clients.size());
  for (size_t w = 0; w < clients.size(); ++w) {
    if (absent[w]) r->MarkFailed(static_cast<int>(w));  // until a probe sees it up
  }
  r->next_replica_.assign(r->shards_.size(), 0);
  r->clients_ = std::move(clients);
  return r;
}

void RemoteExperts::ReportProbe(size_t i, bool ok, std::chrono::steady_clock::time_point started) {
  if (i >= clients_.size() || !ok) return;
  replica_state_[i].probe_ok_at_ns.store(NowNs(started), std::memory_order_relaxed);
}

std::vector<ReplicaStats> RemoteExperts::ReplicaStatsSnapshot() const {
  std::vector<ReplicaStats> out;
  for (size_t i = 0; i < clients_.size(); ++i) {
    const ReplicaState& st = replica_state_[i];
    ReplicaStats r;
    r.address = clients_[i]->address();
    r.shard_index = shard_of_[i];
    r.shard = ShardText(shards_[shard_of_[i]]);
    r.calls = st.calls.load(std::memory_order_relaxed);
    r.failovers = st.failovers.load(std::memory_order_relaxed);
    r.seconds = st.nanoseconds.load(std::memory_order_relaxed) * 1e-9;
    r.eligible = st.Eligible();
    out.push_back(std::move(r));
  }
  return out;
}

void RemoteExperts::MarkFailed(int client) {
  replica_state_[client].failed_at_ns.store(NowNs(), std::memory_order_relaxed);
}

void RemoteExperts::MarkAnswered(int client, std::chrono::steady_clock::time_point submitted) {
  ReplicaState& st = replica_state_[client];
  st.failed_at_ns.store(0, std::memory_order_relaxed);
  st.calls.fetch_add(1, std::memory_order_relaxed);
  st.nanoseconds.fetch_add(NowNs() - NowNs(submitted), std::memory_order_relaxed);
}

bool RemoteExperts::BuildSubCall(const model::ExpertCallView& call, int s, int t0, int t1,
                                 model::ExpertCall* sub) const {
  const int d = call.d;
  sub->call_id = call.call_id;
  sub->layer = call.layer;
  sub->n_tokens = t1 - t0;
  sub->d = d;
  sub->hidden.assign(call.hidden.begin() + static_cast<size_t>(t0) * d,
                     call.hidden.begin() + static_cast<size_t>(t1) * d);
  const int* owner = owner_.data() + static_cast<size_t>(call.layer) * n_expert_;
  return model::FilterRouting(call, t0, t1, [&](int e) { return owner[e] == s; },
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

model::ExpertCallView RemoteExperts::SubCall(const model::ExpertCallView& call, int s,
                                             bool whole) const {
  if (whole) return call;
  return subs_[s];
}

absl::Status RemoteExperts::SubmitToReplica(int s, const model::ExpertCallView& sub,
                                            std::vector<bool>& tried, int* client,
                                            uint64_t* ticket) {
  const std::vector<int>& replicas = shards_[s].replicas;
  const size_t n = replicas.size();
  const size_t first = next_replica_[s]++ % n;
  std::vector<std::string> errors;
  absl::Status only_error;
  // Pass 0: replicas that have not failed since a probe saw them up; pass 1:
  // the others (all of them may be back).
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (first + k) % n;
      const int c = replicas[i];
      if (tried[i] || (pass == 0 && !replica_state_[c].Eligible())) continue;
      tried[i] = true;
      absl::StatusOr<uint64_t> t = clients_[c]->Submit(sub);
      if (t.ok()) {
        *client = c;
        *ticket = *t;
        return absl::OkStatus();
      }
      if (!IsReplicaFailure(t.status())) return t.status();
      MarkFailed(c);
      replica_state_[c].failovers.fetch_add(1, std::memory_order_relaxed);
      errors.emplace_back(t.status().message());
      only_error = t.status();
    }
  }
  if (errors.size() == 1) return only_error;
  return absl::UnavailableError(
      absl::StrCat("no replica of ", ShardText(shards_[s]), " answered",
                   errors.empty() ? "" : ": ", absl::StrJoin(errors, "; ")));
}

absl::Status RemoteExperts::Failover(int s, const model::ExpertCallView& sub,
                                     std::vector<bool>& tried, absl::Status first_error,
                                     float* out, size_t n, uint64_t* worker_ns) {
  std::vector<std::string> errors = {std::string(first_error.message())};
  for (;;) {
    int c = -1;
    uint64_t ticket = 0;
    const absl::Status submitted = SubmitToReplica(s, sub, tried, &c, &ticket);
    if (!submitted.ok()) {
      if (shards_[s].replicas.size() == 1) return first_error;
      if (IsReplicaFailure(submitted)) errors.emplace_back(submitted.message());
      return absl::UnavailableError(absl::StrCat("no replica of ", ShardText(shards_[s]),
                                                 " answered: ", absl::StrJoin(errors, "; ")));
    }
    const auto at = std::chrono::steady_clock::now();
    const absl::Status w = clients_[c]->Wait(ticket, out, n, worker_ns);
    if (w.ok()) {
      MarkAnswered(c, at);
      return absl::OkStatus();
    }
    if (!IsReplicaFailure(w)) return w;
    MarkFailed(c);
    replica_state_[c].failovers.fetch_add(1, std::memory_order_relaxed);
    errors.emplace_back(w.message());
  }
}

absl::Status RemoteExperts::SubmitChunk(const model::ExpertCallView& call, int t0, int t1,
                                        bool whole) {
  const int n_shards = static_cast<int>(shards_.size());
  sent_.resize(n_shards);
  subs_.resize(n_shards);
  for (int s = 0; s < n_shards; ++s) {
    Sent& st = sent_[s];
    st.client = -1;
    st.error = absl::OkStatus();
    st.tried.assign(shards_[s].replicas.size(), false);
    if (whole && s > 0) continue;
    if (!whole && !BuildSubCall(call, s, t0, t1, &subs_[s])) continue;
    st.at = std::chrono::steady_clock::now();
    st.error = SubmitToReplica(s, SubCall(call, s, whole), st.tried, &st.client, &st.ticket);
  }
  for (const Sent& st : sent_) {
    if (!st.error.ok()) return st.error;
  }
  return absl::OkStatus();
}

absl::Status RemoteExperts::CollectChunk(const model::ExpertCallView& call, int t0, int t1,
                                         bool whole, float* partial,
                                         uint64_t* chunk_worker_ns) {
  const int n_shards = static_cast<int>(shards_.size());
  const size_t n = static_cast<size_t>(t1 - t0) * call.d;
  float* dst = partial + static_cast<size_t>(t0) * call.d;
  results_.resize(n_shards);
  absl::Status first_error;
  *chunk_worker_ns = 0;  // the slowest worker of the chunk
  if (!whole) std::fill(dst, dst + n, 0.0f);
  for (int s = 0; s < n_shards; ++s) {
    Sent& st = sent_[s];
    if (st.client < 0) continue;
    float* out = dst;
    if (!whole) {
      results_[s].resize(n);
      out = results_[s].data();
    }
    uint64_t worker_ns = 0;
    absl::Status w = clients_[st.client]->Wait(st.ticket, out, n, &worker_ns);
    if (w.ok()) {
      MarkAnswered(st.client, st.at);
    } else if (IsReplicaFailure(w) && first_error.ok()) {
      // Re-sent at once: the other shards' results wait in their own
      // connections meanwhile.
      MarkFailed(st.client);
      replica_state_[st.client].failovers.fetch_add(1, std::memory_order_relaxed);
      w = Failover(s, SubCall(call, s, whole), st.tried, std::move(w), out, n, &worker_ns);
    }
    if (!w.ok()) {
      if (first_error.ok()) first_error = w;
      continue;
    }
    if (!first_error.ok()) continue;
    *chunk_worker_ns = std::max(*chunk_worker_ns, worker_ns);
    if (!whole) {
      const float* p = results_[s].data();
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
    // One chunk: submitted now, collected in Finish. One shard owning every
    // expert (the shards cover the model) takes the call as it is and
    // answers into the caller's partial: no sub-call copy, zeroed sum or add
    // (three passes over n_tokens x d floats; ~1% of a 512-token prefill).
    pending_.whole = shards_.size() == 1 && !call.expert_ids.empty();
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
