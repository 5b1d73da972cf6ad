#include "common/telemetry/metrics.h"

#include "absl/strings/str_cat.h"
#include "common/base/build_info.h"

namespace moesplit::telemetry {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
          2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5};
}

prometheus::Histogram::BucketBoundaries TokenBuckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
}

void ExportBuildInfo(prometheus::Registry& registry, const std::string& service) {
  const BuildInfo& b = GetBuildInfo();
  prometheus::BuildGauge()
      .Name("moesplit_build_info")
      .Help("Always 1; the labels say which build of which service runs")
      .Register(registry)
      .Add({{"service", service},
            {"version", b.version},
            {"revision", b.revision},
            {"build_type", b.build_type},
            {"cuda", b.cuda ? "true" : "false"}})
      .Set(1);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host_port) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  try {
    s->exposer_ = std::make_unique<prometheus::Exposer>(host_port);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", host_port, ": ", e.what()));
  }
  s->registry_ = std::make_shared<prometheus::Registry>();
  s->exposer_->RegisterCollectable(s->registry_);
  const auto ports = s->exposer_->GetListeningPorts();
  s->port_ = ports.empty() ? 0 : ports[0];
  return s;
}

MetricsServer::~MetricsServer() = default;

// ---------------------------------------------------------------- heat map

ActivationHeatMap::ActivationHeatMap(int n_layer, int n_expert)
    : n_layer_(n_layer), n_expert_(n_expert),
      counts_(new std::atomic<uint64_t>[static_cast<size_t>(n_layer) * n_expert]) {
  for (size_t i = 0; i < static_cast<size_t>(n_layer) * n_expert; ++i) counts_[i] = 0;
}

void ActivationHeatMap::Record(int layer, int expert) {
  if (layer < 0 || layer >= n_layer_ || expert < 0 || expert >= n_expert_) return;
  counts_[static_cast<size_t>(layer) * n_expert_ + expert].fetch_add(1, std::memory_order_relaxed);
}

uint64_t ActivationHeatMap::count(int layer, int expert) const {
  return counts_[static_cast<size_t>(layer) * n_expert_ + expert].load();
}

std::vector<prometheus::MetricFamily> ActivationHeatMap::Collect() const {
  prometheus::MetricFamily f;
  f.name = "moesplit_expert_activations_total";
  f.help = "Routed (token, expert) pairs computed, by layer and expert id.";
  f.type = prometheus::MetricType::Counter;
  for (int l = 0; l < n_layer_; ++l) {
    for (int e = 0; e < n_expert_; ++e) {
      const uint64_t c = count(l, e);
      if (c == 0) continue;
      prometheus::ClientMetric m;
      m.label = {{"expert", std::to_string(e)}, {"layer", std::to_string(l)}};
      m.counter.value = static_cast<double>(c);
      f.metric.push_back(std::move(m));
    }
  }
  return {std::move(f)};
}

std::vector<prometheus::MetricFamily> ExpertTierMetrics::Collect() const {
  const ExpertTierSnapshot t = read_();
  auto one = [](const char* name, const char* help, prometheus::MetricType type, double v) {
    prometheus::MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = type;
    prometheus::ClientMetric m;
    if (type == prometheus::MetricType::Counter) {
      m.counter.value = v;
    } else {
      m.gauge.value = v;
    }
    f.metric.push_back(std::move(m));
    return f;
  };
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out = {
      one("moesplit_worker_tier_slots", "Expert slots of the RAM tier.", MetricType::Gauge,
          t.slots),
      one("moesplit_worker_tier_resident_experts", "Experts in the RAM tier's slots now.",
          MetricType::Gauge, t.resident),
      one("moesplit_worker_tier_hits_total", "Expert uses served from a RAM slot.",
          MetricType::Counter, static_cast<double>(t.hits)),
      one("moesplit_worker_tier_misses_total", "Expert uses that read the expert from disk.",
          MetricType::Counter, static_cast<double>(t.misses)),
      one("moesplit_worker_tier_read_bytes_total", "Expert bytes read from the model file.",
          MetricType::Counter, static_cast<double>(t.bytes_read)),
      one("moesplit_worker_tier_read_errors_total", "Expert reads that failed.",
          MetricType::Counter, static_cast<double>(t.read_errors)),
      one("moesplit_worker_tier_prefetches_total", "Experts read ahead on the dense side's hints.",
          MetricType::Counter, static_cast<double>(t.prefetches)),
      one("moesplit_worker_tier_prefetch_used_total",
          "Experts read on a hint that a call then used.", MetricType::Counter,
          static_cast<double>(t.prefetch_used)),
      one("moesplit_worker_tier_prefetch_unused_total",
          "Experts read on a hint and evicted before any call used them.", MetricType::Counter,
          static_cast<double>(t.prefetch_unused)),
  };
  prometheus::MetricFamily h;
  h.name = "moesplit_worker_tier_read_duration_seconds";
  h.help = "Time to read one expert (gate, up and down) from disk.";
  h.type = MetricType::Histogram;
  prometheus::ClientMetric m;
  m.histogram.sample_count = t.reads;
  m.histogram.sample_sum = t.read_seconds;
  uint64_t cumulative = 0;
  for (size_t b = 0; b < t.read_buckets.size(); ++b) {
    cumulative += t.read_buckets[b];
    m.histogram.bucket.push_back(
        {cumulative, b < t.read_bounds.size() ? t.read_bounds[b]
                                              : std::numeric_limits<double>::infinity()});
  }
  h.metric.push_back(std::move(m));
  out.push_back(std::move(h));
  return out;
}

