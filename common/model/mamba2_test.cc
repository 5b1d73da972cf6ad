// The Mamba-2 mixer and nemotron_h_moe's layers (one mixer or one FFN per
// layer): the scan and conv kernels against naive double-precision
// formulas, then the oracle fixture model (nemotronh-tiny, llama.cpp's
// random-weight Nemotron-3 Nano shape) through the forward pass: its layer
// kinds and state, chunked / incremental / batched evaluation giving the
// bits of one batch, and the recurrent state resumed from a checkpoint or
// from an exported copy (the prefix cache's path) giving a cold run's bits.
#include <cmath>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/model/forward.h"
#include "common/model/internal/delta_net.h"
#include "common/model/model.h"
#include "common/model/sequence_state.h"
#include "common/model/testing/fixtures.h"

namespace moesplit::model {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// ------------------------------------------------------------------ kernels

TEST(Mamba2KernelTest, ScanMatchesNaiveRecurrenceAndCarriesTheState) {
  const int64_t hd = 5, ds = 12, n = 6, stride = 40;  // x, B, C rows in one wide row
  const std::vector<float> xbc = Random(n * stride, 1);
  std::vector<float> dt = Random(n, 2, 2.0f);
  for (float& x : dt) x = internal::Softplus(x);
  const float a = -0.7f;
  const std::vector<float> s0 = Random(hd * ds, 3, 0.5f);
  std::vector<float> s1(hd * ds), y(n * hd);
  internal::SsmScanHead h{xbc.data(), xbc.data() + 8, xbc.data() + 20, stride, stride,
                          dt.data(), 1, a, y.data(), hd};
  internal::SsmScan(h, n, hd, ds, s0.data(), s1.data());

  std::vector<double> S(s0.begin(), s0.end());  // S[i * ds + j]: channel i, state j
  for (int64_t t = 0; t < n; ++t) {
    const double da = std::exp(double(dt[t]) * a);
    for (int64_t i = 0; i < hd; ++i) {
      double yi = 0;
      for (int64_t j = 0; j < ds; ++j) {
        double& s = S[i * ds + j];
        s = s * da + double(xbc[t * stride + 8 + j]) * xbc[t * stride + i] * dt[t];
        yi += s * xbc[t * stride + 20 + j];
      }
      EXPECT_NEAR(y[t * hd + i], yi, 1e-5) << t << " " << i;
    }
  }
  for (int64_t i = 0; i < hd * ds; ++i) EXPECT_NEAR(s1[i], S[i], 1e-5) << i;
  // Token by token through the state: the bits of all at once.
  std::vector<float> st = s0, next(hd * ds), y1(hd);
  for (int64_t t = 0; t < n; ++t) {
    internal::SsmScanHead one = h;
    one.x += t * stride, one.b += t * stride, one.c += t * stride, one.dt += t;
    one.y = y1.data();
    internal::SsmScan(one, 1, hd, ds, st.data(), next.data());
    for (int64_t i = 0; i < hd; ++i) ASSERT_EQ(y1[i], y[t * hd + i]) << t << " " << i;
    std::swap(st, next);
  }
  EXPECT_EQ(st, s1);
}

TEST(Mamba2KernelTest, ConvAddsItsBiasBeforeTheSilu) {
  const int64_t C = 20, K = 4, n = 3;
  const std::vector<float> x = Random(n * C, 7), w = Random(C * K, 8), b = Random(C, 9);
  const std::vector<float> st(C * (K - 1), 0.0f);
  std::vector<float> y(n * C), st_out(C * (K - 1));
  internal::ConvSilu(x.data(), C, n, C, w.data(), K, st.data(), st_out.data(), y.data(), C,
                     b.data());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double s = b[c];
      for (int64_t j = 0; j < K; ++j) {
        const int64_t i = t + j - (K - 1);
        s += (i < 0 ? 0.0 : double(x[i * C + c])) * w[c * K + j];
      }
      EXPECT_NEAR(y[t * C + c], s / (1 + std::exp(-s)), 1e-5) << t << " " << c;
    }
  }
}

// ------------------------------------------------------ the fixture model

struct Engine {
  std::shared_ptr<const Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<InProcessExperts> experts;
  std::unique_ptr<Forward> forward;
};

