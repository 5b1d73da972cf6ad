// Readiness: whether the dense service should receive traffic, apart from
// liveness (the process is up and answering). Ready means: not draining
// (SIGTERM received) and every layer that has routed experts has a live
// owning worker: every shard has a live replica (transport::WorkerLiveness,
// probed about every second, so a shard's last replica dying turns
// readiness off without traffic and its return turns it back on; a replica
// down while another serves its shard does not). With in-process experts
// only draining matters.
//
// Readiness is what GET /health and /health/ready, the gRPC health
// services "" and "moesplit.v1.Inference" and the moesplit_ready gauge
// report; GET /health/live and the gRPC service "liveness" stay up while
// the process runs, draining included.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/remote_experts.h"
#include "common/transport/worker_liveness.h"

namespace moesplit::dense {

struct ReadinessReport {
  bool ready = true;
  bool draining = false;
  std::vector<transport::WorkerState> down_workers;  // replicas of live shards too
  std::vector<int> layers_without_worker;
  // One line: "ready", or why not ("draining", "no live worker for layers
  // 0-1: shm://w0 (stopped...)").
  std::string Summary() const;
  // The HTTP readiness body: {"status":"ok"} or {"status":"unavailable",
  // "draining":..., "missing_workers":[{"address","error"}],
  // "layers_without_worker":"0-1", "message":Summary()}.
  std::string Json() const;
};

class Readiness {
 public:
  // `remote` (may be null: experts in-process) must outlive this; its
  // workers are probed every `probe_interval` from now on, and each probe's
  // outcome goes to remote->ReportProbe (replica choice).
  explicit Readiness(transport::RemoteExperts* remote,
                     std::chrono::milliseconds probe_interval = std::chrono::milliseconds(1000));

  void BeginDrain() { draining_ = true; }
  bool draining() const { return draining_.load(); }
  ReadinessReport Check() const;

 private:
  transport::RemoteExperts* const remote_;
  std::unique_ptr<transport::WorkerLiveness> liveness_;
  std::atomic<bool> draining_{false};
};

}  // namespace moesplit::dense
