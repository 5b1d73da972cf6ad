// The gated-DeltaNet mixer (qwen35moe) and the per-sequence state: kernels
// against naive double-precision formulas, the forward pass's batching and
// chunking invariants on hybrid models, the state's commit-on-success and
// its rewind rule.
#include <cmath>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/base/aligned_allocator.h"
#include "common/model/expert.h"
#include "common/model/forward.h"
#include "common/model/internal/delta_net.h"
#include "common/model/sequence_state.h"
#include "common/model/testing/tiny_model.h"

namespace moesplit::model {
namespace {

using ::testing::HasSubstr;
using testing::FlakyExperts;
using testing::MakeTinyModel;
using testing::TinyModelOptions;

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// ------------------------------------------------------------------ kernels

TEST(DeltaNetKernelTest, DeltaRuleMatchesNaiveRecurrence) {
  const int64_t dim = 40, n = 7;  // 40: two 16-lane blocks and a tail
  std::vector<float> q = Random(n * dim, 1), k = Random(n * dim, 2), v = Random(n * dim, 3);
  for (int64_t t = 0; t < n; ++t) internal::L2NormRows(k.data() + t * dim, 1, dim, dim, 1e-6f);
  std::vector<float> g = Random(n, 4, 0.5f), beta = Random(n, 5, 0.5f);
  for (float& x : g) x = -std::abs(x);
  for (float& x : beta) x = 0.5f + x;
  const std::vector<float> s0 = Random(dim * dim, 6, 0.1f);
  std::vector<float> s1(dim * dim), out(n * dim);
  internal::DeltaRuleHead h{q.data(), k.data(), v.data(), dim, dim, dim, g.data(), beta.data(),
                            1, out.data(), dim};
  internal::DeltaRule(h, n, dim, s0.data(), s1.data());

  std::vector<double> S(s0.begin(), s0.end());  // S[j * dim + i]: value j, key i
  for (int64_t t = 0; t < n; ++t) {
    const double decay = std::exp(double(g[t]));
    for (double& x : S) x *= decay;
    for (int64_t j = 0; j < dim; ++j) {
      double sk = 0;
      for (int64_t i = 0; i < dim; ++i) sk += S[j * dim + i] * k[t * dim + i];
      const double delta = (v[t * dim + j] - sk) * beta[t];
      for (int64_t i = 0; i < dim; ++i) S[j * dim + i] += k[t * dim + i] * delta;
      double o = 0;
      for (int64_t i = 0; i < dim; ++i) o += S[j * dim + i] * q[t * dim + i];
      EXPECT_NEAR(out[t * dim + j], o / std::sqrt(double(dim)), 1e-5) << t << " " << j;
    }
  }
  for (int64_t i = 0; i < dim * dim; ++i) EXPECT_NEAR(s1[i], S[i], 1e-5) << i;
}

// The SIMD paths follow the reference loops' order: the same bits, for
// both forms (the AVX2 one also on AVX-512 CPUs), one token (decode) or
// several, a state_out on a cache line (the last token's state written with
// non-temporal stores) or off it (plain stores), and a dim past the scratch
// block (528: the decayed rows kept in state_out between the passes).
TEST(DeltaNetKernelTest, SimdDeltaRuleGivesTheReferenceBits) {
  for (int64_t dim : {16, 32, 48, 128, 40, 528}) {
    for (int64_t n : {1, 5}) {
      std::vector<float> q = Random(n * dim, 11), k = Random(n * dim, 12),
                         v = Random(n * dim, 13);
      std::vector<float> g = Random(n, 14, 0.5f), beta = Random(n, 15, 0.5f);
      const std::vector<float> s0 = Random(dim * dim, 16, 0.1f);
      std::vector<float> b(dim * dim), ob(n * dim);
      internal::DeltaRuleHead hb{q.data(), k.data(), v.data(), dim,         dim, dim,
                                 g.data(), beta.data(), 1,     ob.data(), dim};
      internal::DeltaRuleReference(hb, n, dim, s0.data(), b.data());
      for (auto form : {internal::DeltaRuleForm::kAuto, internal::DeltaRuleForm::kAvx2}) {
        for (int64_t offset : {0, 1}) {  // floats past a 64-byte boundary
          CacheAlignedVector<float> a(offset + dim * dim, -1.0f);
          std::vector<float> oa(n * dim);
          internal::DeltaRuleHead ha = hb;
          ha.out = oa.data();
          internal::DeltaRule(ha, n, dim, s0.data(), a.data() + offset, form);
          const std::string what = "dim " + std::to_string(dim) + " n " + std::to_string(n) +
                                   " avx2 " + std::to_string(form == internal::DeltaRuleForm::kAvx2) +
                                   " offset " + std::to_string(offset);
          ASSERT_EQ(oa, ob) << what;
          ASSERT_EQ(std::vector<float>(a.begin() + offset, a.end()), b) << what;
        }
      }
    }
  }
}

TEST(DeltaNetKernelTest, ConvSiluMatchesNaiveAndCarriesTheState) {
  const int64_t C = 20, K = 4, n = 5;
  const std::vector<float> x = Random(n * C, 7), w = Random(C * K, 8), st = Random(C * (K - 1), 9);
  std::vector<float> y(n * C), st_out(C * (K - 1));
  internal::ConvSilu(x.data(), C, n, C, w.data(), K, st.data(), st_out.data(), y.data(), C);
  auto input = [&](int64_t i, int64_t c) {  // the state's taps, then the tokens
    return i < K - 1 ? double(st[c * (K - 1) + i]) : double(x[(i - (K - 1)) * C + c]);
  };
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t j = 0; j < K; ++j) s += input(t + j, c) * w[c * K + j];
      EXPECT_NEAR(y[t * C + c], s / (1 + std::exp(-s)), 1e-5) << t << " " << c;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = 0; j < K - 1; ++j) {
      EXPECT_EQ(st_out[c * (K - 1) + j], x[(n - (K - 1) + j) * C + c]);
    }
  }
  // Token by token through the state gives the same bits as all at once.
  std::vector<float> a = st, b(C * (K - 1)), y1(C);
  for (int64_t t = 0; t < n; ++t) {
    internal::ConvSilu(x.data() + t * C, C, 1, C, w.data(), K, a.data(), b.data(), y1.data(), C);
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(y1[c], y[t * C + c]) << t << " " << c;
    std::swap(a, b);
  }
  EXPECT_EQ(a, st_out);
}

