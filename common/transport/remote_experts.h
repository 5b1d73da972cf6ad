// RemoteExperts: the dense service's ExpertBackend over one or more
// expert-workers.
//
// At construction it reads every worker's Describe, checks the model
// identity, and builds the owner table (layer, expert) -> worker; it refuses,
// naming them, a gap (an expert no worker owns) and an overlap (an expert two
// workers own). Compute() splits a call into one sub-call per owning worker
// (chunked to each worker's max_tokens), submits them all before waiting on
// any — the workers compute in parallel — and sums the partials in worker
// order. A call that needs a worker that is down fails with UNAVAILABLE
// naming it; calls that need only other workers go on.
//
// Results are bit-identical to a single worker when each layer is owned by
// one worker (sharding by layers); sharding one layer's experts over several
// workers reassociates the per-token sum (differences of float rounding).
//
// Thread-compatible: one Compute at a time (the forward pass is serial per
// step); Submit/Wait pairs must not interleave across threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/expert_transport.h"

namespace moesplit::transport {

class RemoteExperts final : public model::ExpertBackend {
 public:
  // Takes ownership of the clients. `identity` is the dense side's model
  // identity; n_layer/n_expert its shape.
  static absl::StatusOr<std::unique_ptr<RemoteExperts>> Connect(
      std::vector<std::unique_ptr<ExpertClient>> clients, int n_layer, int n_expert);

  absl::Status Compute(const model::ExpertCall& call, model::ExpertResult* result) override;

  // Called on Compute's thread after every call that succeeded, with the
  // call, its round trip (all workers, all chunks) and the workers' own time
  // (ExpertResult::worker_ns): the dense service's metrics. May be set or
  // replaced (nullptr: none) while calls run, from any thread.
  using RoundTripObserver = std::function<void(const model::ExpertCall& call,
                                               double round_trip_seconds, uint64_t worker_ns)>;
  void SetRoundTripObserver(RoundTripObserver observer);

  const std::vector<std::unique_ptr<ExpertClient>>& clients() const { return clients_; }
  const std::vector<WorkerDescription>& workers() const { return workers_; }
  int n_layer() const { return n_layer_; }

 private:
  RemoteExperts() = default;
  // Sub-call of `call` for worker w holding tokens [t0, t1): only entries it owns.
  bool BuildSubCall(const model::ExpertCall& call, int w, int t0, int t1,
                    model::ExpertCall* sub) const;
  absl::Status ComputeCalls(const model::ExpertCall& call, model::ExpertResult* result);

  std::vector<std::unique_ptr<ExpertClient>> clients_;
  std::vector<WorkerDescription> workers_;
  int n_layer_ = 0;
  int n_expert_ = 0;
  std::vector<int> owner_;  // [layer * n_expert + expert] -> worker index
  // Scratch reused across calls.
  std::vector<model::ExpertCall> subs_;
  std::vector<model::ExpertResult> results_;
  absl::Mutex observer_mu_;
  RoundTripObserver observer_ ABSL_GUARDED_BY(observer_mu_);
};

// Human-readable expert ranges: "experts 3-7 of layers 0-1".
std::string DescribeRange(int layer_begin, int layer_end, int expert_begin, int expert_end);

}  // namespace moesplit::transport
