#include "services/cli/test_model.h"

#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/thread_pool.h"
#include "common/gguf/gguf.h"
#include "common/model/expert.h"
#include "common/model/forward.h"
#include "common/model/model.h"
#include "common/model/sequence_state.h"
#include "common/quant/quant.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::cli {
namespace {

class TestModelTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("moesplit_test_model_", getpid(), "_",
                        testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every name the help lists is a preset, and an unknown one is refused with
// that list.
TEST(PresetNamesTest, EachNameIsAPresetAndTheErrorListsThem) {
  for (const std::string& name : PresetNames()) {
    EXPECT_TRUE(PresetSpec(name).ok()) << name;
  }
  auto bad = PresetSpec("qwen9-1t");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& name : PresetNames()) {
    EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr(name));
  }
}

TEST_F(TestModelTest, Qwen3_30B_PresetPlan) {
  auto spec = PresetSpec("qwen3-30b-a3b");
  ASSERT_TRUE(spec.ok());
  auto plan = PlanTensors(*spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->size(), 3u + 48u * 12u);
  uint64_t bytes = 0;
  for (const PlannedTensor& p : *plan) {
    int64_t n = 1;
    for (int64_t x : p.ne) n *= x;
    bytes += *RowBytes(p.type, n);
    if (p.name == "blk.7.ffn_gate_exps.weight") {
      EXPECT_EQ(p.ne, (std::vector<int64_t>{2048, 768, 128}));
      EXPECT_EQ(p.type, GgmlType::kQ4_K);
    }
    if (p.name == "blk.8.ffn_down_exps.weight") {
      EXPECT_EQ(p.ne, (std::vector<int64_t>{768, 2048, 128}));
      EXPECT_EQ(p.type, GgmlType::kQ6_K);
    }
    if (p.name == "blk.0.attn_q.weight") {
      EXPECT_EQ(p.ne, (std::vector<int64_t>{2048, 4096}));
    }
    if (p.name == "blk.0.attn_k.weight") {
      EXPECT_EQ(p.ne, (std::vector<int64_t>{2048, 512}));
    }
    if (p.name == "blk.0.attn_output.weight") {
      EXPECT_EQ(p.ne, (std::vector<int64_t>{4096, 2048}));
    }
    if (p.name == "blk.0.attn_k_norm.weight") {
      EXPECT_EQ(p.ne, (std::vector<int64_t>{128}));
      EXPECT_TRUE(p.ones);
      EXPECT_EQ(p.type, GgmlType::kF32);
    }
    if (p.name == "output.weight") {
      EXPECT_EQ(p.type, GgmlType::kQ6_K);
    }
  }
  // Qwen3-30B-A3B's routed experts alone are ~16.5 GiB in Q4_K_M.
  EXPECT_GT(bytes, 16.0 * (1 << 30));
  EXPECT_LT(bytes, 18.5 * (1 << 30));
}