// ---------------------------------------------------------- hybrid forward

using Hybrid = testing::TinyEngine;

TinyModelOptions HybridOptions(GgmlType type = GgmlType::kF32) {
  TinyModelOptions o;
  o.arch = "qwen35moe";
  o.n_layer = 4;  // DeltaNet, attention, DeltaNet, attention
  o.n_rot = 8;    // partial rotary: 4 of 8 pairs
  // Sections of 1 pair each: pairs 0-2 take the time/height/width position,
  // pair 3 the extra one (not rotated for text).
  o.rope_sections = {1, 1, 1, 1};
  o.matrix_type = type;
  return o;
}

Hybrid MakeHybrid(const TinyModelOptions& o) {
  auto h = testing::MakeTinyEngine(o);
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? std::move(*h) : Hybrid{};
}

std::unique_ptr<SequenceState> State(const Hybrid& h, int64_t n_ctx) {
  auto s = SequenceState::Create(h.model->hparams(), n_ctx);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

const std::vector<int32_t> kTokens = {3, 17, 5, 39, 0, 22, 22, 8, 11, 30, 2, 19};

TEST(HybridForwardTest, LayersFollowTheFullAttentionInterval) {
  Hybrid h = MakeHybrid(HybridOptions());
  ASSERT_NE(h.model, nullptr);
  const HyperParams& hp = h.model->hparams();
  ASSERT_EQ(hp.layers.size(), 4u);
  EXPECT_EQ(hp.layers[0].mixer, MixerKind::kGatedDeltaNet);
  EXPECT_EQ(hp.layers[1].mixer, MixerKind::kGatedAttention);
  EXPECT_EQ(hp.layers[2].mixer, MixerKind::kGatedDeltaNet);
  EXPECT_EQ(hp.layers[3].mixer, MixerKind::kGatedAttention);
  EXPECT_EQ(hp.n_attention_layers(), 2);
  EXPECT_EQ(h.model->layer(0).wq.data, nullptr);
  EXPECT_NE(h.model->layer(0).ssm_qkv.data, nullptr);
  EXPECT_EQ(h.model->layer(1).ssm_qkv.data, nullptr);
  EXPECT_EQ(hp.rope.n_rot, 8);
  EXPECT_TRUE(hp.rope.multi_section);
  // KV for the 2 attention layers only; the recurrent state is fixed.
  EXPECT_EQ(SequenceState::KvBytesPerPosition(hp), 2u * 2 * (16 + 16) * 2);
  const uint64_t rec = 2u * (3 * 128 + 4 * 16 * 16) * 4;
  EXPECT_EQ(SequenceState::RecurrentBytes(hp), rec);
  auto s = State(h, 100);
  EXPECT_EQ(s->bytes(), SequenceState::BytesFor(hp, 100));
  EXPECT_EQ(s->bytes(), 100 * SequenceState::KvBytesPerPosition(hp) + 2 * rec);
}

// Prefill in one batch, in chunks or token by token: the recurrent state and
// the logits are the same bits (the conv and the delta rule run token by
// token inside a batch too, and the products are batch-invariant).
TEST(HybridForwardTest, ChunkedAndIncrementalEvaluationGiveTheBitsOfOneBatch) {
  for (GgmlType type : {GgmlType::kF32, GgmlType::kQ8_0}) {
    Hybrid h = MakeHybrid(HybridOptions(type));
    ASSERT_NE(h.forward, nullptr);
    auto one = State(h, 32);
    std::vector<float> all;
    ASSERT_TRUE(h.forward->Eval(kTokens, one.get(), LogitsMode::kAll, &all).ok());
    auto inc = State(h, 32);
    std::vector<float> got, chunk;
    size_t t = 0;
    for (size_t n : {5u, 3u, 1u, 1u, 2u}) {
      ASSERT_TRUE(h.forward->Eval(absl::MakeConstSpan(kTokens).subspan(t, n), inc.get(),
                                  LogitsMode::kAll, &chunk).ok());
      got.insert(got.end(), chunk.begin(), chunk.end());
      t += n;
    }
    ASSERT_EQ(t, kTokens.size());
    ASSERT_EQ(got.size(), all.size());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(got[i], all[i]) << GgmlTypeName(type) << i;
    for (int il : {0, 2}) {
      const int64_t n_ssm = 4 * 16 * 16, n_conv = 3 * 128;
      for (int64_t i = 0; i < n_ssm; ++i) {
        ASSERT_EQ(inc->recurrent(il)[i], one->recurrent(il)[i]) << il << " " << i;
      }
      for (int64_t i = 0; i < n_conv; ++i) ASSERT_EQ(inc->conv(il)[i], one->conv(il)[i]);
    }
  }
}

// qwen3next (grouped key heads, plain NEOX RoPE, the split ssm_ba): a
// prompt in chunks gives the bits of one batch, and two sequences in one
// step the bits each gets alone.
TEST(HybridForwardTest, Qwen3NextChunkedAndBatchedGiveTheBitsOfOneBatch) {
  TinyModelOptions o = HybridOptions(GgmlType::kQ8_0);
  o.arch = "qwen3next";
  Hybrid h = MakeHybrid(o);
  ASSERT_NE(h.forward, nullptr);
  ASSERT_TRUE(h.model->hparams().ssm_grouped_heads);
  ASSERT_FALSE(h.model->hparams().rope.multi_section);
  auto one = State(h, 32);
  std::vector<float> all;
  ASSERT_TRUE(h.forward->Eval(kTokens, one.get(), LogitsMode::kAll, &all).ok());
  auto inc = State(h, 32);
  std::vector<float> got, chunk;
  size_t t = 0;
  for (size_t n : {5u, 1u, 6u}) {
    ASSERT_TRUE(h.forward->Eval(absl::MakeConstSpan(kTokens).subspan(t, n), inc.get(),
                                LogitsMode::kAll, &chunk).ok());
    got.insert(got.end(), chunk.begin(), chunk.end());
    t += n;
  }
  EXPECT_EQ(got, all);
  auto a = State(h, 32), b = State(h, 32);
  std::vector<float> la, lb;
  const std::vector<int32_t> other = {7, 7, 1, 30};
  const SequenceBatch seqs[] = {{a.get(), kTokens, LogitsMode::kAll, &la},
                                {b.get(), other, LogitsMode::kAll, &lb}};
  ASSERT_TRUE(h.forward->EvalBatch(seqs).ok());
  EXPECT_EQ(la, all);
  auto alone = State(h, 32);
  std::vector<float> want;
  ASSERT_TRUE(h.forward->Eval(other, alone.get(), LogitsMode::kAll, &want).ok());
  EXPECT_EQ(lb, want);
}

TEST(HybridForwardTest, BatchedSequencesGetTheBitsTheyGetAlone) {
  Hybrid h = MakeHybrid(HybridOptions(GgmlType::kQ8_0));
  ASSERT_NE(h.forward, nullptr);
  const std::vector<std::vector<int32_t>> seqs = {
      {3, 17, 5, 39, 0, 22, 22, 8, 11, 30, 2}, {9, 4, 26}, {12, 30, 1, 1, 38, 6, 15}};
  const std::vector<std::vector<int>> chunks = {{6, 3, 1, 1}, {2, 0, 1}, {1, 5, 0, 1}};
  std::vector<std::vector<float>> alone(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto st = State(h, 32);
    ASSERT_TRUE(h.forward->Eval(seqs[s], st.get(), LogitsMode::kAll, &alone[s]).ok());
  }
  std::vector<std::unique_ptr<SequenceState>> states;
  for (size_t s = 0; s < seqs.size(); ++s) states.push_back(State(h, 32));
  std::vector<std::vector<float>> got(seqs.size()), step(seqs.size());
  std::vector<size_t> done(seqs.size(), 0);
  for (size_t k = 0; k < 4; ++k) {
    std::vector<SequenceBatch> batch;
    std::vector<size_t> who;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int n = k < chunks[s].size() ? chunks[s][k] : 0;
      if (n == 0) continue;
      batch.push_back({states[s].get(), absl::MakeConstSpan(seqs[s]).subspan(done[s], n),
                       LogitsMode::kAll, &step[s]});
      who.push_back(s);
      done[s] += n;
    }
    ASSERT_TRUE(h.forward->EvalBatch(batch).ok()) << "step " << k;
    for (size_t s : who) got[s].insert(got[s].end(), step[s].begin(), step[s].end());
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    ASSERT_EQ(done[s], seqs[s].size());
    ASSERT_EQ(got[s], alone[s]) << "sequence " << s;
  }
}

