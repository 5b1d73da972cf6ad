#include "common/plan/memory_plan.h"

#include "absl/strings/str_cat.h"
#include "common/model/testing/fixtures.h"
#include "common/model/testing/tiny_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moesplit::plan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using model::TensorId;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// llama.cpp's Q4_K_M choice for a 48-layer, 128-expert qwen3moe
// (services/cli/type_mix.h): Q6_K for attn_v and ffn_down_exps in the
// "more bits" layers and for output.weight, Q4_K for other matrices, F32
// norms and routers.
GgmlType Q4KM(const model::TensorSpec& spec, int il, const model::HyperParams& hp) {
  const int64_t n = hp.n_layer;
  const bool more_bits = il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2;
  switch (spec.id) {
    case TensorId::kOutput: return GgmlType::kQ6_K;
    case TensorId::kAttnV:
    case TensorId::kExpDown: return more_bits ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    case TensorId::kTokenEmbd:
    case TensorId::kAttnQ:
    case TensorId::kAttnK:
    case TensorId::kAttnOutput:
    case TensorId::kExpGate:
    case TensorId::kExpUp: return GgmlType::kQ4_K;
    default: return GgmlType::kF32;
  }
}

// Qwen3-30B-A3B has QK-norm, no biases, no shared expert.
bool Qwen3Optional(const model::TensorSpec& spec) {
  return spec.id == TensorId::kAttnQNorm || spec.id == TensorId::kAttnKNorm ||
         spec.id == TensorId::kOutput;
}

model::HyperParams Qwen3_30B_A3B() {
  model::HyperParams hp;
  hp.arch = "qwen3moe";
  hp.n_layer = 48;
  hp.n_embd = 2048;
  hp.n_ctx_train = 40960;
  hp.n_head = 32;
  hp.n_head_kv = 4;
  hp.head_dim_k = hp.head_dim_v = 128;
  hp.n_vocab = 151936;
  hp.n_expert = 128;
  hp.n_expert_used = 8;
  hp.n_ff = 6144;
  hp.n_ff_exp = 768;
  hp.n_ff_shexp = 0;
  hp.rope.n_rot = 128;
  hp.layers = model::LayerSpecs(*model::FindArch("qwen3moe"), hp.n_layer);
  return hp;
}

