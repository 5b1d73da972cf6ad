// Prometheus metrics of the dense service's GPU side: the memory plan
// (common/plan), device memory in use and the hot-expert cache
// (common/model/expert_cache.h). Names as in the metrics contract:
//   moesplit_gpu_memory_budget_bytes                       gauge
//   moesplit_gpu_memory_plan_bytes{use="dense_weights|kv_cache|workspace|expert_cache|prefix_cache"}
//                                                          gauge
//     (workspace includes the plan's margin, so the four sum to the plan's total)
//   moesplit_gpu_memory_used_bytes                         gauge (device total - free)
//   moesplit_expert_cache_resident_experts{layer}          gauge
//   moesplit_expert_cache_hits_total                       counter
//   moesplit_expert_cache_misses_total                     counter
//   moesplit_expert_cache_layer_hits_total{layer}          counter (the hits by layer:
//   moesplit_expert_cache_layer_misses_total{layer}        counter  per-layer hit rates)
//   moesplit_expert_cache_h2d_bytes_total                  counter
//   moesplit_expert_prefetch_total{outcome="hit|miss"}     counter
//   moesplit_prefill_stream_min_tokens                     gauge (tokens an expert
//     needs in one step to be streamed to the GPU for prefill; 0 = off)
// Every family and every child above is created by the constructor (0), so
// a scrape shows them from start-up. This library links prometheus-cpp's
// core only (no exposer, no gRPC): the GPU test binaries can use it.
//
// Thread-safety: the setters may be called from any thread (prometheus-cpp
// metrics are atomic); UpdateExpertCache must not run concurrently with
// itself (it keeps the last counters to add deltas).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/model/expert_cache.h"
#include "common/plan/memory_plan.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace moesplit::telemetry {

class GpuMetrics {
 public:
  // Registers every family on `registry` (which must outlive this object),
  // with one resident_experts child per layer in [0, n_layer).
  GpuMetrics(prometheus::Registry& registry, int n_layer);

  // The budget and the four plan_bytes children.
  void SetPlan(const plan::MemoryPlan& plan);
  void SetUsedBytes(uint64_t bytes);
  // Residency per layer (layers past n_layer are ignored) and the counters'
  // growth since the previous call.
  void UpdateExpertCache(const model::ExpertCache& cache);
  // The same from a copy of the counters and the per-layer residency (the
  // GPU forward publishes them for other threads).
  void UpdateExpertCache(const model::ExpertCacheStats& stats,
                         absl::Span<const int64_t> resident_per_layer);
  void SetPrefillStreamMinTokens(int64_t tokens);

 private:
  prometheus::Family<prometheus::Gauge>& plan_family_;
  prometheus::Family<prometheus::Counter>& prefetch_family_;
  prometheus::Gauge& budget_;
  prometheus::Gauge& used_;
  prometheus::Gauge& plan_dense_;
  prometheus::Gauge& plan_kv_;
  prometheus::Gauge& plan_workspace_;
  prometheus::Gauge& plan_cache_;
  prometheus::Gauge& plan_prefix_cache_;
  std::vector<prometheus::Gauge*> resident_;
  std::vector<prometheus::Counter*> layer_hits_, layer_misses_;
  prometheus::Counter& hits_;
  prometheus::Counter& misses_;
  prometheus::Counter& h2d_;
  prometheus::Counter& prefetch_hit_;
  prometheus::Counter& prefetch_miss_;
  prometheus::Gauge& stream_min_tokens_;
  model::ExpertCacheStats last_;
};

}  // namespace moesplit::telemetry