TEST(HybridForwardTest, AFailedStepLeavesTheRecurrentStateAsItWas) {
  Hybrid h = MakeHybrid(HybridOptions());
  ASSERT_NE(h.model, nullptr);
  FlakyExperts flaky(h.experts.get());
  Forward f(h.model, &flaky, h.pool.get());
  auto ref = State(h, 32), s = State(h, 32);
  std::vector<float> want, got;
  const auto head = absl::MakeConstSpan(kTokens).subspan(0, 6);
  const auto tail = absl::MakeConstSpan(kTokens).subspan(6);
  ASSERT_TRUE(f.Eval(head, ref.get(), LogitsMode::kNone, nullptr).ok());
  ASSERT_TRUE(f.Eval(tail, ref.get(), LogitsMode::kAll, &want).ok());
  ASSERT_TRUE(f.Eval(head, s.get(), LogitsMode::kNone, nullptr).ok());
  flaky.fail_layer = 3;  // after both DeltaNet layers have run
  EXPECT_EQ(f.Eval(tail, s.get(), LogitsMode::kAll, &got).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s->n_past(), 6);
  flaky.fail_layer = -1;
  ASSERT_TRUE(f.Eval(tail, s.get(), LogitsMode::kAll, &got).ok());
  EXPECT_EQ(got, want);
}

