// ServingMetrics: the dense service's request, scheduler and KV-cache
// metrics (names in the metrics contract, "Added by the API work"). Every
// family is registered at construction, so a scrape shows them at once
// (moesplit_requests_total with outcome="ok" = 0 for every api/endpoint).
//
// Thread-safe: prometheus-cpp metrics are atomics.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace moesplit::dense {

// Bucket bounds (seconds): time to first token up to 300 s (a long CPU
// prefill must not fall off the top), inter-token latency up to 10 s.
prometheus::Histogram::BucketBoundaries TimeToFirstTokenBuckets();
prometheus::Histogram::BucketBoundaries InterTokenBuckets();

class ServingMetrics {
 public:
  explicit ServingMetrics(prometheus::Registry& registry);

  // api: "grpc" | "http"; endpoint: "generate", "chat", "completions",
  // "chat_completions", "tokenize", "detokenize", "models".
  void CountRequest(const std::string& api, const std::string& endpoint,
                    const std::string& outcome);
  // The outcome label of a finished request's status.
  static std::string Outcome(const absl::Status& status);

  prometheus::Gauge& queue_depth;
  prometheus::Gauge& queue_capacity;
  prometheus::Gauge& running_sequences;
  prometheus::Gauge& max_sequences;
  prometheus::Histogram& time_to_first_token;
  prometheus::Histogram& inter_token_latency;
  prometheus::Histogram& request_duration;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generated_tokens;
  prometheus::Gauge& kv_used_bytes;
  prometheus::Gauge& kv_capacity_bytes;
  prometheus::Histogram& batch_tokens;
  // The prefix cache (prefix_cache.h): lookups that reused a block or none,
  // prompt tokens reused, blocks brought back from the host tier, blocks
  // moved to the host tier and dropped, the device tier's hits, uploads and
  // copies down to the primary tier, and each tier's bytes and blocks now
  // (tier = "device" | "primary" | "host").
  prometheus::Counter& prefix_cache_hits;
  prometheus::Counter& prefix_cache_misses;
  prometheus::Counter& prefix_cache_reused_tokens;
  prometheus::Counter& prefix_cache_host_hits;
  prometheus::Counter& prefix_cache_demotions;
  prometheus::Counter& prefix_cache_evictions;
  prometheus::Counter& prefix_cache_device_hits;
  prometheus::Counter& prefix_cache_uploads;
  prometheus::Counter& prefix_cache_device_demotions;
  prometheus::Gauge& prefix_cache_device_bytes;
  prometheus::Gauge& prefix_cache_device_blocks;
  prometheus::Gauge& prefix_cache_device_capacity;
  prometheus::Gauge& prefix_cache_primary_bytes;
  prometheus::Gauge& prefix_cache_host_bytes;
  prometheus::Gauge& prefix_cache_primary_blocks;
  prometheus::Gauge& prefix_cache_host_blocks;
  prometheus::Gauge& prefix_cache_primary_capacity;
  prometheus::Gauge& prefix_cache_host_capacity;
  // Readiness (readiness.h) and SIGTERM draining, 1 or 0.
  prometheus::Gauge& ready;
  prometheus::Gauge& draining;

  // The Gateway API Inference Extension's model-server protocol: its
  // endpoint picker reads, by default, vllm:num_requests_waiting
  // (TotalQueuedRequests), vllm:num_requests_running and
  // vllm:kv_cache_usage_perc (KVCacheUtilization, a fraction 0..1). Copies
  // queue_depth, running_sequences and kv_used_bytes / kv_capacity_bytes
  // into them; called wherever those change.
  void PublishGatewayGauges();

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Gauge& gateway_queued_;
  prometheus::Gauge& gateway_running_;
  prometheus::Gauge& gateway_kv_usage_;
};

}  // namespace moesplit::dense