// Same shape and mix as llama.cpp's fixture -> same names, shapes, types and
// metadata keys.
// Qwen3.5/3.6-35B-A3B as published: 40 layers, 3 gated DeltaNet for every
// gated attention layer, and the tensors llama.cpp's qwen35moe loads.
TEST_F(TestModelTest, Qwen35_35B_PresetPlan) {
  auto spec = PresetSpec("qwen3.5-35b-a3b");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->arch, "qwen35moe");
  EXPECT_EQ(spec->n_vocab, 248320);
  const model::HyperParams hp = ToHyperParams(*spec);
  EXPECT_EQ(hp.n_recurrent_layers(), 30);
  EXPECT_EQ(hp.n_attention_layers(), 10);
  EXPECT_EQ(hp.layers[3].mixer, model::MixerKind::kGatedAttention);
  EXPECT_EQ(hp.layers[4].mixer, model::MixerKind::kGatedDeltaNet);
  auto plan = PlanTensors(*spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int qkv = 0, q = 0;
  for (const PlannedTensor& t : *plan) {
    if (t.name == "blk.0.attn_qkv.weight") {
      EXPECT_EQ(t.ne, (std::vector<int64_t>{2048, 8192}));  // 2 x 16 x 128 + 32 x 128
    }
    if (t.name == "blk.3.attn_q.weight") {
      EXPECT_EQ(t.ne, (std::vector<int64_t>{2048, 8192}));  // 16 heads x 256 x (q, gate)
    }
    if (t.name == "blk.0.ssm_conv1d.weight") {
      EXPECT_EQ(t.ne, (std::vector<int64_t>{4, 8192}));
      EXPECT_EQ(t.type, GgmlType::kF32);
    }
    if (t.name == "blk.0.ssm_a") {
      EXPECT_EQ(t.type, GgmlType::kF32);
      EXPECT_EQ(t.constant, -1.0f);
    }
    if (t.name == "blk.0.ffn_down_exps.weight") {
      EXPECT_EQ(t.ne, (std::vector<int64_t>{512, 2048, 256}));
    }
    qkv += absl::EndsWith(t.name, ".attn_qkv.weight");
    q += absl::EndsWith(t.name, ".attn_q.weight");
  }
  EXPECT_EQ(qkv, 30);
  EXPECT_EQ(q, 10);

  // A small file of the same kind loads and runs.
  spec->n_layer = 4;
  spec->n_expert = 8;
  spec->n_vocab = 512;
  spec->type = "Q8_0";
  const std::string path = Path("q35.gguf");
  ASSERT_TRUE(WriteTestModel(*spec, path).ok());
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->hparams().n_recurrent_layers(), 3);
  EXPECT_EQ((*m)->hparams().rope.n_rot, 64);
  EXPECT_EQ((*m)->hparams().rope.sections, (std::array<int, 4>{11, 11, 10, 0}));
  EXPECT_EQ((*m)->layer(0).ssm_a, std::vector<float>(32, -1.0f));
  model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
  model::Forward forward(*m, &experts, nullptr);
  auto state = model::SequenceState::Create((*m)->hparams(), 16);
  ASSERT_TRUE(state.ok());
  std::vector<float> logits;
  ASSERT_TRUE(forward.Eval({1, 2, 3, 4}, state->get(), model::LogitsMode::kLast, &logits).ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

// MiniMax-M2 (230B-A10B) and Qwen3-Next-80B-A3B as published: the totals
// and active parameters of their model cards, the tensors llama.cpp loads
// (minimax-m2: the whole-projection QK-norm and exp_probs_b, no shared
// expert; qwen3next: attn_qkv + attn_gate and the fused ssm_ba), and a
// small file of each kind loads and runs.
TEST_F(TestModelTest, MiniMaxM2AndQwen3NextPresetsPlanAndRun) {
  struct Want {
    const char* preset;
    const char* arch;
    double total_b, active_b;  // billions of parameters (active: without the embeddings
                               // and the output head, as the model cards count)
  };
  for (const Want& w : {Want{"minimax-m2", "minimax-m2", 230, 10},
                        Want{"qwen3-next-80b-a3b", "qwen3next", 80, 3}}) {
    auto spec = PresetSpec(w.preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->arch, w.arch);
    auto plan = PlanTensors(*spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(ValidateSpec(*spec).ok()) << w.preset << ": " << ValidateSpec(*spec);
    double total = 0, routed = 0, vocab = 0;
    std::map<std::string, std::vector<int64_t>> ne;
    for (const PlannedTensor& t : *plan) {
      double n = 1;
      for (int64_t x : t.ne) n *= x;
      total += n;
      if (t.role == model::TensorRole::kRoutedExpert) routed += n;
      if (t.role == model::TensorRole::kEmbeddings || t.role == model::TensorRole::kOutput) {
        vocab += n;
      }
      if (absl::StartsWith(t.name, "blk.0.") || absl::StartsWith(t.name, "blk.3.")) {
        ne[t.name] = t.ne;
      }
      EXPECT_FALSE(absl::EndsWith(t.name, ".ssm_in.weight")) << t.name;
    }
    const double active = total - vocab - routed +
                          routed * spec->n_expert_used / static_cast<double>(spec->n_expert);
    EXPECT_NEAR(total / 1e9, w.total_b, 0.05 * w.total_b) << w.preset;
    EXPECT_NEAR(active / 1e9, w.active_b, 0.15 * w.active_b) << w.preset;
    if (spec->arch == "minimax-m2") {
      EXPECT_EQ(ne["blk.0.attn_q.weight"], (std::vector<int64_t>{3072, 6144}));  // 48 x 128
      EXPECT_EQ(ne["blk.0.attn_k.weight"], (std::vector<int64_t>{3072, 1024}));  // 8 x 128
      EXPECT_EQ(ne["blk.0.attn_q_norm.weight"], (std::vector<int64_t>{6144}));
      EXPECT_EQ(ne["blk.0.attn_k_norm.weight"], (std::vector<int64_t>{1024}));
      EXPECT_EQ(ne["blk.0.exp_probs_b.bias"], (std::vector<int64_t>{256}));
      EXPECT_EQ(ne["blk.0.ffn_gate_exps.weight"], (std::vector<int64_t>{3072, 1536, 256}));
      EXPECT_EQ(ne.count("blk.0.ffn_gate_shexp.weight"), 0u);
    } else {
      EXPECT_EQ(ne["blk.0.attn_qkv.weight"], (std::vector<int64_t>{2048, 8192}));
      EXPECT_EQ(ne["blk.0.attn_gate.weight"], (std::vector<int64_t>{2048, 4096}));
      EXPECT_EQ(ne["blk.0.ssm_ba.weight"], (std::vector<int64_t>{2048, 64}));  // 32 x (b, a)
      EXPECT_EQ(ne["blk.3.attn_q.weight"], (std::vector<int64_t>{2048, 8192}));
      EXPECT_EQ(ne["blk.0.ffn_gate_exps.weight"], (std::vector<int64_t>{2048, 512, 512}));
      EXPECT_EQ(ne["blk.0.ffn_gate_shexp.weight"], (std::vector<int64_t>{2048, 512}));
    }

    // A small file of the same kind loads and runs.
    spec->n_layer = 4;
    spec->n_expert = 16;
    spec->n_vocab = 512;
    spec->type = "Q8_0";
    const std::string path = Path(absl::StrCat(w.arch, ".gguf"));
    ASSERT_TRUE(WriteTestModel(*spec, path).ok());
    auto m = model::Model::Open(path);
    ASSERT_TRUE(m.ok()) << m.status();
    const model::HyperParams& hp = (*m)->hparams();
    EXPECT_EQ(hp.rope.n_rot, 64);
    EXPECT_FALSE(hp.rope.multi_section);
    if (spec->arch == "minimax-m2") {
      EXPECT_TRUE(hp.qk_norm_whole);
      EXPECT_EQ(hp.router_scoring, model::RouterSpec::Scoring::kSigmoid);
      EXPECT_TRUE(hp.norm_topk);
    } else {
      EXPECT_TRUE(hp.ssm_grouped_heads);
      EXPECT_EQ(hp.n_recurrent_layers(), 3);
      EXPECT_EQ((*m)->layer(0).ssm_beta.n_rows, 32);
    }
    model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
    model::Forward forward(*m, &experts, nullptr);
    auto state = model::SequenceState::Create(hp, 16);
    ASSERT_TRUE(state.ok());
    std::vector<float> logits;
    ASSERT_TRUE(forward.Eval({1, 2, 3, 4}, state->get(), model::LogitsMode::kLast, &logits).ok());
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
}

// Nemotron-3 Nano / Super as published (NVIDIA's configs): the parameter
// counts of the model cards (31.6B total, ~3.5B active with the
// embeddings; 120B / 12B), the layer kinds of the hybrid pattern, relu^2
// experts without a gate, LatentMoE on Super; a small file of the same kind
// loads and runs.
TEST_F(TestModelTest, NemotronPresetsPlanAndRun) {
  struct Want {
    const char* preset;
    double total_b, active_b;  // without the embeddings and the output head
    int mamba, attention, moe;
  };
  for (const Want& w : {Want{"nemotron-3-nano-30b-a3b", 31.6, 2.9, 23, 6, 23},
                        Want{"nemotron-3-super-120b-a12b", 120.7, 11.7, 40, 8, 40}}) {
    auto spec = PresetSpec(w.preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->arch, "nemotron_h_moe");
    EXPECT_TRUE(ValidateSpec(*spec).ok()) << w.preset << ": " << ValidateSpec(*spec);
    const model::HyperParams hp = ToHyperParams(*spec);
    int mamba = 0, attention = 0, moe = 0;
    for (const model::LayerSpec& l : hp.layers) {
      mamba += l.mixer == model::MixerKind::kMamba2;
      attention += l.mixer == model::MixerKind::kAttention;
      moe += l.ffn == model::FfnKind::kMoe;
    }
    EXPECT_EQ(mamba, w.mamba) << w.preset;
    EXPECT_EQ(attention, w.attention) << w.preset;
    EXPECT_EQ(moe, w.moe) << w.preset;
    auto plan = PlanTensors(*spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    double total = 0, routed = 0, vocab = 0;
    std::map<std::string, std::vector<int64_t>> ne;
    for (const PlannedTensor& t : *plan) {
      double n = 1;
      for (int64_t x : t.ne) n *= x;
      total += n;
      if (t.role == model::TensorRole::kRoutedExpert) routed += n;
      if (t.role == model::TensorRole::kEmbeddings || t.role == model::TensorRole::kOutput) {
        vocab += n;
      }
      ne[t.name] = t.ne;
    }
    const double active = total - vocab - routed +
                          routed * spec->n_expert_used / static_cast<double>(spec->n_expert);
    EXPECT_NEAR(total / 1e9, w.total_b, 0.02 * w.total_b) << w.preset;
    EXPECT_NEAR(active / 1e9, w.active_b, 0.05 * w.active_b) << w.preset;
    const int64_t d = spec->n_embd, inner = spec->ssm_n_v_heads * spec->ssm_head;
    const int64_t xbc = inner + 2 * spec->ssm_n_k_heads * spec->ssm_state;
    EXPECT_EQ(ne["blk.0.ssm_in.weight"], (std::vector<int64_t>{d, inner + xbc + spec->ssm_n_v_heads}));
    EXPECT_EQ(ne["blk.0.ssm_conv1d.weight"], (std::vector<int64_t>{4, xbc}));
    EXPECT_EQ(ne["blk.0.ssm_norm.weight"], (std::vector<int64_t>{inner / 8, 8}));
    const int64_t de = spec->moe_latent > 0 ? spec->moe_latent : d;
    EXPECT_EQ(ne["blk.1.ffn_up_exps.weight"], (std::vector<int64_t>{de, spec->n_ff_exp, spec->n_expert}));
    EXPECT_EQ(ne.count("blk.1.ffn_gate_exps.weight"), 0u);
    EXPECT_EQ(ne.count("blk.1.ffn_gate_shexp.weight"), 0u);
    EXPECT_EQ(ne.count("blk.1.ffn_latent_down.weight"), spec->moe_latent > 0 ? 1u : 0u);
    const size_t first_attention = spec->layer_kinds.find('*');
    EXPECT_EQ(ne.count(absl::StrCat("blk.", first_attention, ".attn_q.weight")), 1u);
    EXPECT_EQ(ne.count(absl::StrCat("blk.", first_attention, ".attn_norm.weight")), 1u);

    // A small file of the same kind loads and runs.
    spec->layer_kinds = "MEM*E";
    spec->n_layer = 5;
    spec->n_expert = 16;
    spec->n_expert_used = 4;
    spec->n_vocab = 512;
    spec->type = "Q8_0";
    const std::string path = Path(absl::StrCat(w.preset, ".gguf"));
    ASSERT_TRUE(WriteTestModel(*spec, path).ok());
    auto m = model::Model::Open(path);
    ASSERT_TRUE(m.ok()) << m.status();
    const model::HyperParams& mh = (*m)->hparams();
    EXPECT_EQ(mh.rope.n_rot, 0);
    EXPECT_EQ(mh.n_recurrent_layers(), 2);
    EXPECT_EQ(mh.moe_latent, spec->moe_latent);
    EXPECT_EQ(model::ExpertFfnName(mh.expert_ffn), "relu_sq");
    model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
    model::Forward forward(*m, &experts, nullptr);
    auto state = model::SequenceState::Create(mh, 16);
    ASSERT_TRUE(state.ok());
    std::vector<float> logits;
    ASSERT_TRUE(forward.Eval({1, 2, 3, 4}, state->get(), model::LogitsMode::kLast, &logits).ok());
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
}

// A nemotron_h_moe test model of the oracle fixture's shape has llama.cpp's
// tensors (names, shapes) and per-layer metadata arrays.
TEST_F(TestModelTest, NemotronMatchesTheLlamaCppFixture) {
  const std::string fixture = absl::StrCat(MOESPLIT_FIXTURES_DIR, "/models/nemotronh-tiny-f16.gguf");
  auto ref = GgufFile::Open(fixture);
  ASSERT_TRUE(ref.ok()) << ref.status();
  TestModelSpec spec;
  spec.arch = "nemotron_h_moe";
  spec.n_layer = 8;
  spec.n_embd = 128;
  spec.n_head = 8;
  spec.n_head_kv = 2;
  spec.head_dim = 32;
  spec.n_expert = 16;
  spec.n_expert_used = 4;
  spec.n_ff_exp = spec.n_ff = 64;
  spec.n_ff_shexp = 128;
  spec.ssm_n_k_heads = 2;
  spec.ssm_n_v_heads = 8;
  spec.ssm_head = 32;
  spec.ssm_state = 32;
  spec.n_expert_groups = 4;
  spec.n_group_used = 2;
  spec.expert_weights_scale = 2.5;
  spec.n_vocab = 499;
  spec.type = "F16";
  spec.threads = 2;
  const std::string path = Path("nemotronh.gguf");
  ASSERT_TRUE(WriteTestModel(spec, path).ok());
  auto ours = GgufFile::Open(path);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ((*ours)->tensors().size(), (*ref)->tensors().size());
  for (const GgufTensor& r : (*ref)->tensors()) {
    const GgufTensor* t = (*ours)->FindTensor(r.name);
    ASSERT_NE(t, nullptr) << r.name;
    EXPECT_EQ(t->ne, r.ne) << r.name;
  }
  for (const char* key : {"nemotron_h_moe.attention.head_count_kv",
                          "nemotron_h_moe.feed_forward_length"}) {
    const GgufValue* a = (*ours)->Find(key);
    const GgufValue* b = (*ref)->Find(key);
    ASSERT_NE(a, nullptr) << key;
    ASSERT_NE(b, nullptr) << key;
    std::vector<int64_t> va = a->ints(), vb = b->ints();
    for (uint64_t u : a->uints()) va.push_back(static_cast<int64_t>(u));
    for (uint64_t u : b->uints()) vb.push_back(static_cast<int64_t>(u));
    EXPECT_EQ(va, vb) << key;
  }
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->hparams().n_expert_groups, 4);
}

// Gemma-4-26B-A4B: the preset's hyper-parameters are those llama.cpp's
// converter wrote into ggml-vocab-gemma-4.gguf (the real model's metadata),
// layer by layer; the totals of the model card (25.2B, 3.8B active); the
// tensors llama.cpp loads (no attn_v on the full layers, fused gate/up, a
// scale per expert, tied output); a small file of the kind loads and runs.
TEST_F(TestModelTest, Gemma4PresetIsThePublishedShapeAndRuns) {
  auto spec = PresetSpec("gemma-4-26b-a4b");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateSpec(*spec).ok()) << ValidateSpec(*spec);
  auto real = GgufFile::Open(absl::StrCat(MOESPLIT_FIXTURES_DIR, "/vocab/ggml-vocab-gemma-4.gguf"));
  ASSERT_TRUE(real.ok()) << real.status();
  auto want = model::ParseHyperParams(**real, *model::FindArch("gemma4"));
  ASSERT_TRUE(want.ok()) << want.status();
  const model::HyperParams got = ToHyperParams(*spec);
  EXPECT_EQ(got.n_embd, want->n_embd);
  EXPECT_EQ(got.n_layer, want->n_layer);
  EXPECT_EQ(got.n_ctx_train, want->n_ctx_train);
  EXPECT_EQ(got.n_head, want->n_head);
  EXPECT_EQ(got.n_expert, want->n_expert);
  EXPECT_EQ(got.n_expert_used, want->n_expert_used);
  EXPECT_EQ(got.n_ff, want->n_ff);
  EXPECT_EQ(got.n_ff_exp, want->n_ff_exp);
  EXPECT_FLOAT_EQ(got.rope.freq_base, want->rope.freq_base);
  EXPECT_FLOAT_EQ(got.rope_swa.freq_base, want->rope_swa.freq_base);
  ASSERT_EQ(got.layers.size(), want->layers.size());
  for (int il = 0; il < static_cast<int>(got.layers.size()); ++il) {
    EXPECT_EQ(got.layers[il].sliding_window, want->layers[il].sliding_window) << il;
    EXPECT_EQ(got.kv_heads(il), want->kv_heads(il)) << il;
    EXPECT_EQ(got.head_k(il), want->head_k(il)) << il;
    EXPECT_EQ(got.head_v(il), want->head_v(il)) << il;
    EXPECT_EQ(got.rope_of(il).n_rot, want->rope_of(il).n_rot) << il;
  }
  auto plan = PlanTensors(*spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  double total = 0, routed = 0, embd = 0;
  std::map<std::string, std::vector<int64_t>> ne;
  for (const PlannedTensor& t : *plan) {
    double n = 1;
    for (int64_t x : t.ne) n *= x;
    total += n;
    if (t.role == model::TensorRole::kRoutedExpert) routed += n;
    if (t.role == model::TensorRole::kEmbeddings) embd += n;
    if (absl::StartsWith(t.name, "blk.0.") || absl::StartsWith(t.name, "blk.5.") ||
        !absl::StartsWith(t.name, "blk.")) {
      ne[t.name] = t.ne;
    }
  }
  // Gemma's card counts the (tied) embeddings among the active parameters.
  const double active = total - routed + routed * 8 / 128.0;
  EXPECT_NEAR(embd / 1e9, 0.74, 0.01);
  EXPECT_NEAR(total / 1e9, 25.2, 0.05 * 25.2);
  EXPECT_NEAR(active / 1e9, 3.8, 0.15 * 3.8);
  EXPECT_EQ(ne.count("output.weight"), 0u);  // tied
  EXPECT_EQ(ne["rope_freqs.weight"], (std::vector<int64_t>{256}));
  EXPECT_EQ(ne["blk.0.attn_q.weight"], (std::vector<int64_t>{2816, 4096}));  // 16 x 256
  EXPECT_EQ(ne["blk.0.attn_k.weight"], (std::vector<int64_t>{2816, 2048}));  // 8 x 256
  EXPECT_EQ(ne["blk.0.attn_v.weight"], (std::vector<int64_t>{2816, 2048}));
  EXPECT_EQ(ne["blk.5.attn_q.weight"], (std::vector<int64_t>{2816, 8192}));  // 16 x 512
  EXPECT_EQ(ne["blk.5.attn_k.weight"], (std::vector<int64_t>{2816, 1024}));  // 2 x 512
  EXPECT_EQ(ne.count("blk.5.attn_v.weight"), 0u);                            // V = K
  EXPECT_EQ(ne["blk.5.attn_q_norm.weight"], (std::vector<int64_t>{512}));
  EXPECT_EQ(ne["blk.0.ffn_gate_up_exps.weight"], (std::vector<int64_t>{2816, 1408, 128}));
  EXPECT_EQ(ne["blk.0.ffn_down_exps.weight"], (std::vector<int64_t>{704, 2816, 128}));
  EXPECT_EQ(ne["blk.0.ffn_down_exps.scale"], (std::vector<int64_t>{128}));
  EXPECT_EQ(ne["blk.0.ffn_gate.weight"], (std::vector<int64_t>{2816, 2112}));
  EXPECT_EQ(ne.count("blk.0.ffn_gate_exps.weight"), 0u);

  // A small file of the same kind loads and runs (every third layer full).
  spec->n_layer = 3;
  spec->swa_period = 3;
  spec->n_embd = 256;
  spec->n_head = 4;
  spec->head_dim = 128;
  spec->head_dim_swa = 64;
  spec->n_head_kv = 1;
  spec->n_head_kv_swa = 2;
  spec->sliding_window = 4;
  spec->n_expert = 16;
  spec->n_ff_exp = 64;
  spec->n_ff = 96;
  spec->n_vocab = 512;
  spec->n_ctx = 64;
  spec->type = "Q8_0";
  const std::string path = Path("gemma4.gguf");
  ASSERT_TRUE(WriteTestModel(*spec, path).ok());
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const model::HyperParams& hp = (*m)->hparams();
  EXPECT_TRUE((*m)->tied_output());
  EXPECT_EQ(hp.layers[0].sliding_window, 4);
  EXPECT_EQ(hp.layers[2].sliding_window, 0);
  EXPECT_EQ(hp.kv_heads(0), 2);
  EXPECT_EQ(hp.head_k(2), 128);
  EXPECT_EQ(hp.rope.freq_factors.size(), 64u);
  EXPECT_EQ(hp.rope.freq_factors[15], 1.0f);
  EXPECT_EQ(hp.rope.freq_factors[16], 1e30f);
  EXPECT_FLOAT_EQ(hp.final_logit_softcap, 30.0f);
  model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
  model::Forward forward(*m, &experts, nullptr);
  auto state = model::SequenceState::Create(hp, 16);
  ASSERT_TRUE(state.ok());
  std::vector<float> logits;
  ASSERT_TRUE(forward.Eval({1, 2, 3, 4, 5, 6}, state->get(), model::LogitsMode::kLast, &logits).ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x) && std::abs(x) <= 30.0f);
}

// gpt-oss-20b / 120b as published: biased attention with sinks, the even
// layers on a 128-token window, YaRN, MXFP4 experts with biases, and the
// harmony vocabulary; a small file of the same kind loads and runs.
TEST_F(TestModelTest, GptOssPresetsPlanAndRun) {
  for (const char* preset : {"gpt-oss-20b", "gpt-oss-120b"}) {
    auto spec = PresetSpec(preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->arch, "gpt-oss");
    EXPECT_EQ(spec->n_layer, std::string(preset) == "gpt-oss-20b" ? 24 : 36);
    auto plan = PlanTensors(*spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const PlannedTensor& t : *plan) {
      if (t.name == "blk.0.ffn_gate_exps.weight") {
        EXPECT_EQ(t.ne, (std::vector<int64_t>{2880, 2880, spec->n_expert}));
        EXPECT_EQ(t.type, GgmlType::kMXFP4);
      }
      if (t.name == "blk.0.ffn_down_exps.bias") {
        EXPECT_EQ(t.ne, (std::vector<int64_t>{2880, spec->n_expert}));
        EXPECT_EQ(t.type, GgmlType::kF32);
      }
      if (t.name == "blk.0.attn_q.weight") {
        EXPECT_EQ(t.ne, (std::vector<int64_t>{2880, 4096}));  // 64 heads x 64
        EXPECT_EQ(t.type, GgmlType::kQ8_0);
      }
      if (t.name == "blk.0.attn_sinks.weight") {
        EXPECT_EQ(t.ne, (std::vector<int64_t>{64}));
        EXPECT_EQ(t.type, GgmlType::kF32);
      }
    }
  }
  auto spec = PresetSpec("gpt-oss-20b");
  ASSERT_TRUE(spec.ok());
  spec->n_layer = 2;
  spec->n_embd = 256;
  spec->n_head = 8;
  spec->n_head_kv = 2;
  spec->n_expert = 8;
  spec->n_ff_exp = 256;
  spec->n_vocab = 512;
  spec->sliding_window = 4;
  const std::string path = Path("oss.gguf");
  ASSERT_TRUE(WriteTestModel(*spec, path).ok());
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const model::HyperParams& hp = (*m)->hparams();
  EXPECT_EQ(hp.layers[0].sliding_window, 4);
  EXPECT_EQ(hp.layers[1].sliding_window, 0);
  EXPECT_EQ(hp.rope.scaling, model::RopeScaling::kYarn);
  EXPECT_EQ(model::ExpertFfnName(hp.expert_ffn), "swiglu_oai(alpha=1.702,limit=7)");
  EXPECT_EQ((*m)->layer(0).gate_exps.type, GgmlType::kMXFP4);
  // What ToHyperParams says is what the file holds.
  const model::HyperParams planned = ToHyperParams(*spec);
  for (int il = 0; il < 2; ++il) {
    EXPECT_EQ(planned.layers[il].sliding_window, hp.layers[il].sliding_window) << il;
  }
  EXPECT_EQ(planned.rope.freq_scale, hp.rope.freq_scale);
  EXPECT_EQ(planned.rope.n_ctx_orig, hp.rope.n_ctx_orig);
  auto tok = Tokenizer::FromGguf((*m)->file());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->pre_type(), "gpt-4o");
  model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
  model::Forward forward(*m, &experts, nullptr);
  auto state = model::SequenceState::Create(hp, 32);
  ASSERT_TRUE(state.ok());
  std::vector<float> logits;
  // Past the window: positions 0 .. 9.
  ASSERT_TRUE(
      forward.Eval({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, state->get(), model::LogitsMode::kLast, &logits)
          .ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

TEST_F(TestModelTest, MatchesTheLlamaCppFixtures) {
  for (const std::string arch : {"qwen3moe", "qwen2moe"}) {
    const std::string fixture = absl::StrCat(MOESPLIT_FIXTURES_DIR, "/models/",
                                             arch, "-tiny-q4_k_m.gguf");
    auto ref = GgufFile::Open(fixture);
    ASSERT_TRUE(ref.ok()) << ref.status();
    TestModelSpec spec;
    spec.arch = arch;
    spec.n_vocab = 499;
    spec.threads = 2;
    const std::string path = Path(arch + ".gguf");
    ASSERT_TRUE(WriteTestModel(spec, path).ok());
    auto ours = GgufFile::Open(path);
    ASSERT_TRUE(ours.ok()) << ours.status();
    ASSERT_EQ((*ours)->tensors().size(), (*ref)->tensors().size()) << arch;
    for (const GgufTensor& r : (*ref)->tensors()) {
      const GgufTensor* t = (*ours)->FindTensor(r.name);
      ASSERT_NE(t, nullptr) << r.name;
      EXPECT_EQ(t->ne, r.ne) << r.name;
      EXPECT_EQ(t->n_dims, r.n_dims) << r.name;
      EXPECT_EQ(GgmlTypeName(t->type), GgmlTypeName(r.type)) << r.name;
    }
    for (const auto& [key, value] : (*ref)->metadata()) {
      const GgufValue* v = (*ours)->Find(key);
      ASSERT_NE(v, nullptr) << key;
      EXPECT_EQ(v->type(), value.type()) << key;
      EXPECT_EQ(v->element_type(), value.element_type()) << key;
      if (key == "general.name" || value.type() == GgufValueType::kArray) {
        continue;
      }
      if (value.is_float()) {
        EXPECT_DOUBLE_EQ(*v->AsFloat(), *value.AsFloat()) << key;
      } else if (value.type() == GgufValueType::kString) {
        EXPECT_EQ(*v->AsString(), *value.AsString()) << key;
      } else if (key.find("token_id") == std::string::npos) {
        EXPECT_EQ(*v->AsInt(), *value.AsInt()) << key;
      }
    }
    EXPECT_EQ((*(*ours)->GetArray("tokenizer.ggml.tokens"))->strings().size(),
              499u);
  }
}

// A deepseek2 test model of the fixture's shape has llama.cpp's tensors
// (names, shapes, Q8_0 types) and metadata (keys, types, values).
TEST_F(TestModelTest, DeepSeek2MatchesTheLlamaCppFixture) {
  const std::string fixture =
      absl::StrCat(MOESPLIT_FIXTURES_DIR, "/models/deepseek2-tiny-q8_0.gguf");
  auto ref = GgufFile::Open(fixture);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto spec = PresetSpec("deepseek-v3");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->n_layer = 3;
  spec->n_embd = 128;
  spec->n_head = 4;
  spec->q_lora_rank = 64;
  spec->kv_lora_rank = 64;
  spec->head_dim = 48;
  spec->n_rot = 16;
  spec->head_dim_v = 32;
  spec->n_dense_lead = 1;
  spec->n_ff = 256;
  spec->n_expert = 16;
  spec->n_expert_used = 4;
  spec->n_ff_exp = 64;
  spec->n_expert_groups = 4;
  spec->n_group_used = 2;
  spec->rope_freq_base = 1e6;
  spec->rope_scaling_factor = 0;  // the fixture has no YaRN
  spec->n_vocab = 499;
  spec->n_ctx = 4096;
  spec->type = "Q8_0";
  spec->threads = 2;
  const std::string path = Path("ds2.gguf");
  ASSERT_TRUE(WriteTestModel(*spec, path).ok());
  auto ours = GgufFile::Open(path);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ((*ours)->tensors().size(), (*ref)->tensors().size());
  for (const GgufTensor& r : (*ref)->tensors()) {
    const GgufTensor* t = (*ours)->FindTensor(r.name);
    ASSERT_NE(t, nullptr) << r.name;
    EXPECT_EQ(t->ne, r.ne) << r.name;
    EXPECT_EQ(GgmlTypeName(t->type), GgmlTypeName(r.type)) << r.name;
  }
  for (const auto& [key, value] : (*ref)->metadata()) {
    if (!absl::StartsWith(key, "deepseek2.")) continue;
    const GgufValue* v = (*ours)->Find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->type(), value.type()) << key;
    if (value.is_float()) {
      EXPECT_NEAR(*v->AsFloat(), *value.AsFloat(), 1e-9) << key;
    } else if (value.type() != GgufValueType::kBool) {
      EXPECT_EQ(*v->AsInt(), *value.AsInt()) << key;
    }
  }
  // It loads as what ToHyperParams planned, and runs.
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const model::HyperParams& hp = (*m)->hparams();
  const model::HyperParams planned = ToHyperParams(*spec);
  EXPECT_EQ(hp.head_dim_k, planned.head_dim_k);
  EXPECT_EQ(hp.n_ff_shexp, planned.n_ff_shexp);
  EXPECT_EQ(hp.router_scoring, planned.router_scoring);
  EXPECT_EQ(hp.layers[0].ffn, model::FfnKind::kDense);
  EXPECT_EQ(model::SequenceState::KvBytesPerPosition(hp),
            model::SequenceState::KvBytesPerPosition(planned));
  model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
  model::Forward forward(*m, &experts, nullptr);
  auto state = model::SequenceState::Create(hp, 16);
  ASSERT_TRUE(state.ok());
  std::vector<float> logits;
  ASSERT_TRUE(forward.Eval({1, 2, 3}, state->get(), model::LogitsMode::kLast, &logits).ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

// A Q4_K_M deepseek2 model whose per-head attn_k_b fell back to Q5_0 (32
// columns) and whose attn_v_b is a K-quant: the CPU forward's packed copies
// (both sliced per head) give the GGUF rows' bits, prefill and decode, on 2
// threads and on 1 and 3 (a decode step splits MLA's one KV head's query
// heads over the threads).
TEST_F(TestModelTest, DeepSeek2PackedHeadMatricesGiveTheSameBits) {
  auto spec = PresetSpec("deepseek-v3");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->n_layer = 2;
  spec->n_embd = 256;
  spec->n_head = 4;
  spec->q_lora_rank = 0;
  spec->kv_lora_rank = 256;
  spec->head_dim = 48;
  spec->n_rot = 16;
  spec->head_dim_v = 32;
  spec->n_dense_lead = 1;
  spec->n_ff = 256;
  spec->n_expert = 8;
  spec->n_expert_used = 2;
  spec->n_ff_exp = 256;
  spec->n_expert_groups = 1;
  spec->n_group_used = 1;
  spec->n_vocab = 300;
  spec->n_ctx = 256;
  spec->type = "Q4_K_M";
  spec->threads = 2;
  const std::string path = Path("ds2-q4km.gguf");
  ASSERT_TRUE(WriteTestModel(*spec, path).ok());
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)->layer(1).wk_b.type, GgmlType::kQ5_0);
  ThreadPool pool(2);
  model::InProcessExperts experts(model::ExpertStore(*m), &pool);
  ThreadPool pool3(3);
  model::Forward plain(*m, &experts, &pool, /*pack_dense=*/false);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back((i * 37) % 300);
  for (ThreadPool* p : {&pool, static_cast<ThreadPool*>(nullptr), &pool3}) {
    const int threads = p == nullptr ? 1 : p->size();
    model::Forward packed(*m, &experts, p, /*pack_dense=*/true);
    auto s1 = model::SequenceState::Create((*m)->hparams(), 32);
    auto s2 = model::SequenceState::Create((*m)->hparams(), 32);
    ASSERT_TRUE(s1.ok() && s2.ok());
    std::vector<float> a, b;
    ASSERT_TRUE(packed.Eval(prompt, s1->get(), model::LogitsMode::kAll, &a).ok());
    ASSERT_TRUE(plain.Eval(prompt, s2->get(), model::LogitsMode::kAll, &b).ok());
    EXPECT_EQ(a, b) << threads << " threads";
    for (int32_t t : {5, 77, 299}) {
      const int32_t one[1] = {t};
      ASSERT_TRUE(packed.Eval(one, s1->get(), model::LogitsMode::kLast, &a).ok());
      ASSERT_TRUE(plain.Eval(one, s2->get(), model::LogitsMode::kLast, &b).ok());
      EXPECT_EQ(a, b) << t << ", " << threads << " threads";
    }
  }
}

// The deepseek2 presets as published: MLA with a 576-value latent KV row,
// dense leading layers, YaRN with the mscale correction.
TEST_F(TestModelTest, DeepSeek2PresetsPlan) {
  struct Want {
    const char* preset;
    int64_t layers, heads, experts, dense, vocab;
    bool q_lora;
  };
  for (const Want& w : {Want{"deepseek-v3", 61, 128, 256, 3, 129280, true},
                        Want{"kimi-k2", 61, 64, 384, 1, 163840, true},
                        Want{"deepseek-v2-lite", 27, 16, 64, 1, 102400, false}}) {
    auto spec = PresetSpec(w.preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->arch, "deepseek2");
    EXPECT_EQ(spec->n_layer, w.layers);
    EXPECT_EQ(spec->n_head, w.heads);
    EXPECT_EQ(spec->n_expert, w.experts);
    EXPECT_EQ(spec->n_vocab, w.vocab);
    const model::HyperParams hp = ToHyperParams(*spec);
    EXPECT_EQ(hp.head_dim_k, 576) << w.preset;  // kv_lora 512 + rope 64
    EXPECT_EQ(model::SequenceState::KvBytesPerPosition(hp), uint64_t(w.layers) * 576 * 2);
    EXPECT_EQ(hp.n_moe_layers(), w.layers - w.dense);
    auto plan = PlanTensors(*spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Every preset's file can be written (Q4_K_M: DeepSeek-V3's 18432-column
    // dense ffn_down is Q6_K).
    EXPECT_TRUE(ValidateSpec(*spec).ok()) << w.preset << ": " << ValidateSpec(*spec);
    bool q_a = false, q = false, dense_ffn = false;
    for (const PlannedTensor& t : *plan) {
      q_a = q_a || t.name == "blk.0.attn_q_a.weight";
      q = q || t.name == "blk.0.attn_q.weight";
      dense_ffn = dense_ffn || t.name == absl::StrCat("blk.", w.dense - 1, ".ffn_gate.weight");
      EXPECT_NE(t.name, absl::StrCat("blk.", w.dense - 1, ".ffn_gate_exps.weight"));
      if (t.name == "blk.5.attn_k_b.weight") {
        EXPECT_EQ(t.ne, (std::vector<int64_t>{128, 512, w.heads}));
      }
    }
    EXPECT_EQ(q_a, w.q_lora) << w.preset;
    EXPECT_EQ(q, !w.q_lora) << w.preset;
    EXPECT_TRUE(dense_ffn) << w.preset;
  }
  // DeepSeek-V3's YaRN: factor 40, mscale_all_dim 1 -> kq_scale =
  // (1 + 0.1 ln 40)^2 / sqrt(192).
  const model::HyperParams v3 = ToHyperParams(*PresetSpec("deepseek-v3"));
  const double m = 1 + 0.1 * std::log(40.0);
  EXPECT_NEAR(v3.attn_scale(), m * m / std::sqrt(192.0), 1e-6);
}

// The GLM presets and the MTP ones: real shapes plus one NextN block after
// the trunk, which the plan counts apart and the trunk's specs leave out.
TEST_F(TestModelTest, GlmAndMtpPresetsPlan) {
  struct Want {
    const char* preset;
    const char* arch;
    int64_t layers, experts, top_k, dense, vocab, attention_layers;
    uint64_t kv_bytes_per_position;  // f16, the trunk's attention layers
  };
  for (const Want& w :
       {Want{"glm-4.5-air", "glm4moe", 46, 128, 8, 1, 151552, 46, 46u * 8 * 256 * 2},
        Want{"glm-4.7", "glm4moe", 92, 160, 8, 3, 151552, 92, 92u * 8 * 256 * 2},
        Want{"glm-4.7-flash", "deepseek2", 47, 64, 4, 1, 154880, 47, 47u * 576 * 2},
        Want{"qwen3.6-35b-a3b-mtp", "qwen35moe", 40, 256, 8, 0, 248320, 10,
             10u * 2 * 512 * 2}}) {
    auto spec = PresetSpec(w.preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->arch, w.arch);
    EXPECT_EQ(spec->n_layer, w.layers);
    EXPECT_EQ(spec->n_nextn, 1);
    EXPECT_EQ(spec->n_expert, w.experts);
    EXPECT_EQ(spec->n_expert_used, w.top_k);
    EXPECT_EQ(spec->n_vocab, w.vocab);
    const model::HyperParams hp = ToHyperParams(*spec);
    EXPECT_EQ(hp.n_layer, w.layers);
    ASSERT_EQ(hp.n_nextn(), 1);
    EXPECT_TRUE(model::IsAttention(hp.nextn_layers[0].mixer)) << w.preset;
    EXPECT_EQ(hp.n_attention_layers(), w.attention_layers) << w.preset;
    EXPECT_EQ(hp.n_moe_layers(), w.layers - w.dense) << w.preset;
    EXPECT_EQ(model::SequenceState::KvBytesPerPosition(hp), w.kv_bytes_per_position)
        << w.preset;
    auto plan = PlanTensors(*spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(ValidateSpec(*spec).ok()) << w.preset << ": " << ValidateSpec(*spec);
    const std::string nextn = absl::StrCat("blk.", w.layers, ".");
    bool eh_proj = false, nextn_experts = false, nextn_attn = false;
    for (const PlannedTensor& t : *plan) {
      eh_proj = eh_proj || t.name == nextn + "nextn.eh_proj.weight";
      nextn_experts = nextn_experts || t.name == nextn + "ffn_gate_exps.weight";
      nextn_attn = nextn_attn || t.name == nextn + "attn_q.weight" ||
                   t.name == nextn + "attn_q_a.weight";
      EXPECT_FALSE(absl::StartsWith(t.name, absl::StrCat("blk.", w.layers + 1, ".")));
      // The MTP block is full attention although (40 + 1) % 4 != 0.
      EXPECT_NE(t.name, nextn + "ssm_out.weight");
    }
    EXPECT_TRUE(eh_proj && nextn_experts && nextn_attn) << w.preset;
  }
}

// Written small, the GLM presets give the fixtures' tensors (names, shapes,
// types) and hyper-parameters, and load with their NextN block kept aside.
TEST_F(TestModelTest, GlmPresetsMatchTheLlamaCppFixtures) {
  struct Case {
    const char* preset;
    const char* fixture;
  };
  for (const Case& c : {Case{"glm-4.7", "glm4moe-tiny-q8_0"},
                        Case{"glm-4.7-flash", "glm47flash-tiny-q8_0"}}) {
    auto ref = GgufFile::Open(absl::StrCat(MOESPLIT_FIXTURES_DIR, "/models/", c.fixture, ".gguf"));
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto spec = PresetSpec(c.preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const bool mla = spec->arch == "deepseek2";
    spec->n_layer = 4;
    spec->n_embd = 128;
    spec->n_head = 4;
    spec->n_head_kv = mla ? 1 : 2;
    spec->head_dim = 64;
    spec->n_rot = mla ? 16 : 32;
    if (mla) {
      spec->q_lora_rank = 64;
      spec->kv_lora_rank = 64;
      spec->head_dim_v = 64;
    }
    spec->n_dense_lead = 1;
    spec->n_ff = 256;
    spec->n_expert = 16;
    spec->n_expert_used = 4;
    spec->n_ff_exp = 64;
    spec->n_vocab = 505;
    spec->n_ctx = 4096;
    spec->type = "Q8_0";
    spec->threads = 2;
    const std::string path = Path(absl::StrCat(c.fixture, ".gguf"));
    ASSERT_TRUE(WriteTestModel(*spec, path).ok());
    auto ours = GgufFile::Open(path);
    ASSERT_TRUE(ours.ok()) << ours.status();
    for (const GgufTensor& r : (*ref)->tensors()) {
      const GgufTensor* t = (*ours)->FindTensor(r.name);
      if (t == nullptr) {
        // The NextN block's optional own embeddings and head.
        EXPECT_TRUE(absl::StrContains(r.name, "nextn.embed_tokens") ||
                    absl::StrContains(r.name, "nextn.shared_head_head"))
            << c.fixture << ": " << r.name;
        continue;
      }
      EXPECT_EQ(t->ne, r.ne) << r.name;
      EXPECT_EQ(GgmlTypeName(t->type), GgmlTypeName(r.type)) << c.fixture << ": " << r.name;
    }
    for (const GgufTensor& t : (*ours)->tensors()) {
      EXPECT_NE((*ref)->FindTensor(t.name), nullptr) << c.fixture << ": " << t.name;
    }
    const std::string prefix = absl::StrCat(spec->arch, ".");
    for (const auto& [key, value] : (*ref)->metadata()) {
      if (!absl::StartsWith(key, prefix) || key == prefix + "expert_gating_func") continue;
      const GgufValue* v = (*ours)->Find(key);
      ASSERT_NE(v, nullptr) << c.fixture << ": " << key;
      if (value.is_float()) {
        EXPECT_NEAR(*v->AsFloat(), *value.AsFloat(), 1e-6) << key;
      } else if (value.type() == GgufValueType::kBool) {
        EXPECT_EQ(*v->AsBool(), *value.AsBool()) << key;
      } else {
        EXPECT_EQ(*v->AsInt(), *value.AsInt()) << c.fixture << ": " << key;
      }
    }
    auto m = model::Model::Open(path);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->n_layer(), 4);
    EXPECT_EQ((*m)->n_nextn(), 1);
    EXPECT_EQ((*m)->hparams().router_scoring, model::RouterSpec::Scoring::kSigmoid);
  }
}

TEST_F(TestModelTest, BytesDependOnSeedNotThreads) {
  TestModelSpec spec;
  spec.n_layer = 1;
  spec.n_vocab = 300;
  spec.n_ff_exp = 1024;
  spec.n_expert = 32;  // 8 Mi elements per expert tensor: several chunks
  spec.threads = 1;
  ASSERT_TRUE(WriteTestModel(spec, Path("a.gguf")).ok());
  spec.threads = 3;
  ASSERT_TRUE(WriteTestModel(spec, Path("b.gguf")).ok());
  spec.seed = 2;
  ASSERT_TRUE(WriteTestModel(spec, Path("c.gguf")).ok());
  const std::string a = ReadAll(Path("a.gguf"));
  EXPECT_GT(a.size(), 8u << 20);
  EXPECT_EQ(a, ReadAll(Path("b.gguf")));
  EXPECT_NE(a, ReadAll(Path("c.gguf")));
  EXPECT_FALSE(std::filesystem::exists(Path("a.gguf") + ".tmp-" +
                                       std::to_string(getpid())));
}

// Weights have the documented statistics; norms are exactly 1.
TEST_F(TestModelTest, WeightStatistics) {
  TestModelSpec spec;
  spec.n_layer = 2;
  spec.n_vocab = 300;
  ASSERT_TRUE(WriteTestModel(spec, Path("m.gguf")).ok());
  auto f = GgufFile::Open(Path("m.gguf"));
  ASSERT_TRUE(f.ok());
  struct Want {
    const char* name;
    double std;
  };
  for (const Want& w : {Want{"blk.1.attn_q.weight", 1 / 16.0},
                        Want{"blk.0.ffn_down_exps.weight", 1 / 16.0},
                        Want{"token_embd.weight", 1.0},
                        Want{"blk.1.ffn_gate_inp.weight", 1 / 16.0},
                        Want{"blk.0.attn_norm.weight", -1},
                        Want{"blk.1.attn_k_norm.weight", -1}}) {
    const GgufTensor* t = (*f)->FindTensor(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    std::vector<float> v(t->n_elements());
    ASSERT_TRUE(quant::DequantizeRow(t->type, t->data, v.data(), v.size()).ok());
    double sum = 0, sq = 0;
    for (float x : v) {
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double mean = sum / v.size();
    const double sd = std::sqrt(sq / v.size() - mean * mean);
    if (w.std < 0) {
      for (float x : v) ASSERT_EQ(x, 1.0f) << w.name;
    } else {
      EXPECT_NEAR(sd, w.std, 0.25 * w.std) << w.name;
      EXPECT_NEAR(mean, 0, 0.1 * w.std) << w.name;
    }
  }
}

// Output rows of unused and unprintable byte tokens are 20x smaller.
TEST_F(TestModelTest, UnusedTokensGetSmallOutputRows) {
  TestModelSpec spec;
  spec.n_layer = 1;
  spec.n_vocab = 1024;
  ASSERT_TRUE(WriteTestModel(spec, Path("m.gguf")).ok());
  auto vocab = MakeTestVocab(1024);
  ASSERT_TRUE(vocab.ok());
  auto f = GgufFile::Open(Path("m.gguf"));
  ASSERT_TRUE(f.ok());
  const GgufTensor* out = (*f)->FindTensor("output.weight");
  ASSERT_NE(out, nullptr);
  std::vector<float> row(out->ne[0]);
  int unused = 0;
  for (int64_t r = 0; r < out->ne[1]; ++r) {
    ASSERT_TRUE(quant::DequantizeRow(out->type, out->data + r * out->row_bytes(),
                                     row.data(), row.size())
                    .ok());
    double sq = 0;
    for (float x : row) sq += static_cast<double>(x) * x;
    const double sd = std::sqrt(sq / row.size());
    const bool printable_byte = r == '\n' || (r >= 0x20 && r < 0x7f);
    if (vocab->types[r] == TokenType::kUnused || (r < 256 && !printable_byte)) {
      ++unused;
      EXPECT_LT(sd, 0.125 / 8) << "row " << r;
    } else {
      EXPECT_GT(sd, 0.125 / 4) << "row " << r;  // block scales vary 0.5-1.5x
    }
  }
  EXPECT_GT(unused, 10 + 256 - 96);
}

// The engine loads every supported file type and its logits are finite and
// not constant.
TEST_F(TestModelTest, EngineRunsEveryFileType) {
  for (const std::string type :
       {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K",
        "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M",
        "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4_MOE", "Q3_K", "Q4_K", "Q5_K", "IQ1_S",
        "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S",
        "IQ3_M", "TQ1_0", "TQ2_0", "UD-IQ1_S"}) {
    for (const std::string arch : {"qwen3moe", "qwen2moe"}) {
      TestModelSpec spec;
      spec.arch = arch;
      spec.type = type;
      spec.n_layer = 2;
      spec.n_vocab = 320;
      // A random model: with seed 1 the IQ3_S and IQ3_M qwen2moe models' argmax
      // happens to settle on one token for 7 of the 8 positions (their shared
      // IQ3_S token_embd bytes), so the models here use seed 2.
      spec.seed = 2;
      const std::string path = Path(arch + "-" + type + ".gguf");
      absl::Status s = WriteTestModel(spec, path);
      ASSERT_TRUE(s.ok()) << type << " " << s;
      auto m = model::Model::Open(path);
      ASSERT_TRUE(m.ok()) << type << " " << m.status();
      model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
      model::Forward fwd(*m, &experts, nullptr);
      auto cache = model::SequenceState::Create((*m)->hparams(), 8);
      ASSERT_TRUE(cache.ok());
      const std::vector<int32_t> tokens = {5, 100, 7, 250, 31, 31, 2, 200};
      std::vector<float> logits;
      ASSERT_TRUE(fwd.Eval(tokens, cache->get(), model::LogitsMode::kAll,
                           &logits)
                      .ok())
          << type;
      ASSERT_EQ(logits.size(), tokens.size() * 320);
      std::vector<int> argmax;
      for (size_t t = 0; t < tokens.size(); ++t) {
        const float* row = logits.data() + t * 320;
        int best = 0;
        for (int i = 0; i < 320; ++i) {
          ASSERT_TRUE(std::isfinite(row[i])) << type << " " << t << " " << i;
          if (row[i] > row[best]) best = i;
        }
        argmax.push_back(best);
      }
      std::sort(argmax.begin(), argmax.end());
      EXPECT_GE(std::unique(argmax.begin(), argmax.end()) - argmax.begin(), 3)
          << arch << " " << type << ": argmax barely varies";
      std::filesystem::remove(path);
    }
  }
}

struct BadSpec {
  std::string what;
  std::function<void(TestModelSpec&)> change;
  std::string message;
};

TEST(TestModelSpecTest, RejectsBadSpecs) {
  const std::vector<BadSpec> cases = {
      {"arch", [](TestModelSpec& s) { s.arch = "llama"; },
       "unsupported architecture 'llama'"},
      {"type", [](TestModelSpec& s) { s.type = "IQ5_K"; },
       "unsupported type 'IQ5_K'"},
      {"heads", [](TestModelSpec& s) { s.n_head = 6; s.n_head_kv = 4; },
       "--heads 6 is not a multiple of --kv-heads 4"},
      {"head-dim", [](TestModelSpec& s) { s.head_dim = 63; }, "must be even"},
      {"top-k", [](TestModelSpec& s) { s.n_expert_used = 9; },
       "--top-k 9 exceeds --experts 8"},
      {"experts", [](TestModelSpec& s) { s.n_expert = 513; },
       "--experts = 513 out of range"},
      {"vocab", [](TestModelSpec& s) { s.n_vocab = 100; }, "below 259"},
      {"layers", [](TestModelSpec& s) { s.n_layer = 0; },
       "--layers = 0 out of range"},
      {"shared", [](TestModelSpec& s) { s.arch = "qwen2moe"; s.n_ff_shexp = 0; },
       "--shared-ffn = 0 out of range"},
      {"nextn", [](TestModelSpec& s) { s.n_nextn = -1; }, "--nextn = -1 out of range"},
      {"glm shared experts",
       [](TestModelSpec& s) {
         s.arch = "glm4moe";
         s.n_expert_shared = 0;
       },
       "--shared-experts = 0 out of range"},
      {"nemotron layer kinds",
       [](TestModelSpec& s) {
         s.arch = "nemotron_h_moe";
         s.layer_kinds = "MEX*";
       },
       "letters M (Mamba-2), * (attention) or E (MoE)"},
      {"nemotron groups",
       [](TestModelSpec& s) {
         s.arch = "nemotron_h_moe";
         s.ssm_n_k_heads = 3;
       },
       "must be a multiple of --ssm-groups 3"},
  };
  for (const BadSpec& c : cases) {
    TestModelSpec spec;
    c.change(spec);
    absl::Status s = ValidateSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(std::string(s.message()).find(c.message), std::string::npos)
        << c.what << ": " << s.message();
  }
  EXPECT_FALSE(PresetSpec("llama-7b").ok());
  EXPECT_TRUE(ValidateSpec(TestModelSpec{}).ok());
}

}  // namespace
}  // namespace moesplit::cli
