#include "common/telemetry/gpu_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace moesplit::telemetry {
namespace {

using ::testing::HasSubstr;

std::string Scrape(prometheus::Registry& r) {
  return prometheus::TextSerializer().Serialize(r.Collect());
}

TEST(GpuMetricsTest, EveryFamilyIsThereAtStartUp) {
  prometheus::Registry r;
  GpuMetrics m(r, 3);
  const std::string body = Scrape(r);
  for (const char* line : {
           "moesplit_gpu_memory_budget_bytes 0",
           "moesplit_gpu_memory_used_bytes 0",
           "moesplit_gpu_memory_plan_bytes{use=\"dense_weights\"} 0",
           "moesplit_gpu_memory_plan_bytes{use=\"kv_cache\"} 0",
           "moesplit_gpu_memory_plan_bytes{use=\"workspace\"} 0",
           "moesplit_gpu_memory_plan_bytes{use=\"expert_cache\"} 0",
           "moesplit_gpu_memory_plan_bytes{use=\"prefix_cache\"} 0",
           "moesplit_expert_cache_resident_experts{layer=\"0\"} 0",
           "moesplit_expert_cache_resident_experts{layer=\"2\"} 0",
           "moesplit_expert_cache_hits_total 0",
           "moesplit_expert_cache_misses_total 0",
           "moesplit_expert_cache_layer_hits_total{layer=\"2\"} 0",
           "moesplit_expert_cache_layer_misses_total{layer=\"0\"} 0",
           "moesplit_expert_cache_h2d_bytes_total 0",
           "moesplit_expert_prefetch_total{outcome=\"hit\"} 0",
           "moesplit_expert_prefetch_total{outcome=\"miss\"} 0",
           "moesplit_prefill_stream_min_tokens 0",
       }) {
    EXPECT_THAT(body, HasSubstr(line)) << body;
  }
}

TEST(GpuMetricsTest, ExportsThePlanAndTheCache) {
  plan::MemoryPlan p;
  p.options.budget_bytes = 8589934592ull;
  p.dense.attention = 500;
  p.dense.output_head = 300;
  p.kv_cache = 3422552064ull;
  p.workspace.logits = 1000;
  p.margin = 24;
  p.expert_cache.bytes = 4000;
  p.prefix_cache_device = 512;
  prometheus::Registry r;
  GpuMetrics m(r, 2);
  m.SetPlan(p);
  m.SetUsedBytes(123456789);

  model::ExpertCacheOptions o;
  o.n_layer = 2;
  o.n_expert = 4;
  o.n_slots = 3;
  o.expert_bytes = {100, 200};
  model::ExpertCache cache = *model::ExpertCache::Create(o);
  ASSERT_TRUE(cache.Prefetch(1, {2}, nullptr).ok());      // admitted (200 bytes)
  ASSERT_TRUE(cache.Access(0, {0, 1}, nullptr).ok());     // 2 misses, admitted
  ASSERT_TRUE(cache.Access(1, {2, 3}, nullptr).ok());     // hit 2, miss 3
  m.UpdateExpertCache(cache);
  cache.EndStep();
  ASSERT_TRUE(cache.Access(0, {0}, nullptr).ok());        // hit
  m.UpdateExpertCache(cache);
  // The snapshot form adds only the growth too (nothing new here).
  const std::vector<int64_t> resident = {cache.resident_in_layer(0), cache.resident_in_layer(1)};
  m.UpdateExpertCache(cache.stats(), resident);
  m.SetPrefillStreamMinTokens(37);

  const std::string body = Scrape(r);
  for (const char* line : {
           "moesplit_gpu_memory_budget_bytes 8589934592",
           "moesplit_gpu_memory_used_bytes 123456789",
           "moesplit_gpu_memory_plan_bytes{use=\"dense_weights\"} 800",
           "moesplit_gpu_memory_plan_bytes{use=\"kv_cache\"} 3422552064",
           "moesplit_gpu_memory_plan_bytes{use=\"workspace\"} 1024",
           "moesplit_gpu_memory_plan_bytes{use=\"expert_cache\"} 4000",
           "moesplit_gpu_memory_plan_bytes{use=\"prefix_cache\"} 512",
           "moesplit_expert_cache_resident_experts{layer=\"0\"} 2",
           "moesplit_expert_cache_resident_experts{layer=\"1\"} 1",
           "moesplit_expert_cache_hits_total 2",
           "moesplit_expert_cache_misses_total 3",
           "moesplit_expert_cache_layer_hits_total{layer=\"0\"} 1",
           "moesplit_expert_cache_layer_misses_total{layer=\"0\"} 2",
           "moesplit_expert_cache_layer_hits_total{layer=\"1\"} 1",
           "moesplit_expert_cache_layer_misses_total{layer=\"1\"} 1",
           "moesplit_expert_cache_h2d_bytes_total 400",
           "moesplit_expert_prefetch_total{outcome=\"hit\"} 1",
           "moesplit_expert_prefetch_total{outcome=\"miss\"} 0",
           "moesplit_prefill_stream_min_tokens 37",
       }) {
    EXPECT_THAT(body, HasSubstr(line)) << body;
  }
}

}  // namespace
}  // namespace moesplit::telemetry
