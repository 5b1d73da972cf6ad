// WorkerLiveness: the dense side's view of which expert-workers are alive,
// kept up to date without traffic. A thread per client asks it
// ExpertClient::Probe() every `interval` (off the call path: probes never
// touch the connection calls use), so a worker that dies, stalls or is
// replaced by one serving another model is noticed within about a second
// even while no request runs, and one that comes back is noticed as soon.
//
// Readiness is derived from it: a layer has no live owner when some shard
// owning part of its experts has no live replica (the workers describing that
// shard are all down), so the layer cannot be computed. Each probe's outcome
// may also be passed on (RemoteExperts::ReportProbe: a replica that failed a
// call is chosen again once a probe sees it up).
//
// Thread-safe. The clients must outlive the WorkerLiveness.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
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
  // Told each probe's outcome: the client's index, whether it succeeded and
  // when it started. Called on the probe threads.
  using ProbeObserver =
      std::function<void(size_t i, bool ok, std::chrono::steady_clock::time_point started)>;
  // Every worker starts live (it answered Describe at connection). Probing
  // starts at once.
  WorkerLiveness(std::vector<ExpertClient*> clients, std::chrono::milliseconds interval,
                 ProbeObserver observer = nullptr);
  ~WorkerLiveness();  // stops and joins the probe threads (each within one probe)

  std::vector<WorkerState> Snapshot() const;

 private:
  void ProbeLoop(size_t i);

  const std::vector<ExpertClient*> clients_;
  const std::chrono::milliseconds interval_;
  const ProbeObserver observer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WorkerState> states_;  // guarded by mu_
  bool stop_ = false;                // guarded by mu_
  std::vector<std::thread> threads_;
};

// The layers in [0, n_layer) with a shard that has no live replica:
// `workers[i]` (its layers and expert ids; workers describing the same ones
// are replicas of one shard) is live when `live[i]`.
std::vector<int> LayersWithoutLiveOwner(const std::vector<WorkerDescription>& workers,
                                        const std::vector<bool>& live, int n_layer);

// "0-3,7,9-10" for sorted distinct layers ("" for none).
std::string FormatLayerRanges(const std::vector<int>& layers);

}  // namespace moesplit::transport
