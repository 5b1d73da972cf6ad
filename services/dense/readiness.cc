#include "services/dense/readiness.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace moesplit::dense {

std::string ReadinessReport::Summary() const {
  if (ready) return "ready";
  std::string s;
  if (draining) s = "draining (shutting down)";
  if (!layers_without_worker.empty()) {
    if (!s.empty()) s += "; ";
    absl::StrAppend(&s, "no live expert worker for layers ",
                    transport::FormatLayerRanges(layers_without_worker), ":");
    for (size_t i = 0; i < down_workers.size(); ++i) {
      absl::StrAppend(&s, i ? ", " : " ", down_workers[i].address, " (", down_workers[i].error,
                      ")");
    }
  }
  return s;
}

std::string ReadinessReport::Json() const {
  using Json = nlohmann::ordered_json;
  if (ready) return "{\"status\":\"ok\"}";
  Json missing = Json::array();
  for (const transport::WorkerState& w : down_workers) {
    missing.push_back({{"address", w.address}, {"error", w.error}});
  }
  Json j = {{"status", "unavailable"},
            {"draining", draining},
            {"missing_workers", std::move(missing)},
            {"layers_without_worker", transport::FormatLayerRanges(layers_without_worker)},
            {"message", Summary()}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Readiness::Readiness(transport::RemoteExperts* remote,
                     std::chrono::milliseconds probe_interval)
    : remote_(remote) {
  if (remote_ == nullptr) return;
  std::vector<transport::ExpertClient*> clients;
  for (const auto& c : remote_->clients()) clients.push_back(c.get());
  liveness_ = std::make_unique<transport::WorkerLiveness>(
      std::move(clients), probe_interval,
      [remote](size_t i, bool ok, std::chrono::steady_clock::time_point started) {
        remote->ReportProbe(i, ok, started);
      });
}

ReadinessReport Readiness::Check() const {
  ReadinessReport r;
  r.draining = draining();
  if (liveness_ != nullptr) {
    const std::vector<transport::WorkerState> states = liveness_->Snapshot();
    std::vector<bool> live;
    for (const transport::WorkerState& s : states) {
      live.push_back(s.live);
      if (!s.live) r.down_workers.push_back(s);
    }
    r.layers_without_worker =
        transport::LayersWithoutLiveOwner(remote_->workers(), live, remote_->n_layer());
  }
  r.ready = !r.draining && r.layers_without_worker.empty();
  return r;
}

}  // namespace moesplit::dense