ModelShape Qwen3Shape() {
  absl::StatusOr<ModelShape> s = ShapeFromTypes(Qwen3_30B_A3B(), Q4KM, Qwen3Optional);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

PlanOptions Mission() {
  PlanOptions o;
  o.budget_bytes = 8 * kGiB;
  o.n_ctx = 65536;
  o.kv_type = KvType::kQ8_0;
  return o;
}

// Workers of a given size: the fewest, balanced, layer ranges in order; the
// layers without routed experts cost nothing.
TEST(MemoryPlanTest, PlansWorkersByLayerRanges) {
  ModelShape s;
  s.hp.n_layer = 6;
  const uint64_t per_layer[6] = {0, 0, 40, 40, 40, 30};  // two dense layers
  for (int l = 0; l < 6; ++l) {
    if (per_layer[l] == 0) continue;
    s.tensors.push_back({absl::StrCat("blk.", l, ".ffn_up_exps.weight"),
                         model::TensorRole::kRoutedExpert, l, GgmlType::kF32, {1}, per_layer[l]});
  }
  auto w = PlanWorkers(s, 100);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 2u);
  EXPECT_EQ((*w)[0].layer_begin, 0);
  EXPECT_EQ((*w)[0].layer_end, 4);   // 80: the balanced split, not 40 + 40 + 40 > 100
  EXPECT_EQ((*w)[1].layer_begin, 4);
  EXPECT_EQ((*w)[1].layer_end, 6);
  EXPECT_EQ((*w)[1].bytes, 70u);
  EXPECT_THAT(FormatWorkers(*w, 100), HasSubstr("worker 1: --shard layers=4-5"));
  auto one = PlanWorkers(s, 1000);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].layer_end, 6);
  auto small = PlanWorkers(s, 39);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(small.status().message()), HasSubstr("layer 2"));
  EXPECT_EQ(PlanWorkers(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// The host tier: which share of the experts stays in RAM and what a decode
// token reads from disk (n_expert_used experts per MoE layer, the
// non-resident share of them).
TEST(MemoryPlanTest, PlansTheHostTier) {
  ModelShape s;
  s.hp.n_layer = 4;
  s.hp.n_expert = 10;
  s.hp.n_expert_used = 2;
  const uint64_t per_layer[4] = {0, 400, 400, 200};  // 40, 40, 20 per expert
  for (int l = 0; l < 4; ++l) {
    if (per_layer[l] == 0) continue;
    s.tensors.push_back({absl::StrCat("blk.", l, ".ffn_up_exps.weight"),
                         model::TensorRole::kRoutedExpert, l, GgmlType::kF32, {1, 1, 10},
                         per_layer[l]});
  }
  auto all = PlanHostTier(s, 2000);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->shares.size(), 1u);
  EXPECT_EQ(all->shares[0].ram_bytes, 1000u);
  EXPECT_EQ(all->shares[0].resident_share, 1.0);
  EXPECT_EQ(all->disk_bytes_per_token, 0u);
  auto half = PlanHostTier(s, 500);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->shares[0].ram_bytes, 500u);
  EXPECT_EQ(half->disk_bytes_per_token, 100u);  // (2 x (40 + 40 + 20)) / 2
  EXPECT_THAT(FormatHostTier(*half, 1000), HasSubstr("500 B of 1000 B in RAM (50.0%)"));
  EXPECT_THAT(FormatHostTier(*half, 1000), HasSubstr("10.00 tokens/s"));
  // Per worker: each range has the host's RAM to itself.
  auto per = PlanHostTier(s, 400, {{0, 2, 400}, {2, 4, 600}});
  ASSERT_TRUE(per.ok());
  ASSERT_EQ(per->shares.size(), 2u);
  EXPECT_EQ(per->shares[0].resident_share, 1.0);
  EXPECT_EQ(per->shares[1].ram_bytes, 400u);
  EXPECT_EQ(per->disk_bytes_per_token, 40u);  // 2 x (40 + 20) x (1 - 400/600)
  EXPECT_EQ(PlanHostTier(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MemoryPlanTest, KvElementBytes) {
  EXPECT_EQ(KvElementBytes(KvType::kF16, 1024), 2048u);
  EXPECT_EQ(KvElementBytes(KvType::kQ8_0, 1024), 1088u);  // 32 blocks x 34
  EXPECT_EQ(KvElementBytes(KvType::kQ4_0, 1024), 576u);   // 32 blocks x 18
  EXPECT_EQ(*ParseKvType("Q8_0"), KvType::kQ8_0);
  EXPECT_THAT(ParseKvType("q5_1").status().message(), HasSubstr("f16, q8_0, q4_0"));
}

// The mission: Qwen3-30B-A3B at Q4_K_M, 64K context, q8_0 KV, 8 GiB. Every
// number below is worked out by hand from the shapes (Q4_K: 144 bytes per
// 256 elements, Q6_K: 210 per 256).
TEST(MemoryPlanTest, Qwen3_30B_A3B_Q4KM_64K_Q8_0_On8GiB) {
  absl::StatusOr<MemoryPlan> p = PlanMemory(Qwen3Shape(), Mission());
  ASSERT_TRUE(p.ok()) << p.status();
  // Attention, 24 "more bits" layers (attn_v Q6_K) and 24 others:
  //   q, o: 2048 x 4096 Q4_K = 4,718,592 each; k: 512 x 2048 Q4_K = 589,824;
  //   v: 860,160 (Q6_K) or 589,824.
  EXPECT_EQ(p->dense.attention, 24u * (2 * 4718592 + 589824 + 860160) +
                                    24u * (2 * 4718592 + 2 * 589824));
  EXPECT_EQ(p->dense.attention, 516096000u);
  // attn_norm + ffn_norm (2048 f32) + q_norm + k_norm (128 f32) per layer,
  // plus output_norm.
  EXPECT_EQ(p->dense.norms, 48u * (2 * 8192 + 2 * 512) + 8192);
  EXPECT_EQ(p->dense.routers, 48u * 128 * 2048 * 4);
  EXPECT_EQ(p->dense.shared_experts, 0u);
  EXPECT_EQ(p->dense.output_head, 151936u * 2048 / 256 * 210);  // Q6_K
  EXPECT_EQ(p->dense.total(), 822523904u);
  EXPECT_EQ(p->host_token_embd, 151936u * 2048 / 256 * 144);     // Q4_K, on the host
  // KV: 4 heads x (128 + 128) = 1024 elements = 32 q8_0 blocks of 34 bytes.
  EXPECT_EQ(p->kv_bytes_per_position, 48u * 1088);
  // 256 pages of 256 positions, plus the block table.
  EXPECT_EQ(p->kv_cache, uint64_t{48} * 1088 * 65536 + 256 * 4);
  EXPECT_EQ(p->kv_cache, 3422553088u);
  // Workspace for 512 tokens (the CUDA forward's buffers): per token, 6 d
  // + q + k + v + attention output + 2 router rows + 3 x top-8 + 2 expert
  // FFN rows + RoPE angles in f32; 3 x top-8 + the token id in int32.
  const uint64_t floats = 6 * 2048 + 4096 + 512 + 512 + 4096 + 2 * 128 + 3 * 8 + 2 * 768 + 128;
  EXPECT_EQ(p->workspace.activations, 512u * 4 * (floats + 3 * 8 + 1));
  EXPECT_EQ(p->workspace.logits, 32u * 151936 * 4);  // the head in groups of 32 rows
  // Split-K partials: 8 tokens x 32 heads x 256 chunks x (128 + 2).
  EXPECT_EQ(p->workspace.attention, 8u * 32 * 256 * 130 * 4);
  EXPECT_EQ(p->workspace.rounding, 512u * 4096 * 4);  // widest input: attn_output's 4096
  EXPECT_EQ(p->workspace.staging, 2u * 3059712);      // two of the largest expert
  EXPECT_EQ(p->workspace.total(), 116107264u);
  EXPECT_EQ(p->margin, 256u << 20);
  EXPECT_EQ(p->fixed_bytes(), 4629619712u);
  // Experts: gate + up Q4_K (884,736 each) + down Q6_K (1,290,240) in the
  // more-bits layers: the slot is 3,059,712 bytes.
  EXPECT_EQ(p->expert_cache.bytes, 8 * kGiB - 4629619712u);
  EXPECT_EQ(p->expert_cache.slot_bytes, 3059712u);
  EXPECT_EQ(p->expert_cache.slots, 1294);
  EXPECT_EQ(p->expert_cache.moe_layers, 48);
  EXPECT_EQ(p->expert_cache.slots_per_layer, 26);
  EXPECT_EQ(p->host_routed_experts, uint64_t{128} * 24 * (3059712 + 2654208));
  EXPECT_LE(p->gpu_total(), 8 * kGiB);
  EXPECT_GT(p->gpu_total() + p->expert_cache.slot_bytes, 8 * kGiB - 1);
}

TEST(MemoryPlanTest, ExpertCacheOptionsFromThePlan) {
  const ModelShape shape = Qwen3Shape();
  absl::StatusOr<MemoryPlan> p = PlanMemory(shape, Mission());
  ASSERT_TRUE(p.ok());
  const model::ExpertCacheOptions o = ExpertCacheOptionsFor(shape, *p);
  EXPECT_EQ(o.n_layer, 48);
  EXPECT_EQ(o.n_expert, 128);
  EXPECT_EQ(o.n_slots, 1294);
  ASSERT_EQ(o.expert_bytes.size(), 48u);
  EXPECT_EQ(o.expert_bytes[0], 3059712u);  // "more bits" layer: down in Q6_K
  EXPECT_EQ(o.expert_bytes[6], 2654208u);  // Q4_K throughout
  EXPECT_EQ(o.expert_bytes[8], 3059712u);
  EXPECT_TRUE(model::ExpertCache::Create(o).ok());
}

TEST(MemoryPlanTest, F16KvAt64KAlsoFitsButLeavesLessForExperts) {
  PlanOptions o = Mission();
  o.kv_type = KvType::kF16;
  absl::StatusOr<MemoryPlan> p = PlanMemory(Qwen3Shape(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kv_cache, uint64_t{48} * 2048 * 65536 + 256 * 4);
  EXPECT_EQ(p->fixed_bytes(), 7649518592u);
  EXPECT_EQ(p->expert_cache.slots, (8 * kGiB - 7649518592u) / 3059712);
}

TEST(MemoryPlanTest, RefusesWhatDoesNotFitSayingByHowMuch) {
  PlanOptions o = Mission();
  o.kv_type = KvType::kF16;
  o.budget_bytes = 6 * kGiB;
  absl::StatusOr<MemoryPlan> p = PlanMemory(Qwen3Shape(), o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  // 7,649,518,592 bytes = 7.12 GiB; short by 1,207,067,648 = 1.12 GiB. The
  // largest multiple of 1024 positions that fits is 52 x 1024.
  EXPECT_THAT(p.status().message(), HasSubstr("needs 7.12 GiB"));
  EXPECT_THAT(p.status().message(), HasSubstr("KV cache 6.00 GiB"));
  EXPECT_THAT(p.status().message(), HasSubstr("budget 6.00 GiB: 1.12 GiB short"));
  EXPECT_THAT(p.status().message(), HasSubstr("try --ctx 53248 or --kv-type q8_0"));
  // The suggestions do fit.
  o.n_ctx = 53248;
  EXPECT_TRUE(PlanMemory(Qwen3Shape(), o).ok());
  o.n_ctx = 54272;
  EXPECT_FALSE(PlanMemory(Qwen3Shape(), o).ok());

  // Parallel sequences multiply the KV cache.
  o = Mission();
  o.n_parallel = 3;
  p = PlanMemory(Qwen3Shape(), o);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("KV cache 9.56 GiB"));
  EXPECT_THAT(p.status().message(), HasSubstr("--parallel 2"));
  EXPECT_THAT(p.status().message(), HasSubstr("--kv-type q4_0"));

  // Nothing helps when the dense weights alone exceed the budget.
  o = Mission();
  o.budget_bytes = 512u << 20;
  p = PlanMemory(Qwen3Shape(), o);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("alone do not fit"));
}

// The prefix cache's device tier is planned before the expert cache: it
// takes its bytes from there, shows in the table and the JSON, and when it
// is what makes a plan not fit the refusal says so.
TEST(MemoryPlanTest, ThePrefixCacheDeviceTierComesOutOfTheExpertCache) {
  PlanOptions o = Mission();
  o.prefix_cache_device_bytes = uint64_t{1} << 30;
  absl::StatusOr<MemoryPlan> p = PlanMemory(Qwen3Shape(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prefix_cache_device, uint64_t{1} << 30);
  EXPECT_EQ(p->fixed_bytes(), 4629619712u + (uint64_t{1} << 30));
  EXPECT_EQ(p->expert_cache.slots, (8 * kGiB - 4629619712u - (uint64_t{1} << 30)) / 3059712);
  EXPECT_LE(p->gpu_total(), 8 * kGiB);
  EXPECT_THAT(FormatPlanTable(*p), HasSubstr("prefix cache (device)"));
  const nlohmann::json j = nlohmann::json::parse(FormatPlanJson(*p));
  EXPECT_EQ(j["gpu"]["prefix_cache_device"].get<uint64_t>(), uint64_t{1} << 30);
  EXPECT_EQ(j["gpu"]["total"].get<uint64_t>(), p->gpu_total());
  // Without it the table has no such row.
  EXPECT_THAT(FormatPlanTable(*PlanMemory(Qwen3Shape(), Mission())),
              Not(HasSubstr("prefix cache (device)")));
  o.prefix_cache_device_bytes = 4 * kGiB;
  p = PlanMemory(Qwen3Shape(), o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(p.status().message(), HasSubstr("+ prefix cache 4.00 GiB"));
  EXPECT_THAT(p.status().message(), HasSubstr("a smaller --cache-device"));
}

TEST(MemoryPlanTest, RejectsBadOptions) {
  PlanOptions o = Mission();
  o.n_ctx = 0;
  EXPECT_THAT(PlanMemory(Qwen3Shape(), o).status().message(), HasSubstr("--ctx must be > 0"));
  o = Mission();
  o.budget_bytes = 0;
  EXPECT_EQ(PlanMemory(Qwen3Shape(), o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Mission();
  o.n_parallel = 0;
  EXPECT_THAT(PlanMemory(Qwen3Shape(), o).status().message(), HasSubstr("--parallel"));
  o = Mission();
  o.n_ctx = int64_t{1} << 40;
  EXPECT_THAT(PlanMemory(Qwen3Shape(), o).status().message(), HasSubstr("beyond"));
  // head_dim 48 is not whole q8_0 blocks.
  model::HyperParams hp = Qwen3_30B_A3B();
  hp.head_dim_k = hp.head_dim_v = 48;
  hp.n_layer = 2;
  hp.layers.resize(2);
  absl::StatusOr<ModelShape> s = ShapeFromTypes(hp, Q4KM, Qwen3Optional);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(PlanMemory(*s, Mission()).status().message(), HasSubstr("multiples of 32"));
  o = Mission();
  o.kv_type = KvType::kF16;
  EXPECT_TRUE(PlanMemory(*s, o).ok());
}

// A loaded model gives the same bytes as its file's tensor table; the tied
// embedding counts as the output head, on the GPU.
TEST(MemoryPlanTest, ShapeOfALoadedModel) {
  for (bool tied : {false, true}) {
    model::testing::TinyModelOptions mo;
    mo.arch = "qwen2moe";
    mo.tied_output = tied;
    mo.matrix_type = GgmlType::kQ8_0;
    absl::StatusOr<std::shared_ptr<const model::Model>> m = model::testing::MakeTinyModel(mo);
    ASSERT_TRUE(m.ok()) << m.status();
    const ModelShape s = ShapeOfModel(**m);
    EXPECT_EQ(s.tied_output, tied);
    PlanOptions o;
    o.budget_bytes = 64u << 20;
    o.n_ctx = 256;
    o.margin_bytes = 1 << 20;
    absl::StatusOr<MemoryPlan> p = PlanMemory(s, o);
    ASSERT_TRUE(p.ok()) << p.status();
    const model::ModelSummary sum = (*m)->Summary();
    EXPECT_EQ(p->host_routed_experts, sum.bytes_by_role.at("routed_experts"));
    EXPECT_EQ(p->dense.shared_experts, sum.bytes_by_role.at("shared_experts"));
    EXPECT_GT(p->dense.shared_experts, 0u);
    EXPECT_EQ(p->host_token_embd, tied ? 0 : sum.bytes_by_role.at("embeddings"));
    EXPECT_EQ(p->dense.output_head, tied ? sum.bytes_by_role.at("embeddings")
                                         : sum.bytes_by_role.at("output"));
    // Everything the file holds is placed once: GPU dense + host.
    uint64_t total = 0;
    for (const auto& [role, b] : sum.bytes_by_role) total += b;
    EXPECT_EQ(p->dense.total() + p->host_token_embd + p->host_routed_experts, total);
    // The tiny model's whole expert set fits in 64 MiB.
    EXPECT_EQ(p->expert_cache.slots, 2 * 4);
    EXPECT_EQ(p->kv_bytes_per_position, 2u * 2 * (2 * 16) * 2);  // layers x heads x dims x f16
  }
}

// A UD-IQ2_XXS-like mix of the same shape: IQ2_XXS gate/up experts, IQ3_XXS
// down experts, the rest as Q4_K_M. The i-quants' bytes per 256-column
// block are ggml's (66 for IQ2_XXS, 98 for IQ3_XXS).
GgmlType Iq2XxsMix(const model::TensorSpec& spec, int il, const model::HyperParams& hp) {
  switch (spec.id) {
    case TensorId::kExpGate:
    case TensorId::kExpUp: return GgmlType::kIQ2_XXS;
    case TensorId::kExpDown: return GgmlType::kIQ3_XXS;
    default: return Q4KM(spec, il, hp);
  }
}

TEST(MemoryPlanTest, IQuantExpertBytes) {
  absl::StatusOr<ModelShape> s = ShapeFromTypes(Qwen3_30B_A3B(), Iq2XxsMix, Qwen3Optional);
  ASSERT_TRUE(s.ok()) << s.status();
  int checked = 0;
  for (const ShapeTensor& t : s->tensors) {
    if (t.name == "blk.0.ffn_gate_exps.weight" || t.name == "blk.0.ffn_up_exps.weight") {
      EXPECT_EQ(t.n_bytes, uint64_t{128} * 768 * (2048 / 256) * 66) << t.name;
      ++checked;
    }
    if (t.name == "blk.0.ffn_down_exps.weight") {
      EXPECT_EQ(t.n_bytes, uint64_t{128} * 2048 * (768 / 256) * 98) << t.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3);
  absl::StatusOr<MemoryPlan> p = PlanMemory(*s, Mission());
  ASSERT_TRUE(p.ok()) << p.status();
  // 48 layers of 128 experts, each gate + up + down.
  EXPECT_EQ(p->host_routed_experts, uint64_t{48} * 128 * (2 * 768 * 8 * 66 + 2048 * 3 * 98));
}

// A file with a NextN / MTP block: the plan places the trunk only (its KV
// and recurrent state, its experts on the workers) and shows the block's
// bytes apart, on the host.
TEST(MemoryPlanTest, NextNBlocksArePlannedApart) {
  auto m = model::Model::Open(model::testing::FixtureModelsDir() + "/qwen35moe-mtp-tiny-f16.gguf");
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelShape s = ShapeOfModel(**m);
  ASSERT_FALSE(s.nextn_tensors.empty());
  for (const ShapeTensor& t : s.nextn_tensors) EXPECT_EQ(t.layer, 4) << t.name;
  for (const ShapeTensor& t : s.tensors) EXPECT_LT(t.layer, 4) << t.name;
  PlanOptions o;
  o.budget_bytes = 64u << 20;
  o.n_ctx = 256;
  o.margin_bytes = 1 << 20;
  absl::StatusOr<MemoryPlan> p = PlanMemory(s, o);
  ASSERT_TRUE(p.ok()) << p.status();
  const model::ModelSummary sum = (*m)->Summary();
  EXPECT_GT(p->host_nextn, 0u);
  EXPECT_EQ(p->host_nextn, sum.bytes_by_role.at("nextn"));
  EXPECT_EQ(p->host_routed_experts, sum.bytes_by_role.at("routed_experts"));
  uint64_t total = 0;
  for (const auto& [role, b] : sum.bytes_by_role) total += b;
  EXPECT_EQ(p->dense.total() + p->host_token_embd + p->host_routed_experts + p->host_nextn,
            total);
  // One attention layer's KV (block 3); the MTP block has none.
  EXPECT_EQ(p->hp.n_attention_layers(), 1);
  EXPECT_EQ(p->expert_cache.moe_layers, 4);
  EXPECT_THAT(FormatPlanTable(*p), HasSubstr("NextN/MTP blocks"));
  EXPECT_EQ(nlohmann::json::parse(FormatPlanJson(*p))["host"]["nextn"].get<uint64_t>(),
            p->host_nextn);
  // The shape from types alone has the same NextN tensors.
  absl::StatusOr<ModelShape> t = ShapeFromTypes(
      s.hp, [](const model::TensorSpec&, int, const model::HyperParams&) { return GgmlType::kF32; },
      nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::string> want, got;
  for (const ShapeTensor& x : s.nextn_tensors) want.push_back(x.name);
  for (const ShapeTensor& x : t->nextn_tensors) got.push_back(x.name);
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  // The file leaves out the optional embed_tokens / shared_head_head.
  for (const std::string& n : want) EXPECT_NE(std::find(got.begin(), got.end(), n), got.end()) << n;
  EXPECT_EQ(got.size(), want.size() + 2);
}

TEST(MemoryPlanTest, TableAndJson) {
  absl::StatusOr<MemoryPlan> p = PlanMemory(Qwen3Shape(), Mission());
  ASSERT_TRUE(p.ok());
  const std::string table = FormatPlanTable(*p);
  EXPECT_THAT(table, HasSubstr("KV cache"));
  EXPECT_THAT(table, HasSubstr("3422553088"));
  EXPECT_THAT(table, HasSubstr("1294 experts of 3059712 bytes = 26 per layer of 128"));
  EXPECT_THAT(table, HasSubstr("prefill staging"));
  const nlohmann::json j = nlohmann::json::parse(FormatPlanJson(*p));
  EXPECT_EQ(j["budget_bytes"].get<uint64_t>(), 8 * kGiB);
  EXPECT_EQ(j["gpu"]["kv_cache"]["total"].get<uint64_t>(), 3422553088u);
  EXPECT_EQ(j["gpu"]["expert_cache"]["slots"].get<int64_t>(), 1294);
  EXPECT_EQ(j["gpu"]["workspace"]["staging"].get<uint64_t>(), 2u * 3059712);
  EXPECT_EQ(j["gpu"]["total"].get<uint64_t>(), p->gpu_total());
  EXPECT_EQ(j["options"]["kv_type"], "q8_0");
}

// Sliding-window layers (gpt-oss's even layers) keep a ring of their window
// plus one micro-batch, in whole pages, never more than the context; the
// other attention layers the whole context; DeltaNet layers nothing.
TEST(MemoryPlanTest, SlidingWindowLayersKeepARingOfWindowPlusMicroBatch) {
  model::HyperParams hp = Qwen3_30B_A3B();
  hp.n_layer = 4;
  hp.layers = model::LayerSpecs(*model::FindArch("gpt-oss"), 4);
  for (int il = 0; il < 4; ++il) hp.layers[il].sliding_window = il % 2 == 0 ? 128 : 0;
  const GpuKvLayout l = GpuKvLayoutOf(hp, 131072, 512);
  EXPECT_EQ(l.n_pages, 512);
  EXPECT_EQ(l.layer_pages, (std::vector<int64_t>{3, 512, 3, 512}));  // ceil(639 / 256) = 3
  EXPECT_EQ(l.ring_sizes, (std::vector<int64_t>{3}));
  EXPECT_EQ(l.positions_total(), 2 * 768 + 2 * 131072);
  EXPECT_EQ(l.Bytes(100), uint64_t{2 * 768 + 2 * 131072} * 100 + 2 * 512 * 4);
  // A context shorter than the ring: the layer keeps the context, no ring.
  const GpuKvLayout s = GpuKvLayoutOf(hp, 300, 512);
  EXPECT_EQ(s.layer_pages, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_TRUE(s.ring_sizes.empty());
  EXPECT_EQ(s.Bytes(100), uint64_t{8 * 256} * 100 + 2 * 4);
  // The plan counts it.
  ModelShape shape = Qwen3Shape();
  for (int il = 0; il < shape.hp.n_layer; ++il) {
    shape.hp.layers[il].sliding_window = il % 2 == 0 ? 128 : 0;
  }
  PlanOptions o = Mission();
  o.n_ctx = 131072;
  o.kv_type = KvType::kF16;
  auto p = PlanMemory(shape, o);
  ASSERT_TRUE(p.ok()) << p.status();
  const uint64_t row = 2 * 2 * 4 * 128;  // f16 K + V, 4 KV heads x 128
  EXPECT_EQ(p->kv_cache, GpuKvLayoutOf(shape.hp, 131072, o.n_ubatch).Bytes(row));
  EXPECT_NE(FormatPlanTable(*p).find("24 sliding-window layers x 768"), std::string::npos)
      << FormatPlanTable(*p);
}

}  // namespace
}  // namespace moesplit::plan
