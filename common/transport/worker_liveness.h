// WorkerLiveness: the dense side's view of which expert-workers are alive,
// kept up to date without traffic. A thread per client asks it
// ExpertClient::Probe() every `interval` (off the call path: probes never
// touch the connection calls use), so a worker that dies, stalls or is
// replaced by one serving another model is noticed within about a second
// even while no request runs, and one that comes back is noticed as soon.
//
// Readiness is derived from it: a layer has no live owner when any worker
// owning some of its experts is down (the owner table gives each expert one
// worker, so such a layer cannot be computed).
//
// Thread-safe. The clients must outlive the WorkerLiveness.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/expert_transport.h"

namespace moesplit::transport {

struct WorkerState {
  std::string address;
  bool live = true;
  std::string error;  // the last failed probe's message ("" while live)
};

class WorkerLiveness {
 public:
  // Every worker starts live (it answered Describe at connection). Probing
  // starts at once.
  WorkerLiveness(std::vector<ExpertClient*> clients, std::chrono::milliseconds interval);
  ~WorkerLiveness();  // stops and joins the probe threads (each within one probe)

  std::vector<WorkerState> Snapshot() const;

 private:
  void ProbeLoop(size_t i);

  const std::vector<ExpertClient*> clients_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WorkerState> states_;  // guarded by mu_
  bool stop_ = false;                // guarded by mu_
  std::vector<std::thread> threads_;
};

// The layers in [0, n_layer) with an owner that is not live: `workers[i]`'s
// layer range is owned by the worker whose liveness is `live[i]`.
std::vector<int> LayersWithoutLiveOwner(const std::vector<WorkerDescription>& workers,
                                        const std::vector<bool>& live, int n_layer);

// "0-3,7,9-10" for sorted distinct layers ("" for none).
std::string FormatLayerRanges(const std::vector<int>& layers);

}  // namespace moesplit::transport