// ---------------------------------------------------------- worker metrics

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry, int n_layer, int n_expert)
    : registry_(registry),
      calls_(prometheus::BuildCounter()
                 .Name("moesplit_expert_calls_total")
                 .Help("Expert calls answered, by transport and status code.")
                 .Register(registry)),
      bytes_received_(prometheus::BuildCounter()
                          .Name("moesplit_transport_received_bytes_total")
                          .Help("Bytes of expert calls received, by transport.")
                          .Register(registry)),
      bytes_sent_(prometheus::BuildCounter()
                      .Name("moesplit_transport_sent_bytes_total")
                      .Help("Bytes of expert results sent, by transport.")
                      .Register(registry)),
      latency_(prometheus::BuildHistogram()
                   .Name("moesplit_expert_call_duration_seconds")
                   .Help("Time from receiving an expert call to its result, by transport.")
                   .Register(registry)),
      tokens_(prometheus::BuildHistogram()
                  .Name("moesplit_expert_call_tokens")
                  .Help("Tokens per expert call.")
                  .Register(registry)
                  .Add({}, TokenBuckets())),
      resident_(prometheus::BuildGauge()
                    .Name("moesplit_worker_resident_bytes")
                    .Help("Expert weight bytes held by this worker, by NUMA node.")
                    .Register(registry)),
      threads_(prometheus::BuildGauge()
                   .Name("moesplit_worker_threads")
                   .Help("Compute threads of this worker.")
                   .Register(registry)
                   .Add({})),
      heat_map_(std::make_shared<ActivationHeatMap>(n_layer, n_expert)) {}

void WorkerMetrics::OnCall(const char* transport, const model::ExpertCallView& call,
                           uint64_t bytes_in, uint64_t bytes_out, double seconds,
                           const absl::Status& status) {
  calls_.Add({{"transport", transport}, {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
  bytes_received_.Add({{"transport", transport}}).Increment(static_cast<double>(bytes_in));
  bytes_sent_.Add({{"transport", transport}}).Increment(static_cast<double>(bytes_out));
  latency_.Add({{"transport", transport}}, LatencyBuckets()).Observe(seconds);
  tokens_.Observe(call.n_tokens);
  if (!status.ok()) return;
  for (int32_t e : call.expert_ids) heat_map_->Record(call.layer, e);
}

void WorkerMetrics::SetResidentBytes(int node, uint64_t bytes) {
  resident_.Add({{"node", node < 0 ? std::string("none") : std::to_string(node)}})
      .Set(static_cast<double>(bytes));
}

void WorkerMetrics::SetThreads(int threads) { threads_.Set(threads); }

// ----------------------------------------------------------- dense metrics

DenseExpertMetrics::DenseExpertMetrics(prometheus::Registry& registry)
    : up_(prometheus::BuildGauge()
              .Name("moesplit_worker_up")
              .Help("1 when the expert worker answered its last call or connection attempt.")
              .Register(registry)),
      calls_(prometheus::BuildCounter()
                 .Name("moesplit_expert_client_calls_total")
                 .Help("Expert calls sent to each worker.")
                 .Register(registry)),
      failures_(prometheus::BuildCounter()
                    .Name("moesplit_expert_client_failures_total")
                    .Help("Expert calls or connections to each worker that failed.")
                    .Register(registry)),
      sent_(prometheus::BuildCounter()
                .Name("moesplit_transport_sent_bytes_total")
                .Help("Bytes of expert calls sent, by transport and worker.")
                .Register(registry)),
      received_(prometheus::BuildCounter()
                    .Name("moesplit_transport_received_bytes_total")
                    .Help("Bytes of expert results received, by transport and worker.")
                    .Register(registry)),
      round_trip_(prometheus::BuildHistogram()
                      .Name("moesplit_expert_roundtrip_seconds")
                      .Help("Time for one MoE layer's routed experts, all workers together.")
                      .Register(registry)
                      .Add({}, LatencyBuckets())),
      worker_time_(prometheus::BuildHistogram()
                       .Name("moesplit_expert_worker_seconds")
                       .Help("The workers' own time on one MoE layer's routed experts (the "
                             "slowest worker of each token chunk); the round trip less this is "
                             "transport hand-off and queueing.")
                       .Register(registry)
                       .Add({}, LatencyBuckets())),
      tokens_(prometheus::BuildHistogram()
                  .Name("moesplit_expert_call_tokens")
                  .Help("Tokens per MoE-layer expert call.")
                  .Register(registry)
                  .Add({}, TokenBuckets())) {}

void DenseExpertMetrics::ObserveCall(const model::ExpertCallView& call, double round_trip_seconds,
                                     uint64_t worker_ns) {
  tokens_.Observe(call.n_tokens);
  round_trip_.Observe(round_trip_seconds);
  if (worker_ns > 0) worker_time_.Observe(worker_ns * 1e-9);
}

void DenseExpertMetrics::Update(
    const std::vector<std::unique_ptr<transport::ExpertClient>>& clients) {
  last_.resize(clients.size());
  for (size_t i = 0; i < clients.size(); ++i) {
    const std::string& addr = clients[i]->address();
    const std::string transport = addr.substr(0, addr.find(':'));
    const prometheus::Labels worker{{"worker", addr}};
    const prometheus::Labels both{{"worker", addr}, {"transport", transport}};
    up_.Add(worker).Set(clients[i]->healthy() ? 1 : 0);
    const transport::TransportCounters now = clients[i]->counters();
    transport::TransportCounters& was = last_[i];
    calls_.Add(worker).Increment(static_cast<double>(now.calls - was.calls));
    failures_.Add(worker).Increment(static_cast<double>(now.failures - was.failures));
    sent_.Add(both).Increment(static_cast<double>(now.bytes_sent - was.bytes_sent));
    received_.Add(both).Increment(static_cast<double>(now.bytes_received - was.bytes_received));
    was = now;
  }
}

}  // namespace moesplit::telemetry
