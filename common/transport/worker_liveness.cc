#include "common/transport/worker_liveness.h"

#include <condition_variable>

#include "absl/strings/str_cat.h"

namespace moesplit::transport {

WorkerLiveness::WorkerLiveness(std::vector<ExpertClient*> clients,
                               std::chrono::milliseconds interval, ProbeObserver observer)
    : clients_(std::move(clients)), interval_(interval), observer_(std::move(observer)) {
  for (ExpertClient* c : clients_) states_.push_back({c->address(), true, ""});
  for (size_t i = 0; i < clients_.size(); ++i) threads_.emplace_back([this, i] { ProbeLoop(i); });
}

WorkerLiveness::~WorkerLiveness() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::vector<WorkerState> WorkerLiveness::Snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  return states_;
}

void WorkerLiveness::ProbeLoop(size_t i) {
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_for(l, interval_, [&] { return stop_; })) return;
    }
    const auto started = std::chrono::steady_clock::now();
    const absl::Status s = clients_[i]->Probe();
    if (observer_) observer_(i, s.ok(), started);
    std::lock_guard<std::mutex> l(mu_);
    states_[i].live = s.ok();
    states_[i].error = s.ok() ? "" : std::string(s.message());
  }
}

std::vector<int> LayersWithoutLiveOwner(const std::vector<WorkerDescription>& workers,
                                        const std::vector<bool>& live, int n_layer) {
  std::vector<bool> missing(n_layer > 0 ? n_layer : 0, false);
  auto same_shard = [&](size_t a, size_t b) {
    return workers[a].layer_begin == workers[b].layer_begin &&
           workers[a].layer_end == workers[b].layer_end &&
           workers[a].expert_begin == workers[b].expert_begin &&
           workers[a].expert_end == workers[b].expert_end;
  };
  for (size_t w = 0; w < workers.size() && w < live.size(); ++w) {
    if (live[w]) continue;
    bool replica_live = false;
    for (size_t o = 0; o < workers.size() && o < live.size(); ++o) {
      replica_live = replica_live || (live[o] && same_shard(o, w));
    }
    if (replica_live) continue;
    for (int l = std::max(0, workers[w].layer_begin); l < std::min(n_layer, workers[w].layer_end);
         ++l) {
      missing[l] = true;
    }
  }
  std::vector<int> out;
  for (int l = 0; l < n_layer; ++l) {
    if (missing[l]) out.push_back(l);
  }
  return out;
}

std::string FormatLayerRanges(const std::vector<int>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ",";
    absl::StrAppend(&out, layers[i]);
    if (j > i) absl::StrAppend(&out, "-", layers[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace moesplit::transport
