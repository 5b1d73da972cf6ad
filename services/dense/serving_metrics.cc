#include "services/dense/serving_metrics.h"

#include "common/telemetry/metrics.h"

namespace moesplit::dense {
namespace {

prometheus::Gauge& Gauge(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}
prometheus::Counter& Counter(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}
prometheus::Gauge& TierGauge(prometheus::Registry& r, const char* name, const char* help,
                             const char* tier) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({{"tier", tier}});
}
prometheus::Histogram& Histogram(prometheus::Registry& r, const char* name, const char* help,
                                 prometheus::Histogram::BucketBoundaries b) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, std::move(b));
}

}  // namespace

prometheus::Histogram::BucketBoundaries TimeToFirstTokenBuckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300};
}

prometheus::Histogram::BucketBoundaries InterTokenBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

ServingMetrics::ServingMetrics(prometheus::Registry& r)
    : queue_depth(Gauge(r, "moesplit_queue_depth", "requests waiting for a sequence slot")),
      queue_capacity(Gauge(r, "moesplit_queue_capacity", "most requests that may wait")),
      running_sequences(Gauge(r, "moesplit_running_sequences", "sequences being generated")),
      max_sequences(Gauge(r, "moesplit_max_sequences", "most concurrent sequences")),
      time_to_first_token(Histogram(r, "moesplit_time_to_first_token_seconds",
                                    "request arrival to its first generated token",
                                    TimeToFirstTokenBuckets())),
      inter_token_latency(Histogram(r, "moesplit_inter_token_latency_seconds",
                                    "time between two tokens of one sequence",
                                    InterTokenBuckets())),
      request_duration(Histogram(r, "moesplit_request_duration_seconds",
                                 "request arrival to its end",
                                 {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300})),
      prompt_tokens(Counter(r, "moesplit_prompt_tokens_total", "prompt tokens evaluated")),
      generated_tokens(Counter(r, "moesplit_generated_tokens_total", "tokens generated")),
      kv_used_bytes(Gauge(r, "moesplit_kv_cache_used_bytes", "KV cache bytes held by sequences")),
      kv_capacity_bytes(Gauge(r, "moesplit_kv_cache_capacity_bytes",
                              "KV cache bytes for every sequence slot at full context")),
      batch_tokens(Histogram(r, "moesplit_batch_tokens", "tokens per forward step",
                             telemetry::TokenBuckets())),
      prefix_cache_hits(Counter(r, "moesplit_prefix_cache_hits_total",
                                "requests that reused at least one cached prefix block")),
      prefix_cache_misses(Counter(r, "moesplit_prefix_cache_misses_total",
                                  "requests that found no cached prefix block")),
      prefix_cache_reused_tokens(Counter(r, "moesplit_prefix_cache_reused_tokens_total",
                                         "prompt tokens taken from the prefix cache")),
      prefix_cache_host_hits(Counter(r, "moesplit_prefix_cache_host_hits_total",
                                     "cached blocks brought back from the host tier by a hit")),
      prefix_cache_demotions(Counter(r, "moesplit_prefix_cache_demotions_total",
                                     "blocks moved from the primary to the host tier")),
      prefix_cache_evictions(Counter(r, "moesplit_prefix_cache_evictions_total",
                                     "blocks dropped from the prefix cache")),
      prefix_cache_device_hits(Counter(r, "moesplit_prefix_cache_device_hits_total",
                                       "cached blocks a hit found in the device tier")),
      prefix_cache_uploads(Counter(r, "moesplit_prefix_cache_uploads_total",
                                   "cached blocks a hit copied up to the device tier")),
      prefix_cache_device_demotions(
          Counter(r, "moesplit_prefix_cache_device_demotions_total",
                  "blocks copied from the device tier down to the primary tier")),
      prefix_cache_device_bytes(TierGauge(r, "moesplit_prefix_cache_bytes",
                                          "prefix cache bytes held per tier", "device")),
      prefix_cache_device_blocks(TierGauge(r, "moesplit_prefix_cache_blocks",
                                           "prefix cache blocks held per tier", "device")),
      prefix_cache_device_capacity(TierGauge(r, "moesplit_prefix_cache_capacity_bytes",
                                             "prefix cache budget per tier", "device")),
      prefix_cache_primary_bytes(TierGauge(r, "moesplit_prefix_cache_bytes",
                                           "prefix cache bytes held per tier", "primary")),
      prefix_cache_host_bytes(TierGauge(r, "moesplit_prefix_cache_bytes",
                                        "prefix cache bytes held per tier", "host")),
      prefix_cache_primary_blocks(TierGauge(r, "moesplit_prefix_cache_blocks",
                                            "prefix cache blocks held per tier", "primary")),
      prefix_cache_host_blocks(TierGauge(r, "moesplit_prefix_cache_blocks",
                                         "prefix cache blocks held per tier", "host")),
      prefix_cache_primary_capacity(TierGauge(r, "moesplit_prefix_cache_capacity_bytes",
                                              "prefix cache budget per tier", "primary")),
      prefix_cache_host_capacity(TierGauge(r, "moesplit_prefix_cache_capacity_bytes",
                                           "prefix cache budget per tier", "host")),
      ready(Gauge(r, "moesplit_ready",
                  "1 while the service takes requests: every layer has a live expert worker "
                  "and it is not draining")),
      draining(Gauge(r, "moesplit_draining", "1 while draining after SIGTERM")),
      requests_(prometheus::BuildCounter()
                    .Name("moesplit_requests_total")
                    .Help("API requests by outcome")
                    .Register(r)),
      gateway_queued_(Gauge(r, "vllm:num_requests_waiting",
                            "moesplit_queue_depth under the name the Gateway API Inference "
                            "Extension's endpoint picker reads (TotalQueuedRequests)")),
      gateway_running_(Gauge(r, "vllm:num_requests_running",
                             "moesplit_running_sequences under the endpoint picker's name")),
      gateway_kv_usage_(Gauge(r, "vllm:kv_cache_usage_perc",
                              "KV cache bytes held / capacity, 0..1 (the endpoint picker's "
                              "KVCacheUtilization)")) {
  for (const char* e : {"generate", "chat", "tokenize", "detokenize", "models"}) {
    requests_.Add({{"api", "grpc"}, {"endpoint", e}, {"outcome", "ok"}});
  }
  for (const char* e : {"completions", "chat_completions", "models"}) {
    requests_.Add({{"api", "http"}, {"endpoint", e}, {"outcome", "ok"}});
  }
}

void ServingMetrics::PublishGatewayGauges() {
  gateway_queued_.Set(queue_depth.Value());
  gateway_running_.Set(running_sequences.Value());
  const double capacity = kv_capacity_bytes.Value();
  gateway_kv_usage_.Set(capacity > 0 ? kv_used_bytes.Value() / capacity : 0.0);
}

void ServingMetrics::CountRequest(const std::string& api, const std::string& endpoint,
                                  const std::string& outcome) {
  requests_.Add({{"api", api}, {"endpoint", endpoint}, {"outcome", outcome}}).Increment();
}

std::string ServingMetrics::Outcome(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return "ok";
    case absl::StatusCode::kCancelled: return "cancelled";
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange: return "invalid_argument";
    case absl::StatusCode::kResourceExhausted: return "resource_exhausted";
    case absl::StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    default: return "error";
  }
}

}  // namespace moesplit::dense
