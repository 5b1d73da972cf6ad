// RemoteExperts: the dense service's ExpertBackend over one or more
// expert-workers.
//
// At construction it reads every worker's Describe, checks the model
// identity, and groups the workers into shards: workers describing the same
// layers and expert ids are replicas of one shard (any host). It builds the
// owner table (layer, expert) -> shard and refuses, naming them, a gap (an
// expert no worker owns) and a partial overlap (an expert two different
// shards own); workers named as replicas of one shard (Connect's
// `named_shards`) that describe different shards are refused too. A call is
// split into one sub-call per owning shard (chunked to the workers'
// max_tokens), all submitted before waiting on any -- the shards compute in
// parallel -- and the partials are summed in shard order. A call that one
// shard owns wholly goes as it is, its result written straight into the
// caller's partial. Start() submits a one-chunk call and returns, Finish()
// collects it: the dense side computes its shared expert meanwhile (a call of
// several chunks runs whole in Start).
//
// Replicas: each sub-call goes to the next replica of its shard in turn
// (round robin) among those that have not failed since a probe last saw
// them up (ReportProbe, fed by WorkerLiveness); when every replica of a shard
// has failed, all are tried. When a replica fails a sub-call (it died, closed
// the connection, or did not answer within the client's timeout: the
// transport errors of IsReplicaFailure), the same sub-call is re-sent to the
// shard's other replicas one after the other (an expert call has no side
// effects) and the first answer is used: the request goes on with the bits
// it would have had. Only when no replica of a shard answers does the call
// fail, with the replicas' errors (UNAVAILABLE naming them); calls that need
// only other shards go on. A replica that answers probes but never calls
// (deadlocked) costs one client timeout per probe that clears it.
//
// Results are bit-identical to a single worker when each layer is owned by
// one shard (sharding by layers), whichever replica answers; sharding one
// layer's experts over several shards reassociates the per-token sum
// (differences of float rounding).
//
// Thread-compatible: one call at a time (the forward pass is serial per
// step); Submit/Wait pairs must not interleave across threads. ReportProbe,
// ReplicaStatsSnapshot and SetRoundTripObserver are thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/expert_transport.h"

namespace moesplit::transport {

// Whether `status` from a replica is the transport's or the worker's
// availability (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, CANCELLED,
// RESOURCE_EXHAUSTED: no free connection slot, FAILED_PRECONDITION: it serves
// another model) rather than the call's own fault: such a sub-call is re-sent
// to another replica. INVALID_ARGUMENT and INTERNAL are not: every replica
// would say the same.
bool IsReplicaFailure(const absl::Status& status);

// One worker connection as a replica of a shard, for metrics.
struct ReplicaStats {
  std::string address;
  std::string shard;        // DescribeRange of the shard it serves
  int shard_index = 0;      // index into RemoteExperts::shards()
  uint64_t calls = 0;       // sub-calls it answered
  uint64_t failovers = 0;   // sub-calls it failed that were re-sent elsewhere
  double seconds = 0;       // sum over answered sub-calls, submit to result
  bool eligible = true;     // not failed since a probe last saw it up
};

// A shard: the layers and expert ids it owns and the workers (indices into
// clients()) that serve it.
struct ShardReplicas {
  int layer_begin = 0, layer_end = 0, expert_begin = 0, expert_end = 0;
  std::vector<int> replicas;
};

class RemoteExperts final : public model::ExpertBackend {
 public:
  // Takes ownership of the clients. n_layer/n_expert are the model's shape.
  // `named_shards` (empty, or one entry per client): clients with the same
  // non-negative number were named replicas of one shard (--experts A|B) and
  // must describe the same shard (FailedPrecondition naming both if not);
  // workers that describe the same shard are its replicas either way. A
  // named replica that is not up (UNAVAILABLE) while another of its name is
  // joins as that shard's replica, failed until a probe sees it up (a dense
  // service restarting during a worker's rolling update starts at once).
  static absl::StatusOr<std::unique_ptr<RemoteExperts>> Connect(
      std::vector<std::unique_ptr<ExpertClient>> clients, int n_layer, int n_expert,
      const std::vector<int>& named_shards = {});

  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override;
  absl::Status Start(const model::ExpertCallView& call, float* partial,
                     uint64_t* worker_ns) override;
  absl::Status Finish() override;

  // Called on Finish's thread after every call that succeeded, with the
  // call, its round trip (all workers, all chunks: from Start to the end of
  // Finish) and the workers' own time (ExpertResult::worker_ns): the dense
  // service's metrics. May be set or replaced (nullptr: none) while calls
  // run, from any thread.
  using RoundTripObserver = std::function<void(const model::ExpertCallView& call,
                                               double round_trip_seconds, uint64_t worker_ns)>;
  void SetRoundTripObserver(RoundTripObserver observer);

