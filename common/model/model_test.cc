// Architecture descriptions, hyper-parameter parsing and load-time
// validation, on hand-written models (GgufWriter) and the fixture models.
#include "common/model/model.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/model/arch.h"
#include "common/model/expert.h"
#include "common/model/sequence_state.h"
#include "common/model/testing/tiny_model.h"

namespace moesplit::model {
namespace {

using ::testing::HasSubstr;
using testing::MakeTinyModel;
using testing::TinyModelOptions;

std::string Fixture(const std::string& name) {
  return std::string(MOESPLIT_FIXTURES_DIR) + "/models/" + name;
}

TEST(ArchTest, DescriptionsExist) {
  ASSERT_NE(FindArch("qwen3moe"), nullptr);
  ASSERT_NE(FindArch("qwen2moe"), nullptr);
  EXPECT_EQ(FindArch("llama"), nullptr);
  EXPECT_TRUE(FindArch("qwen3moe")->router.default_norm_topk);
  EXPECT_FALSE(FindArch("qwen2moe")->router.default_norm_topk);
  EXPECT_THAT(SupportedArchNames(), HasSubstr("qwen2moe"));
}

TEST(ModelTest, ParsesFixtureGptOss) {
  auto m = Model::Open(Fixture("gptoss-tiny-mxfp4_moe.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, "gpt-oss");
  EXPECT_EQ(hp.router_scoring, RouterSpec::Scoring::kSoftmaxSelected);
  EXPECT_EQ(ExpertFfnName(hp.expert_ffn), "swiglu_oai(alpha=1.702,limit=7)");
  // attention.sliding_window = 8, no pattern key: the even layers slide.
  ASSERT_EQ(hp.layers.size(), 4u);
  EXPECT_EQ(hp.layers[0].sliding_window, 8);
  EXPECT_EQ(hp.layers[1].sliding_window, 0);
  EXPECT_EQ(hp.layers[2].sliding_window, 8);
  EXPECT_EQ(hp.layers[3].sliding_window, 0);
  EXPECT_EQ(hp.rope.scaling, RopeScaling::kYarn);
  EXPECT_FLOAT_EQ(hp.rope.freq_scale, 1.0f / 32);
  EXPECT_EQ(hp.rope.n_ctx_orig, 4096);
  EXPECT_NEAR(hp.rope.attn_factor, 1.0f, 1e-6f);
  const LayerWeights& L = (*m)->layer(1);
  EXPECT_EQ(L.sinks.size(), 4u);
  EXPECT_EQ(L.bo.size(), 128u);
  EXPECT_EQ(L.router_b.size(), 8u);
  EXPECT_EQ(L.gate_exps_b.size(), 8u * 128);
  EXPECT_EQ(L.down_exps_b.size(), 8u * 128);
  EXPECT_EQ(L.gate_exps.type, GgmlType::kMXFP4);
}

TEST(ModelTest, ParsesFixtureQwen3Moe) {
  auto m = Model::Open(Fixture("qwen3moe-tiny-f16.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, "qwen3moe");
  EXPECT_EQ(hp.n_embd, 256);
  EXPECT_EQ(hp.n_layer, 4);
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.head_dim_k, 64);
  EXPECT_EQ(hp.head_dim_v, 64);
  EXPECT_EQ(hp.n_expert, 8);
  EXPECT_EQ(hp.n_expert_used, 2);
  EXPECT_EQ(hp.n_ff_exp, 256);
  EXPECT_EQ(hp.n_vocab, 499);
  EXPECT_EQ(hp.n_ctx_train, 4096);
  EXPECT_TRUE(hp.norm_topk);
  EXPECT_EQ(hp.rope.n_rot, 64);
  EXPECT_FLOAT_EQ(hp.rope.freq_base, 1e6f);
  EXPECT_EQ(hp.rope.scaling, RopeScaling::kNone);
  EXPECT_NEAR(hp.rms_eps, 1e-6f, 1e-12);
  const LayerWeights& l = (*m)->layer(3);
  EXPECT_EQ(l.q_norm.size(), 64u);
  EXPECT_TRUE(l.bq.empty());
  EXPECT_FALSE(l.has_shared_expert());
  EXPECT_EQ(l.gate_exps.n_expert, 8);
  EXPECT_EQ(l.gate_exps.n_in, 256);
  EXPECT_EQ(l.down_exps.n_in, 256);
  EXPECT_EQ(l.gate_exps.type, GgmlType::kF16);
  EXPECT_FALSE((*m)->tied_output());
  const GgufTensor* q = (*m)->tensor(TensorId::kAttnQ, 2);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->name, "blk.2.attn_q.weight");
  EXPECT_EQ((*m)->tensor(TensorId::kAttnQBias, 2), nullptr);
  EXPECT_EQ((*m)->tensor(TensorId::kAttnQ, 4), nullptr);
  ASSERT_NE((*m)->tensor(TensorId::kOutput), nullptr);
  EXPECT_EQ((*m)->tensor(TensorId::kOutput)->name, "output.weight");
}

TEST(ModelTest, ParsesFixtureQwen2MoeAndSummarises) {
  auto m = Model::Open(Fixture("qwen2moe-tiny-q8_0.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, "qwen2moe");
  EXPECT_FALSE(hp.norm_topk);
  EXPECT_EQ(hp.n_ff_shexp, 512);
  const LayerWeights& l = (*m)->layer(0);
  EXPECT_EQ(l.bq.size(), 256u);
  EXPECT_EQ(l.bk.size(), 128u);
  EXPECT_TRUE(l.has_shared_expert());
  EXPECT_EQ(l.shexp_gate_inp.n_rows, 1);
  EXPECT_EQ(l.shexp_down.n_cols, 512);

  const ModelSummary s = (*m)->Summary();
  EXPECT_EQ(s.architecture, "qwen2moe");
  EXPECT_EQ(s.n_tensors, 3 + 4 * 17);
  EXPECT_EQ(s.tensors_by_type.at("Q8_0"), 2 + 4 * 10);
  EXPECT_EQ(s.tensors_by_type.at("F32"), 1 + 4 * 7);
  // 3 expert tensors of 8 x 256 rows of 256 Q8_0 values (8 blocks of 34 bytes).
  EXPECT_EQ(s.bytes_by_role.at("routed_experts"), 4u * 3 * 8 * 256 * 8 * 34);
  // output.weight: 499 rows of 8 blocks.
  EXPECT_EQ(s.bytes_by_role.at("output"), 499u * 8 * 34);
  EXPECT_EQ(s.bytes_by_role.at("embeddings"), 499u * 8 * 34);
  uint64_t total = 0;
  for (const auto& [role, bytes] : s.bytes_by_role) total += bytes;
  uint64_t tensors = 0;
  for (const GgufTensor& t : (*m)->file().tensors()) tensors += t.n_bytes;
  EXPECT_EQ(total, tensors);
}

// A file with NextN/MTP blocks (Qwen3.6 MTP files, GLM-4.5+, GLM-4.7-Flash):
// the trunk is block_count - nextn_predict_layers layers; the NextN blocks
// are checked, bound and kept apart (a full-attention mixer even where the
// layer-interval rule says DeltaNet, routed experts, the nextn.* tensors).
TEST(ModelTest, NextNBlocksAreKeptApartFromTheTrunk) {
  auto m = Model::Open(Fixture("qwen35moe-mtp-tiny-f16.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.n_layer, 4);
  EXPECT_EQ((*m)->n_layer(), 4);
  ASSERT_EQ(hp.layers.size(), 4u);
  EXPECT_EQ(hp.n_attention_layers(), 1);  // the trunk's block 3 only
  ASSERT_EQ(hp.n_nextn(), 1);
  ASSERT_EQ((*m)->n_nextn(), 1);
  // Block 4: (4 + 1) % 4 != 0 would make it DeltaNet in the trunk.
  EXPECT_EQ(hp.nextn_layers[0].mixer, MixerKind::kGatedAttention);
  EXPECT_EQ(hp.nextn_layers[0].ffn, FfnKind::kMoe);
  EXPECT_TRUE(hp.nextn_layers[0].nextn);
  const LayerWeights& b = (*m)->nextn_layer(0);
  EXPECT_EQ(b.nextn_eh_proj.n_rows, hp.n_embd);
  EXPECT_EQ(b.nextn_eh_proj.n_cols, 2 * hp.n_embd);
  EXPECT_EQ(b.nextn_enorm.size(), static_cast<size_t>(hp.n_embd));
  EXPECT_EQ(b.nextn_hnorm.size(), static_cast<size_t>(hp.n_embd));
  EXPECT_EQ(b.nextn_shared_head_norm.size(), static_cast<size_t>(hp.n_embd));
  EXPECT_NE(b.wq.data, nullptr);
  EXPECT_NE(b.gate_exps.data, nullptr);
  EXPECT_TRUE(b.has_shared_expert());
  EXPECT_EQ(b.ssm_qkv.data, nullptr);
  EXPECT_NE((*m)->tensor(TensorId::kNextnEhProj, 4), nullptr);
  EXPECT_EQ((*m)->tensor(TensorId::kNextnEhProj, 3), nullptr);
  // No trunk layer has NextN tensors.
  for (int il = 0; il < (*m)->n_layer(); ++il) {
    EXPECT_EQ((*m)->layer(il).nextn_eh_proj.data, nullptr) << il;
  }
  // Their bytes are reported apart; every tensor of the file is counted once.
  const ModelSummary s = (*m)->Summary();
  EXPECT_EQ(s.bytes_by_role.at("nextn"),
            [&] {
              uint64_t n = 0;
              for (const GgufTensor& t : (*m)->file().tensors()) {
                if (t.name.rfind("blk.4.", 0) == 0) n += t.n_bytes;
              }
              return n;
            }());
  uint64_t total = 0, tensors = 0;
  for (const auto& [role, bytes] : s.bytes_by_role) total += bytes;
  for (const GgufTensor& t : (*m)->file().tensors()) tensors += t.n_bytes;
  EXPECT_EQ(total, tensors);
  // The per-sequence state is the trunk's: three DeltaNet layers, one KV layer.
  auto state = SequenceState::Create(hp, 16);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->n_layer(), 4);
  // The in-process expert store holds the trunk's experts only.
  EXPECT_EQ(ExpertStore(*m).n_layer(), 4);
}

// The hyper-parameters of `fixture`'s metadata with `drop` left out and
// `set` (u32 values) replacing or adding keys.
absl::StatusOr<HyperParams> EditedHyperParams(const std::string& fixture,
                                              const std::set<std::string>& drop,
                                              const std::map<std::string, uint32_t>& set) {
  auto src = GgufFile::Open(Fixture(fixture));
  if (!src.ok()) return src.status();
  GgufWriter w;
  for (const auto& [key, value] : (*src)->metadata()) {
    if (!drop.count(key) && !set.count(key)) w.Set(key, value);
  }
  for (const auto& [key, value] : set) w.SetU32(key, value);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : ::testing::TempDir(), "/edited-", fixture);
  if (absl::Status st = w.Write(path); !st.ok()) return st;
  auto f = GgufFile::Open(path);
  if (!f.ok()) return f.status();
  const std::string arch = *(*f)->GetString("general.architecture");
  return ParseHyperParams(**f, *FindArch(arch));
}

// GLM-4.7-Flash files (deepseek2) omit expert_gating_func: llama.cpp infers
// sigmoid from 47 or 48 trunk blocks and 154880 tokens, softmax otherwise.
TEST(ArchTest, DeepSeek2GatingInferredAsLlamaCppDoes) {
  const std::string flash = "glm47flash-tiny-f16.gguf";
  const std::set<std::string> drop = {"deepseek2.expert_gating_func"};
  using S = RouterSpec::Scoring;
  struct Case {
    uint32_t block_count, nextn, vocab;
    S want;
  } cases[] = {
      {48, 1, 154880, S::kSigmoid},   // GLM-4.7-Flash: 47 trunk + 1 NextN
      {48, 0, 154880, S::kSigmoid},   // 48 trunk blocks
      {49, 1, 154880, S::kSigmoid},
      {49, 0, 154880, S::kSoftmax},   // 49 trunk blocks
      {48, 1, 154881, S::kSoftmax},
      {5, 1, 505, S::kSoftmax},       // DeepSeek-V2's default
  };
  for (const Case& c : cases) {
    auto hp = EditedHyperParams(flash, drop,
                                {{"deepseek2.block_count", c.block_count},
                                 {"deepseek2.nextn_predict_layers", c.nextn},
                                 {"deepseek2.vocab_size", c.vocab}});
    ASSERT_TRUE(hp.ok()) << hp.status();
    EXPECT_EQ(hp->router_scoring, c.want) << c.block_count << " " << c.nextn << " " << c.vocab;
    EXPECT_EQ(hp->n_layer, c.block_count - c.nextn);
  }
  // The tokenizer's token count stands in for a missing vocab_size.
  auto hp = EditedHyperParams(flash, {"deepseek2.expert_gating_func", "deepseek2.vocab_size"},
                              {{"deepseek2.block_count", 48}});
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->router_scoring, S::kSoftmax);  // 505 tokens
  // Written explicitly, the key wins.
  hp = EditedHyperParams(flash, {}, {{"deepseek2.block_count", 49},
                                     {"deepseek2.nextn_predict_layers", 0}});
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->router_scoring, S::kSigmoid);
}

TEST(ModelTest, FilesWithoutNextNBlocksHaveNone) {
  auto m = Model::Open(Fixture("qwen35moe-tiny-f16.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->n_nextn(), 0);
  EXPECT_EQ((*m)->Summary().bytes_by_role.count("nextn"), 0u);
}

// minimax-m2: one QK-norm over each whole projection, a sigmoid router with
// the selection bias, normalised weights, no shared expert, untied output.
TEST(ModelTest, ParsesFixtureMiniMaxM2) {
  auto m = Model::Open(Fixture("minimaxm2-tiny-f16.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, "minimax-m2");
  EXPECT_TRUE(hp.qk_norm_whole);
  EXPECT_EQ(hp.router_scoring, RouterSpec::Scoring::kSigmoid);
  EXPECT_TRUE(hp.norm_topk);
  EXPECT_FLOAT_EQ(hp.expert_weights_scale, 1.0f);
  EXPECT_EQ(hp.n_expert, 16);
  EXPECT_EQ(hp.n_expert_used, 4);
  EXPECT_EQ(hp.n_ff_exp, 128);
  EXPECT_EQ(hp.rope.n_rot, 32);
  EXPECT_FALSE(hp.rope.norm_style);
  EXPECT_FLOAT_EQ(hp.rope.freq_base, 5e6f);
  EXPECT_FALSE((*m)->tied_output());
  for (int il = 0; il < (*m)->n_layer(); ++il) {
    const LayerWeights& L = (*m)->layer(il);
    EXPECT_EQ(L.q_norm.size(), 256u);  // 4 heads x 64
    EXPECT_EQ(L.k_norm.size(), 128u);  // 2 heads x 64
    EXPECT_EQ(L.router_sel_b.size(), 16u);
    EXPECT_FALSE(L.has_shared_expert());
  }
}

// gemma4: the per-layer pattern of sliding and full layers from the bool
// array, each with its own KV heads, head size and RoPE; rope_freqs on the
// full layers' RoPE only; V from K where attn_v is absent; the fused gate/up
// experts as two views of their halves; the extra norms and scales bound.
TEST(ModelTest, ParsesFixtureGemma4PerLayerGeometry) {
  auto m = Model::Open(Fixture("gemma4-tiny-f16.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, "gemma4");
  ASSERT_EQ(hp.n_layer, 8);
  EXPECT_TRUE(hp.per_layer_geometry());
  EXPECT_TRUE(hp.unit_attention_scale);
  EXPECT_FLOAT_EQ(hp.attn_scale(), 1.0f);
  EXPECT_TRUE(hp.v_rms_norm);
  EXPECT_TRUE(hp.embed_scale_sqrt_d);
  EXPECT_FLOAT_EQ(hp.final_logit_softcap, 30.0f);
  EXPECT_EQ(hp.expert_ffn.activation, ExpertActivation::kGeGlu);
  EXPECT_EQ(hp.dense_activation, ExpertActivation::kGeGlu);
  EXPECT_EQ(ExpertFfnName(hp.expert_ffn), "geglu");
  EXPECT_TRUE(hp.norm_topk);
  EXPECT_TRUE((*m)->tied_output());
  for (int il = 0; il < 8; ++il) {
    const bool full = il % 4 == 3;  // SSSG SSSG
    const LayerWeights& L = (*m)->layer(il);
    EXPECT_EQ(hp.layers[il].sliding_window, full ? 0 : 6) << il;
    EXPECT_EQ(hp.kv_heads(il), full ? 1 : 2) << il;
    EXPECT_EQ(hp.head_k(il), full ? 128 : 64) << il;
    EXPECT_EQ(hp.head_v(il), full ? 128 : 64) << il;
    EXPECT_EQ(hp.rope_of(il).n_rot, full ? 128 : 64) << il;
    EXPECT_FLOAT_EQ(hp.rope_of(il).freq_base, full ? 1e6f : 1e4f) << il;
    EXPECT_EQ(hp.rope_of(il).freq_factors.size(), full ? 64u : 0u) << il;
    EXPECT_EQ(L.wv.data == nullptr, full) << il;  // V = K on the full layers
    EXPECT_EQ(L.attn_post_norm.size(), 128u);
    EXPECT_EQ(L.ffn_pre_norm_2.size(), 128u);
    EXPECT_EQ(L.ffn_post_norm_1.size(), 128u);
    EXPECT_EQ(L.ffn_post_norm_2.size(), 128u);
    EXPECT_EQ(L.ffn_post_norm.size(), 128u);
    EXPECT_EQ(L.router_scale.size(), 128u);
    EXPECT_EQ(L.down_exps_scale.size(), 16u);
    EXPECT_EQ(L.out_scale.size(), 1u);
    EXPECT_EQ(L.ffn_down.n_rows, 128);  // the dense MLP beside the experts (FFN 192)
    // The fused gate/up: the gate view on the first 64 rows of each expert,
    // the up view on the next 64, both striding over the whole expert.
    const GgufTensor* fused = (*m)->tensor(TensorId::kExpGateUp, il);
    ASSERT_NE(fused, nullptr);
    EXPECT_EQ(L.gate_up_exps.data, nullptr);
    EXPECT_EQ(L.gate_exps.data, fused->data);
    EXPECT_EQ(L.gate_exps.n_out, 64);
    EXPECT_EQ(L.up_exps.data, fused->data + 64 * L.gate_exps.row_bytes);
    EXPECT_EQ(L.up_exps.expert_bytes, 128 * L.up_exps.row_bytes);
    EXPECT_EQ(L.up_exps.Expert(3).data, fused->data + (3 * 128 + 64) * L.up_exps.row_bytes);
  }
  // The KV a sequence keeps: per position 2 x (64 + 64) on sliding layers,
  // 1 x (128 + 128) on full ones.
  EXPECT_EQ(SequenceState::KvValuesPerPosition(hp, 0), 256);
  EXPECT_EQ(SequenceState::KvValuesPerPosition(hp, 3), 256);
  auto st = SequenceState::Create(hp, 64);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ((*st)->k_stride(0), 128);
  EXPECT_EQ((*st)->k_stride(3), 128);
  EXPECT_EQ((*st)->v_stride(3), 128);
}

// A copy of a strided view (half a fused gate/up tensor) holds only its own
// rows, expert after expert.
TEST(ModelTest, CopiesHalfOfAFusedExpertTensor) {
  auto m = Model::Open(Fixture("gemma4-tiny-q8_0.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const ExpertTensorView& up = (*m)->layer(1).up_exps;
  const uint64_t own = up.row_bytes * up.n_out;
  ASSERT_EQ(CopiedExpertBytes(up, 2, 5, false), 3 * own);
  std::vector<uint8_t> buf(3 * own);
  const ExpertTensorView v = CopyExperts(up, 2, 5, false, buf.data());
  EXPECT_EQ(v.expert_bytes, own);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(std::memcmp(v.Expert(e).data, up.Expert(e + 2).data, own), 0) << e;
  }
}

// qwen3next: the fused ssm_ba is split into ssm_beta / ssm_alpha (per key
// head g: the beta rows of its value heads, then their alpha rows), value
// head h reads key head h / 2, plain NEOX RoPE; the legacy ssm_in file
// splits into the very rows the current layout stores.
TEST(ModelTest, ParsesFixtureQwen3NextAndSplitsItsFusedProjections) {
  auto m = Model::Open(Fixture("qwen3next-tiny-f16.gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, "qwen3next");
  EXPECT_TRUE(hp.ssm_grouped_heads);
  EXPECT_FALSE(hp.rope.multi_section);
  EXPECT_EQ(hp.rope.n_rot, 16);
  EXPECT_FLOAT_EQ(hp.rope.freq_base, 1e7f);
  EXPECT_EQ(hp.n_recurrent_layers(), 3);
  EXPECT_EQ(hp.layers[3].mixer, MixerKind::kGatedAttention);
  ASSERT_EQ(hp.ssm_n_k_heads, 2);
  ASSERT_EQ(hp.ssm_n_v_heads, 4);
  for (int h = 0; h < 4; ++h) EXPECT_EQ(hp.ssm_key_head(h), h / 2) << h;
  HyperParams modulo = hp;
  modulo.ssm_grouped_heads = false;  // qwen35moe's broadcast
  for (int h = 0; h < 4; ++h) EXPECT_EQ(modulo.ssm_key_head(h), h % 2) << h;

  const LayerWeights& L = (*m)->layer(0);
  const GgufTensor* ba = (*m)->tensor(TensorId::kSsmBa, 0);
  ASSERT_NE(ba, nullptr);
  EXPECT_EQ(L.ssm_ba.data, nullptr);
  ASSERT_EQ(L.ssm_beta.n_rows, 4);
  ASSERT_EQ(L.ssm_alpha.n_rows, 4);
  const uint64_t rb = L.ssm_beta.row_bytes;
  for (int h = 0; h < 4; ++h) {
    const uint8_t* beta_row = ba->data + ((h / 2) * 4 + h % 2) * rb;
    const uint8_t* alpha_row = ba->data + ((h / 2) * 4 + 2 + h % 2) * rb;
    EXPECT_EQ(std::memcmp(L.ssm_beta.data + h * rb, beta_row, rb), 0) << h;
    EXPECT_EQ(std::memcmp(L.ssm_alpha.data + h * rb, alpha_row, rb), 0) << h;
  }
  EXPECT_EQ(L.ssm_qkv.data, (*m)->tensor(TensorId::kSsmQkv, 0)->data);  // as stored

  auto legacy = Model::Open(Fixture("qwen3next-ssmin-tiny-f16.gguf"));
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  for (int il = 0; il < 3; ++il) {
    const LayerWeights& a = (*m)->layer(il);
    const LayerWeights& b = (*legacy)->layer(il);
    ASSERT_NE((*legacy)->tensor(TensorId::kSsmIn, il), nullptr);
    EXPECT_EQ(b.ssm_in.data, nullptr);
    for (auto [x, y] : {std::pair{a.ssm_qkv, b.ssm_qkv}, std::pair{a.ssm_z, b.ssm_z}}) {
      ASSERT_EQ(x.n_rows, y.n_rows) << il;
      ASSERT_EQ(x.row_bytes, y.row_bytes) << il;
      EXPECT_EQ(std::memcmp(x.data, y.data, x.n_rows * x.row_bytes), 0) << il;
    }
  }
}

TEST(ModelTest, Qwen3NextNeedsOneDeltaNetInputLayout) {
  TinyModelOptions o;
  o.arch = "qwen3next";
  o.n_layer = 4;
  auto good = MakeTinyModel(o);
  ASSERT_TRUE(good.ok()) << good.status();
  o.drop_tensors = {"blk.0.attn_qkv.weight"};
  auto half = MakeTinyModel(o);
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(half.status().message()), HasSubstr("blk.0.attn_qkv.weight"));
  o.drop_tensors = {"blk.2.attn_qkv.weight", "blk.2.attn_gate.weight"};  // DeltaNet: 0, 2
  auto none = MakeTinyModel(o);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("layer 2 needs either attn_qkv + attn_gate or ssm_in"));
}

// The i-quant files load, and their routed experts are in the file's type
// (the dot kernels with Q8_K activations of common/quant, issue #42).
TEST(ModelTest, IQuantFixturesLoad) {
  const std::pair<const char*, GgmlType> cases[] = {
      {"iq1_s", GgmlType::kIQ1_S},     {"iq1_m", GgmlType::kIQ1_M},     {"iq2_xxs", GgmlType::kIQ2_XXS},
      {"iq2_xs", GgmlType::kIQ2_XS},   {"iq2_m", GgmlType::kIQ2_S},     {"iq3_xxs", GgmlType::kIQ3_XXS},
      {"iq3_s", GgmlType::kIQ3_S}};
  for (const auto& [type, want] : cases) {
    const std::string name = std::string("qwen3moe-tiny-") + type + ".gguf";
    auto m = Model::Open(Fixture(name));
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    std::set<GgmlType> types;
    for (const GgufTensor& t : (*m)->file().tensors()) types.insert(t.type);
    EXPECT_TRUE(types.count(want)) << name;
  }
}

TEST(ModelTest, TiedOutputUsesEmbeddings) {
  TinyModelOptions o;
  o.tied_output = true;
  auto m = MakeTinyModel(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->tied_output());
  EXPECT_EQ((*m)->output().data, (*m)->token_embd().data);
  EXPECT_EQ((*m)->Summary().bytes_by_role.at("output"), 0u);
}

struct BadModelCase {
  std::string label;
  TinyModelOptions options;
  absl::StatusCode code;
  std::string message;  // substring of the error
};

using AddCase = std::function<void(std::string, std::function<void(TinyModelOptions*)>,
                                    std::string)>;

// Tensors missing, misshapen or of an unsupported type.
void AddTensorCases(const AddCase& add) {
  add("unsupported_arch", [](auto* o) { o->arch = "llama"; },
      "unsupported architecture 'llama'");
  add("q_shape", [](auto* o) { o->shape_overrides["blk.1.attn_q.weight"] = {64, 32}; },
      "'blk.1.attn_q.weight' has shape [64, 32], expected [64, 64]");
  add("expert_count_in_tensor",
      [](auto* o) { o->shape_overrides["blk.0.ffn_down_exps.weight"] = {32, 64, 3}; },
      "blk.0.ffn_down_exps.weight");
  add("router_shape", [](auto* o) { o->shape_overrides["blk.1.ffn_gate_inp.weight"] = {64, 5}; },
      "blk.1.ffn_gate_inp.weight");
  add("embd_width", [](auto* o) { o->shape_overrides["output.weight"] = {32, 40}; },
      "output.weight");
  add("missing_k_norm", [](auto* o) { o->drop_tensors.insert("blk.1.attn_k_norm.weight"); },
      "missing tensor 'blk.1.attn_k_norm.weight'");
  add("missing_embd", [](auto* o) { o->drop_tensors.insert("token_embd.weight"); },
      "token_embd.weight");
  add("unsupported_type",
      [](auto* o) { o->type_overrides["blk.0.attn_v.weight"] = GgmlType::kI32; },
      "blk.0.attn_v.weight");
  add("qwen2_missing_bias",
      [](auto* o) {
        o->arch = "qwen2moe";
        o->drop_tensors.insert("blk.0.attn_v.bias");
      },
      "blk.0.attn_v.bias");
  add("qwen2_shexp_shape",
      [](auto* o) {
        o->arch = "qwen2moe";
        o->shape_overrides["blk.1.ffn_up_shexp.weight"] = {64, 32};
      },
      "blk.1.ffn_up_shexp.weight");
}

// Hyper-parameters missing, of the wrong type or inconsistent.
void AddMetadataCases(const AddCase& add) {
  add("missing_key", [](auto* o) { o->drop_keys.insert("qwen3moe.expert_count"); },
      "qwen3moe.expert_count");
  add("missing_arch", [](auto* o) { o->drop_keys.insert("general.architecture"); },
      "general.architecture");
  add("heads_not_multiple", [](auto* o) { o->n_head_kv = 3; }, "head_count_kv 3");
  add("used_gt_experts",
      [](auto* o) {
        o->edit_metadata = [](GgufWriter* w) { w->SetU32("qwen3moe.expert_used_count", 9); };
      },
      "expert_used_count");
  add("zero_layers",
      [](auto* o) { o->edit_metadata = [](GgufWriter* w) { w->SetU32("qwen3moe.block_count", 0); }; },
      "block_count");
  // nextn_predict_layers counts blocks of block_count (2 here): at least
  // one must be left for the trunk.
  add("nextn_not_below_block_count",
      [](auto* o) {
        o->edit_metadata = [](GgufWriter* w) { w->SetU32("qwen3moe.nextn_predict_layers", 2); };
      },
      "'nextn_predict_layers' = 2 out of range [0, 1] (block_count 2");
  add("nextn_negative",
      [](auto* o) {
        o->edit_metadata = [](GgufWriter* w) { w->SetI32("qwen3moe.nextn_predict_layers", -1); };
      },
      "'nextn_predict_layers' = -1 out of range");
  // A NextN block without its own tensors (block 1 is the NextN block).
  add("nextn_without_eh_proj",
      [](auto* o) {
        o->edit_metadata = [](GgufWriter* w) { w->SetU32("qwen3moe.nextn_predict_layers", 1); };
      },
      "missing tensor 'blk.1.nextn.eh_proj.weight'");
  add("odd_rope_dims",
      [](auto* o) {
        o->edit_metadata = [](GgufWriter* w) { w->SetU32("qwen3moe.rope.dimension_count", 7); };
      },
      "rope.dimension_count");
  add("bad_rope_scaling",
      [](auto* o) {
        o->edit_metadata = [](GgufWriter* w) {
          w->SetString("qwen3moe.rope.scaling.type", "longrope");
        };
      },
      "unsupported rope.scaling.type 'longrope'");
  add("string_for_int",
      [](auto* o) {
        o->edit_metadata = [](GgufWriter* w) { w->SetString("qwen3moe.embedding_length", "64"); };
      },
      "embedding_length");
}

std::vector<BadModelCase> BadModelCases() {
  std::vector<BadModelCase> cases;
  const AddCase add = [&](std::string label, std::function<void(TinyModelOptions*)> edit,
                          std::string message) {
    TinyModelOptions o;
    edit(&o);
    cases.push_back({std::move(label), std::move(o), absl::StatusCode::kInvalidArgument,
                     std::move(message)});
  };
  AddTensorCases(add);
  AddMetadataCases(add);
  return cases;
}

class BadModelTest : public ::testing::TestWithParam<BadModelCase> {};

TEST_P(BadModelTest, LoadFailsNamingTheProblem) {
  const BadModelCase& c = GetParam();
  auto m = MakeTinyModel(c.options);
  ASSERT_FALSE(m.ok()) << c.label;
  EXPECT_EQ(m.status().code(), c.code) << c.label << ": " << m.status();
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(c.message)) << c.label;
}

INSTANTIATE_TEST_SUITE_P(Cases, BadModelTest, ::testing::ValuesIn(BadModelCases()),
                         [](const auto& info) { return info.param.label; });

TEST(HyperParamsTest, GoodTinyModelsLoad) {
  for (const char* arch : {"qwen3moe", "qwen2moe", "minimax-m2", "qwen3next"}) {
    TinyModelOptions o;
    o.arch = arch;
    auto m = MakeTinyModel(o);
    ASSERT_TRUE(m.ok()) << arch << ": " << m.status();
    EXPECT_EQ((*m)->hparams().n_vocab, o.n_vocab) << arch;
    EXPECT_EQ((*m)->n_layer(), o.n_layer) << arch;
  }
}

TEST(HyperParamsTest, DefaultsAndOverrides) {
  TinyModelOptions o;
  o.drop_keys = {"qwen3moe.attention.key_length", "qwen3moe.attention.value_length",
                 "qwen3moe.attention.head_count_kv", "qwen3moe.rope.freq_base",
                 "qwen3moe.expert_feed_forward_length"};
  o.n_head_kv = 4;  // the default when head_count_kv is absent
  o.edit_metadata = [](GgufWriter* w) {
    w->SetBool("qwen3moe.expert_weights_norm", false);
    // feed_forward_length / expert_used_count = 64 / 2 -> n_ff_exp 32
    w->SetU32("qwen3moe.feed_forward_length", 64);
  };
  auto m = MakeTinyModel(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.head_dim_k, 16);  // 64 / 4 heads
  EXPECT_EQ(hp.n_head_kv, 4);
  EXPECT_FLOAT_EQ(hp.rope.freq_base, 10000.0f);
  EXPECT_EQ(hp.n_ff_exp, 32);
  EXPECT_FALSE(hp.norm_topk);
}

TEST(HyperParamsTest, RopeScaling) {
  struct Case {
    std::string type;
    float factor;
    RopeScaling want;
    float freq_scale;
    float ext_factor;
  };
  for (const Case& c : {Case{"yarn", 4.0f, RopeScaling::kYarn, 0.25f, 1.0f},
                        Case{"linear", 2.0f, RopeScaling::kLinear, 0.5f, 0.0f},
                        Case{"none", 8.0f, RopeScaling::kNone, 1.0f, 0.0f}}) {
    TinyModelOptions o;
    o.edit_metadata = [&](GgufWriter* w) {
      w->SetString("qwen3moe.rope.scaling.type", c.type);
      w->SetF32("qwen3moe.rope.scaling.factor", c.factor);
      w->SetU32("qwen3moe.rope.scaling.original_context_length", 128);
    };
    auto m = MakeTinyModel(o);
    ASSERT_TRUE(m.ok()) << c.type << ": " << m.status();
    const RopeParams& r = (*m)->hparams().rope;
    EXPECT_EQ(r.scaling, c.want) << c.type;
    EXPECT_FLOAT_EQ(r.freq_scale, c.freq_scale) << c.type;
    EXPECT_FLOAT_EQ(r.ext_factor, c.ext_factor) << c.type;
    EXPECT_EQ(r.n_ctx_orig, 128) << c.type;
  }
}

TEST(HyperParamsTest, PerLayerArrays) {
  TinyModelOptions o;
  o.edit_metadata = [](GgufWriter* w) {
    w->Set("qwen3moe.attention.head_count_kv",
           GgufValue::IntArray(GgufValueType::kInt32, {2, 2}));
  };
  auto m = MakeTinyModel(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->hparams().n_head_kv, 2);

  o.edit_metadata = [](GgufWriter* w) {
    w->Set("qwen3moe.attention.head_count_kv",
           GgufValue::IntArray(GgufValueType::kInt32, {2, 4}));
  };
  m = MakeTinyModel(o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("per-layer values differ"));
}

}  // namespace
}  // namespace moesplit::model
