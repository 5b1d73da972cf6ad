// RemoteExperts: the dense service's ExpertBackend over one or more
// expert-workers.
//
// At construction it reads every worker's Describe, checks the model
// identity, and builds the owner table (layer, expert) -> worker; it refuses,
// naming them, a gap (an expert no worker owns) and an overlap (an expert two
// workers own). A call is split into one sub-call per owning worker
// (chunked to each worker's max_tokens), all submitted before waiting on any
// — the workers compute in parallel — and the partials are summed in worker
// order. A call that one worker owns wholly goes as it is, its result
// written straight into the caller's partial. Start() submits a one-chunk
// call and returns, Finish() collects it: the dense side computes its
// shared expert meanwhile (a call of several chunks runs whole in Start). A
// call that needs a worker that is down fails with UNAVAILABLE naming it;
// calls that need only other workers go on.
//
// Results are bit-identical to a single worker when each layer is owned by
// one worker (sharding by layers); sharding one layer's experts over several
// workers reassociates the per-token sum (differences of float rounding).
//
// Thread-compatible: one call at a time (the forward pass is serial per
// step); Submit/Wait pairs must not interleave across threads.
#pragma once

#include <chrono>
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
  const std::vector<WorkerDescription>& workers() const { return workers_; }
  int n_layer() const { return n_layer_; }

 private:
  RemoteExperts() = default;
  // Sub-call of `call` for worker w holding tokens [t0, t1): only entries it owns.
  bool BuildSubCall(const model::ExpertCallView& call, int w, int t0, int t1,
                    model::ExpertCall* sub) const;
  absl::Status Check(const model::ExpertCallView& call) const;
  // Submits tokens [t0, t1) of `call` to every worker that owns some of its
  // entries (the call as it is when `whole`); the tickets go to tickets_.
  absl::Status SubmitChunk(const model::ExpertCallView& call, int t0, int t1, bool whole);
  // Collects the chunk's results into partial (tokens [t0, t1); `whole`: the
  // one worker's straight in) and its slowest worker's time.
  absl::Status CollectChunk(const model::ExpertCallView& call, int t0, int t1, bool whole,
                            float* partial, uint64_t* chunk_worker_ns);
  int ChunkTokens(const model::ExpertCallView& call) const;

  std::vector<std::unique_ptr<ExpertClient>> clients_;
  std::vector<WorkerDescription> workers_;
  int n_layer_ = 0;
  int n_expert_ = 0;
  std::vector<int> owner_;  // [layer * n_expert + expert] -> worker index
  // Scratch reused across calls.
  std::vector<model::ExpertCall> subs_;
  std::vector<std::vector<float>> results_;
  std::vector<int64_t> tickets_;  // per worker, -1: nothing submitted
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