  const std::vector<std::unique_ptr<ExpertClient>>& clients() const { return clients_; }
  // Per client, in clients() order.
  const std::vector<WorkerDescription>& workers() const { return workers_; }
  const std::vector<ShardReplicas>& shards() const { return shards_; }
  int n_layer() const { return n_layer_; }

  // A probe of client `i` that started at `started` succeeded (`ok`) or not:
  // a replica that failed a call before `started` is chosen again after a
  // successful one. Thread-safe (WorkerLiveness' probe threads).
  void ReportProbe(size_t i, bool ok, std::chrono::steady_clock::time_point started);
  // Per client, in clients() order. Thread-safe.
  std::vector<ReplicaStats> ReplicaStatsSnapshot() const;

 private:
  RemoteExperts() = default;
  // Sub-call of `call` for shard s holding tokens [t0, t1): only entries it owns.
  bool BuildSubCall(const model::ExpertCallView& call, int s, int t0, int t1,
                    model::ExpertCall* sub) const;
  absl::Status Check(const model::ExpertCallView& call) const;
  // Submits tokens [t0, t1) of `call` to a replica of every shard that owns
  // some of its entries (the call as it is when `whole`); the tickets go to
  // sent_.
  absl::Status SubmitChunk(const model::ExpertCallView& call, int t0, int t1, bool whole);
  // Collects the chunk's results into partial (tokens [t0, t1); `whole`: the
  // one shard's straight in) and its slowest worker's time, re-sending a
  // sub-call whose replica failed to the shard's other replicas.
  absl::Status CollectChunk(const model::ExpertCallView& call, int t0, int t1, bool whole,
                            float* partial, uint64_t* chunk_worker_ns);
  int ChunkTokens(const model::ExpertCallView& call) const;
  // The sub-call for shard s (the call as it is when `whole`).
  model::ExpertCallView SubCall(const model::ExpertCallView& call, int s, bool whole) const;
  // Submits shard s's sub-call to its next replica not in `tried` (eligible
  // ones first), marking replicas that refuse it; the client index and
  // ticket, or the errors of every replica tried.
  absl::Status SubmitToReplica(int s, const model::ExpertCallView& sub, std::vector<bool>& tried,
                               int* client, uint64_t* ticket);
  // Submits and waits on the shard's remaining replicas one after the other.
  absl::Status Failover(int s, const model::ExpertCallView& sub, std::vector<bool>& tried,
                        absl::Status first_error, float* out, size_t n, uint64_t* worker_ns);
  void MarkFailed(int client);
  void MarkAnswered(int client, std::chrono::steady_clock::time_point submitted);

  std::vector<std::unique_ptr<ExpertClient>> clients_;
  std::vector<WorkerDescription> workers_;
  std::vector<ShardReplicas> shards_;
  std::vector<int> shard_of_;  // per client
  int n_layer_ = 0;
  int n_expert_ = 0;
  std::vector<int> owner_;  // [layer * n_expert + expert] -> shard index
  // Per client, read by metrics and probes from other threads.
  struct ReplicaState {
    std::atomic<uint64_t> calls{0}, failovers{0}, nanoseconds{0};
    std::atomic<int64_t> failed_at_ns{0};    // steady clock; 0: no failure since
    std::atomic<int64_t> probe_ok_at_ns{0};  // start of the last successful probe
    bool Eligible() const {
      const int64_t f = failed_at_ns.load(std::memory_order_relaxed);
      return f == 0 || probe_ok_at_ns.load(std::memory_order_relaxed) > f;
    }
  };
  std::unique_ptr<ReplicaState[]> replica_state_;
  std::vector<uint32_t> next_replica_;  // per shard: round robin
  // Scratch reused across calls.
  std::vector<model::ExpertCall> subs_;
  std::vector<std::vector<float>> results_;
  struct Sent {
    int client = -1;  // -1: nothing submitted
    uint64_t ticket = 0;
    std::chrono::steady_clock::time_point at;
    absl::Status error;  // when no replica took the sub-call
    std::vector<bool> tried;  // per replica of the shard
  };
  std::vector<Sent> sent_;  // per shard
  // The call between Start and Finish.
  struct Pending {
    bool active = false;
    bool submitted = false;  // one chunk, submitted in Start; collected in Finish
    bool whole = false;      // ... as it is, to the one worker
    absl::Status status;    // a call run whole in Start (several chunks)
    model::ExpertCallView call;
    float* partial = nullptr;
    uint64_t* worker_ns = nullptr;
    uint64_t chunk_worker_ns = 0;
    std::chrono::steady_clock::time_point start;
  };
  Pending pending_;
  absl::Mutex observer_mu_;
  RoundTripObserver observer_ ABSL_GUARDED_BY(observer_mu_);
};

// Human-readable expert ranges: "experts 3-7 of layers 0-1".
std::string DescribeRange(int layer_begin, int layer_end, int expert_begin, int expert_end);

}  // namespace moesplit::transport