Engine Open(const std::string& type) {
  Engine e;
  auto m = Model::Open(testing::FixtureModelsDir() + "/nemotronh-tiny-" + type + ".gguf");
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return e;
  e.model = *std::move(m);
  e.pool = std::make_unique<ThreadPool>(2);
  e.experts = std::make_unique<InProcessExperts>(ExpertStore(e.model), e.pool.get());
  e.forward = std::make_unique<Forward>(e.model, e.experts.get(), e.pool.get());
  return e;
}

std::unique_ptr<SequenceState> State(const Engine& e, int64_t n_ctx) {
  auto s = SequenceState::Create(e.model->hparams(), n_ctx);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

const std::vector<int32_t> kTokens = {84, 104, 101, 32, 414, 271, 107, 313, 280, 119, 110, 284,
                                      111, 120, 32, 106, 117, 109, 112, 115};

TEST(NemotronHTest, LayersAreOneMixerOrOneFfn) {
  Engine e = Open("f16");
  ASSERT_NE(e.model, nullptr);
  const HyperParams& hp = e.model->hparams();
  const std::string kinds = "MEMEM*EM";
  ASSERT_EQ(hp.layers.size(), kinds.size());
  for (size_t il = 0; il < kinds.size(); ++il) {
    const LayerSpec& l = hp.layers[il];
    const MixerKind want_mixer = kinds[il] == 'M'   ? MixerKind::kMamba2
                                 : kinds[il] == '*' ? MixerKind::kAttention
                                                    : MixerKind::kNone;
    EXPECT_EQ(l.mixer, want_mixer) << il;
    EXPECT_EQ(l.ffn, kinds[il] == 'E' ? FfnKind::kMoe : FfnKind::kNone) << il;
    // The one norm: attn_norm before the mixer, or the FFN's on a MoE layer.
    EXPECT_EQ(e.model->layer(il).attn_norm.empty(), kinds[il] == 'E') << il;
    EXPECT_EQ(e.model->layer(il).ffn_norm.empty(), kinds[il] != 'E') << il;
  }
  EXPECT_EQ(hp.n_attention_layers(), 1);
  EXPECT_EQ(hp.n_recurrent_layers(), 4);
  EXPECT_EQ(hp.n_moe_layers(), 3);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.rope.n_rot, 0);  // no RoPE, whatever rope.dimension_count says
  EXPECT_EQ(ExpertFfnName(hp.expert_ffn), "relu_sq");
  EXPECT_EQ(hp.n_expert_groups, 4);
  EXPECT_EQ(hp.n_group_used, 2);
  EXPECT_FLOAT_EQ(hp.expert_weights_scale, 2.5f);
  // Mamba-2's state: conv taps over xBC (256 + 2 x 2 x 32 channels) and
  // per head a head_dim x d_state matrix (8 x 32 x 32).
  EXPECT_EQ(hp.ssm_conv_channels(), 384);
  EXPECT_EQ(hp.ssm_conv_state_floats(), 3 * 384);
  EXPECT_EQ(hp.ssm_recurrent_state_floats(), 8 * 32 * 32);
  EXPECT_EQ(SequenceState::KvBytesPerPosition(hp), 1u * 2 * 2 * 32 * 2);
  EXPECT_EQ(SequenceState::RecurrentBytes(hp), 4u * (3 * 384 + 8 * 32 * 32) * 4);
  auto s = State(e, 64);
  EXPECT_EQ(s->bytes(), SequenceState::BytesFor(hp, 64));
  // The experts have no gate tensor: the gate views up.
  EXPECT_EQ(e.model->layer(1).gate_exps.data, e.model->layer(1).up_exps.data);
  EXPECT_EQ(e.model->layer(1).shexp_gate.data, nullptr);
}

