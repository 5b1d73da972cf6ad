#include "common/telemetry/gpu_metrics.h"

#include <string>

namespace moesplit::telemetry {
namespace {

prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& r, const char* name,
                                                   const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& r,
                                                       const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

}  // namespace

GpuMetrics::GpuMetrics(prometheus::Registry& r, int n_layer)
    : plan_family_(GaugeFamily(r, "moesplit_gpu_memory_plan_bytes",
                               "GPU memory planned per use")),
      prefetch_family_(CounterFamily(r, "moesplit_expert_prefetch_total",
                                     "Predicted experts by outcome (routed or not)")),
      budget_(GaugeFamily(r, "moesplit_gpu_memory_budget_bytes",
                          "GPU memory the plan was made for")
                  .Add({})),
      used_(GaugeFamily(r, "moesplit_gpu_memory_used_bytes",
                        "GPU memory in use (device total - free)")
                .Add({})),
      plan_dense_(plan_family_.Add({{"use", "dense_weights"}})),
      plan_kv_(plan_family_.Add({{"use", "kv_cache"}})),
      plan_workspace_(plan_family_.Add({{"use", "workspace"}})),
      plan_cache_(plan_family_.Add({{"use", "expert_cache"}})),
      plan_prefix_cache_(plan_family_.Add({{"use", "prefix_cache"}})),
      hits_(CounterFamily(r, "moesplit_expert_cache_hits_total",
                          "Routed experts found in the GPU expert cache")
                .Add({})),
      misses_(CounterFamily(r, "moesplit_expert_cache_misses_total",
                            "Routed experts not in the GPU expert cache")
                  .Add({})),
      h2d_(CounterFamily(r, "moesplit_expert_cache_h2d_bytes_total",
                         "Expert weight bytes copied host to device")
               .Add({})),
      prefetch_hit_(prefetch_family_.Add({{"outcome", "hit"}})),
      prefetch_miss_(prefetch_family_.Add({{"outcome", "miss"}})),
      stream_min_tokens_(GaugeFamily(r, "moesplit_prefill_stream_min_tokens",
                                     "Tokens an expert needs in one step to be streamed to the "
                                     "GPU for prefill (0: off)")
                             .Add({})) {
  auto& resident = GaugeFamily(r, "moesplit_expert_cache_resident_experts",
                               "Experts resident in the GPU cache per layer");
  for (int l = 0; l < n_layer; ++l) resident_.push_back(&resident.Add({{"layer", std::to_string(l)}}));
  auto& layer_hits = CounterFamily(r, "moesplit_expert_cache_layer_hits_total",
                                   "Routed experts found in the GPU expert cache, per layer");
  auto& layer_misses = CounterFamily(r, "moesplit_expert_cache_layer_misses_total",
                                     "Routed experts not in the GPU expert cache, per layer");
  for (int l = 0; l < n_layer; ++l) {
    layer_hits_.push_back(&layer_hits.Add({{"layer", std::to_string(l)}}));
    layer_misses_.push_back(&layer_misses.Add({{"layer", std::to_string(l)}}));
  }
}

void GpuMetrics::SetPlan(const plan::MemoryPlan& p) {
  budget_.Set(static_cast<double>(p.options.budget_bytes));
  plan_dense_.Set(static_cast<double>(p.dense.total()));
  plan_kv_.Set(static_cast<double>(p.kv_cache));
  plan_workspace_.Set(static_cast<double>(p.workspace.total() + p.margin));
  plan_cache_.Set(static_cast<double>(p.expert_cache.bytes));
  plan_prefix_cache_.Set(static_cast<double>(p.prefix_cache_device));
}

void GpuMetrics::SetUsedBytes(uint64_t bytes) { used_.Set(static_cast<double>(bytes)); }

void GpuMetrics::SetPrefillStreamMinTokens(int64_t tokens) {
  stream_min_tokens_.Set(static_cast<double>(tokens));
}

void GpuMetrics::UpdateExpertCache(const model::ExpertCache& c) {
  std::vector<int64_t> resident(c.n_layer());
  for (int l = 0; l < c.n_layer(); ++l) resident[l] = c.resident_in_layer(l);
  UpdateExpertCache(c.stats(), resident);
}

void GpuMetrics::UpdateExpertCache(const model::ExpertCacheStats& s,
                                   absl::Span<const int64_t> resident_per_layer) {
  for (size_t l = 0; l < resident_per_layer.size() && l < resident_.size(); ++l) {
    resident_[l]->Set(static_cast<double>(resident_per_layer[l]));
  }
  auto add = [](prometheus::Counter& counter, uint64_t now, uint64_t before) {
    if (now > before) counter.Increment(static_cast<double>(now - before));
  };
  add(hits_, s.hits, last_.hits);
  add(misses_, s.misses, last_.misses);
  add(h2d_, s.h2d_bytes, last_.h2d_bytes);
  add(prefetch_hit_, s.prefetch_hits, last_.prefetch_hits);
  add(prefetch_miss_, s.prefetch_misses, last_.prefetch_misses);
  for (size_t l = 0; l < layer_hits_.size(); ++l) {
    const uint64_t before_h = l < last_.layer_hits.size() ? last_.layer_hits[l] : 0;
    const uint64_t before_m = l < last_.layer_misses.size() ? last_.layer_misses[l] : 0;
    if (l < s.layer_hits.size()) add(*layer_hits_[l], s.layer_hits[l], before_h);
    if (l < s.layer_misses.size()) add(*layer_misses_[l], s.layer_misses[l], before_m);
  }
  last_ = s;
}

}  // namespace moesplit::telemetry
