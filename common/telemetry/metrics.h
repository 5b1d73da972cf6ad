// Prometheus metrics of moesplit's services (prometheus-cpp).
//
// Names carry the `moesplit_` prefix and base units (seconds, bytes).
// MetricsServer serves /metrics on HOST:PORT (port 0 picks one). The metric
// sets below register themselves on a registry; they are thread-safe (the
// counters are atomics, the activation heat map an array of atomics that is
// turned into series only at scrape time).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/transport/expert_transport.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace moesplit::telemetry {

class MetricsServer {
 public:
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host_port);
  ~MetricsServer();

  prometheus::Registry& registry() { return *registry_; }
  void Register(const std::weak_ptr<prometheus::Collectable>& c) {
    exposer_->RegisterCollectable(c);
  }
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_ = 0;
};

// Per-(layer, expert) activation counts, exported as
// moesplit_expert_activations_total{layer,expert} (series with a count > 0).
class ActivationHeatMap final : public prometheus::Collectable {
 public:
  ActivationHeatMap(int n_layer, int n_expert);
  void Record(int layer, int expert);
  uint64_t count(int layer, int expert) const;
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const int n_layer_, n_expert_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
};

// An expert-worker's RAM tier (a shard larger than its --expert-ram) as
// read at scrape time. Read-latency buckets are non-cumulative, +Inf last.
struct ExpertTierSnapshot {
  int slots = 0;
  int resident = 0;
  uint64_t hits = 0, misses = 0, bytes_read = 0, read_errors = 0, reads = 0;
  uint64_t prefetches = 0, prefetch_used = 0, prefetch_unused = 0;
  double read_seconds = 0;
  std::vector<double> read_bounds;
  std::vector<uint64_t> read_buckets;  // read_bounds.size() + 1
};

// Exports `read()`'s snapshot on each scrape:
//   moesplit_worker_tier_slots, moesplit_worker_tier_resident_experts (gauges),
//   moesplit_worker_tier_hits_total, moesplit_worker_tier_misses_total
//   (expert uses served from RAM / needing a read),
//   moesplit_worker_tier_read_bytes_total, moesplit_worker_tier_read_errors_total,
//   moesplit_worker_tier_read_duration_seconds (histogram, one expert's read),
//   moesplit_worker_tier_prefetches_total, moesplit_worker_tier_prefetch_used_total,
//   moesplit_worker_tier_prefetch_unused_total (experts read on the dense
//   side's hints; of them, used by a call / evicted unused: the accuracy).
class ExpertTierMetrics final : public prometheus::Collectable {
 public:
  explicit ExpertTierMetrics(std::function<ExpertTierSnapshot()> read) : read_(std::move(read)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::function<ExpertTierSnapshot()> read_;
};

// The expert-worker's metrics; a CallObserver of its servers.
class WorkerMetrics final : public transport::CallObserver {
 public:
  WorkerMetrics(prometheus::Registry& registry, int n_layer, int n_expert);

  void OnCall(const char* transport, const model::ExpertCallView& call, uint64_t bytes_in,
              uint64_t bytes_out, double seconds, const absl::Status& status) override;
  void SetResidentBytes(int node, uint64_t bytes);
  void SetThreads(int threads);
  std::shared_ptr<ActivationHeatMap> heat_map() const { return heat_map_; }

 private:
  prometheus::Registry& registry_;
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Counter>& bytes_received_;
  prometheus::Family<prometheus::Counter>& bytes_sent_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Histogram& tokens_;
  prometheus::Family<prometheus::Gauge>& resident_;
  prometheus::Gauge& threads_;
  std::shared_ptr<ActivationHeatMap> heat_map_;
};

// The dense service's view of its expert-workers.
class DenseExpertMetrics {
 public:
  explicit DenseExpertMetrics(prometheus::Registry& registry);
  // Called after each step with the clients' cumulative counters.
  void Update(const std::vector<std::unique_ptr<transport::ExpertClient>>& clients);
  // One MoE layer's routed experts (RemoteExperts' call observer): its
  // tokens, round trip and the workers' own time (0: not reported).
  void ObserveCall(const model::ExpertCallView& call, double round_trip_seconds, uint64_t worker_ns);

 private:
  prometheus::Family<prometheus::Gauge>& up_;
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Counter>& failures_;
  prometheus::Family<prometheus::Counter>& sent_;
  prometheus::Family<prometheus::Counter>& received_;
  prometheus::Histogram& round_trip_;
  prometheus::Histogram& worker_time_;
  prometheus::Histogram& tokens_;
  std::vector<transport::TransportCounters> last_;  // per client, for deltas
};

// moesplit_build_info{service,version,revision,build_type,cuda} = 1: what
// runs (common/base/build_info.h), for dashboards and fleet queries.
void ExportBuildInfo(prometheus::Registry& registry, const std::string& service);

// Histogram buckets shared by both services.
prometheus::Histogram::BucketBoundaries LatencyBuckets();
prometheus::Histogram::BucketBoundaries TokenBuckets();

}  // namespace moesplit::telemetry