TEST(HybridForwardTest, RejectsAStateOfAnotherLayout) {
  Hybrid h = MakeHybrid(HybridOptions());
  ASSERT_NE(h.forward, nullptr);
  TinyModelOptions plain;  // qwen3moe: attention only
  Hybrid other = MakeHybrid(plain);
  ASSERT_NE(other.forward, nullptr);
  auto foreign = State(other, 16);
  std::vector<float> logits;
  const absl::Status st = h.forward->Eval({1, 2}, foreign.get(), LogitsMode::kLast, &logits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(foreign->n_past(), 0);
}

// --------------------------------------------------------- rewinding rule

TEST(SequenceStateRewindTest, RecurrentStateRewindsOnlyToCheckpoints) {
  Hybrid h = MakeHybrid(HybridOptions());
  ASSERT_NE(h.forward, nullptr);
  auto s = State(h, 32);
  std::vector<float> first, again;
  const auto head = absl::MakeConstSpan(kTokens).subspan(0, 5);
  const auto tail = absl::MakeConstSpan(kTokens).subspan(5);
  ASSERT_TRUE(h.forward->Eval(head, s.get(), LogitsMode::kNone, nullptr).ok());
  s->Checkpoint();
  ASSERT_TRUE(h.forward->Eval(tail, s.get(), LogitsMode::kAll, &first).ok());
  s->Checkpoint();
  EXPECT_EQ(s->checkpoints(), (std::vector<int64_t>{5, 12}));

  const absl::Status no = s->Truncate(7);
  EXPECT_EQ(no.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no.message()), HasSubstr("nearest below is at 5"));
  EXPECT_EQ(s->n_past(), 12);
  EXPECT_EQ(s->Truncate(13).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(s->Truncate(5).ok());
  EXPECT_EQ(s->n_past(), 5);
  EXPECT_EQ(s->checkpoints(), (std::vector<int64_t>{5}));
  ASSERT_TRUE(h.forward->Eval(tail, s.get(), LogitsMode::kAll, &again).ok());
  EXPECT_EQ(again, first);  // the same bits as the first time

  ASSERT_TRUE(s->Truncate(0).ok());
  EXPECT_TRUE(s->checkpoints().empty());
  std::vector<float> fresh, cleared;
  auto t = State(h, 32);
  ASSERT_TRUE(h.forward->Eval(kTokens, t.get(), LogitsMode::kAll, &fresh).ok());
  ASSERT_TRUE(h.forward->Eval(kTokens, s.get(), LogitsMode::kAll, &cleared).ok());
  EXPECT_EQ(cleared, fresh);
}

TEST(SequenceStateRewindTest, AttentionOnlyStatesTruncateAnywhere) {
  Hybrid h = MakeHybrid(TinyModelOptions());
  ASSERT_NE(h.forward, nullptr);
  auto s = State(h, 32);
  ASSERT_TRUE(h.forward->Eval(kTokens, s.get(), LogitsMode::kNone, nullptr).ok());
  EXPECT_TRUE(s->Truncate(7).ok());
  EXPECT_EQ(s->n_past(), 7);
  s->Checkpoint();  // no recurrent layers: nothing to keep
  EXPECT_TRUE(s->checkpoints().empty());
}

}  // namespace
}  // namespace moesplit::model