// Prefill in one batch, in chunks or token by token (decode): the same
// logits and recurrent state, bit for bit.
TEST(NemotronHTest, ChunkedAndIncrementalEvaluationGiveTheBitsOfOneBatch) {
  for (const std::string type : {"f16", "q8_0"}) {
    Engine e = Open(type);
    ASSERT_NE(e.forward, nullptr);
    auto one = State(e, 64);
    std::vector<float> all;
    ASSERT_TRUE(e.forward->Eval(kTokens, one.get(), LogitsMode::kAll, &all).ok());
    auto inc = State(e, 64);
    std::vector<float> got, chunk;
    size_t t = 0;
    for (size_t n : {7u, 1u, 1u, 5u, 1u, 1u, 1u, 3u}) {
      ASSERT_TRUE(e.forward->Eval(absl::MakeConstSpan(kTokens).subspan(t, n), inc.get(),
                                  LogitsMode::kAll, &chunk).ok());
      got.insert(got.end(), chunk.begin(), chunk.end());
      t += n;
    }
    ASSERT_EQ(t, kTokens.size());
    EXPECT_EQ(got, all) << type;
    const HyperParams& hp = e.model->hparams();
    for (int il : {0, 2, 4, 7}) {
      ASSERT_TRUE(hp.is_recurrent(il));
      EXPECT_TRUE(std::equal(inc->recurrent(il), inc->recurrent(il) + hp.ssm_recurrent_state_floats(),
                             one->recurrent(il)))
          << type << " layer " << il;
      EXPECT_TRUE(std::equal(inc->conv(il), inc->conv(il) + hp.ssm_conv_state_floats(),
                             one->conv(il)))
          << type << " layer " << il;
    }
  }
}

TEST(NemotronHTest, BatchedSequencesGetTheBitsTheyGetAlone) {
  Engine e = Open("q8_0");
  ASSERT_NE(e.forward, nullptr);
  const std::vector<int32_t> other = {497, 117, 457, 10, 87};
  auto a = State(e, 64), b = State(e, 64);
  std::vector<float> la, lb, want_a, want_b;
  const SequenceBatch seqs[] = {{a.get(), kTokens, LogitsMode::kAll, &la},
                                {b.get(), other, LogitsMode::kAll, &lb}};
  ASSERT_TRUE(e.forward->EvalBatch(seqs).ok());
  auto sa = State(e, 64), sb = State(e, 64);
  ASSERT_TRUE(e.forward->Eval(kTokens, sa.get(), LogitsMode::kAll, &want_a).ok());
  ASSERT_TRUE(e.forward->Eval(other, sb.get(), LogitsMode::kAll, &want_b).ok());
  EXPECT_EQ(la, want_a);
  EXPECT_EQ(lb, want_b);
}

// The recurrent layers resume from a checkpoint (Truncate) and from an
// exported copy of the K/V rows and the recurrent state imported into a
// fresh state (the prefix cache's ExportKv / ExportRecurrent / ImportKv /
// Resume): the continuation has a cold run's bits.
TEST(NemotronHTest, ResumedRecurrentStateGivesTheBitsOfAColdRun) {
  Engine e = Open("f16");
  ASSERT_NE(e.forward, nullptr);
  const auto head = absl::MakeConstSpan(kTokens).subspan(0, 8);
  const auto tail = absl::MakeConstSpan(kTokens).subspan(8);
  std::vector<float> cold, again, resumed;
  auto c = State(e, 64);
  ASSERT_TRUE(e.forward->Eval(kTokens, c.get(), LogitsMode::kAll, &cold).ok());
  const std::vector<float> cold_tail(cold.end() - tail.size() * e.model->hparams().n_vocab,
                                     cold.end());

  auto s = State(e, 64);
  ASSERT_TRUE(e.forward->Eval(head, s.get(), LogitsMode::kNone, nullptr).ok());
  s->Checkpoint();
  std::vector<uint8_t> kv(s->kv_bytes_per_position() * head.size()), rec(s->recurrent_bytes());
  ASSERT_TRUE(s->ExportKv(0, static_cast<int64_t>(head.size()), kv.data()).ok());
  s->ExportRecurrent(rec.data());
  ASSERT_TRUE(e.forward->Eval(tail, s.get(), LogitsMode::kNone, nullptr).ok());
  EXPECT_EQ(s->Truncate(9).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->Truncate(static_cast<int64_t>(head.size())).ok());
  ASSERT_TRUE(e.forward->Eval(tail, s.get(), LogitsMode::kAll, &again).ok());
  EXPECT_EQ(again, cold_tail);

  auto fresh = State(e, 64);
  ASSERT_TRUE(fresh->ImportKv(0, kv.data(), kv.size()).ok());
  ASSERT_TRUE(fresh->Resume(static_cast<int64_t>(head.size()), rec.data(), rec.size()).ok());
  ASSERT_TRUE(e.forward->Eval(tail, fresh.get(), LogitsMode::kAll, &resumed).ok());
  EXPECT_EQ(resumed, cold_tail);
}

}  // namespace
}  // namespace moesplit::model
