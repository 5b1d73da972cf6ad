// The forward pass against an independent naive double-precision
// implementation, KV-cache behaviour and incremental decoding.
#include "common/model/forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/model/testing/fixtures.h"
#include "common/model/testing/tiny_model.h"
#include "common/quant/quant.h"

namespace moesplit::model {
namespace {

using ::testing::HasSubstr;
using testing::MakeTinyModel;
using testing::TinyModelOptions;
using Vec = std::vector<double>;

// ----------------------------------------------------------- naive reference

std::vector<float> Dequant(const quant::WeightView& w) {
  std::vector<float> out(w.n_rows * w.n_cols);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    EXPECT_TRUE(quant::DequantizeRow(w.type, w.data + r * w.row_bytes,
                                     out.data() + r * w.n_cols, w.n_cols)
                    .ok());
  }
  return out;
}

Vec MatVec(const quant::WeightView& w, const Vec& x) {
  const std::vector<float> m = Dequant(w);
  Vec y(w.n_rows, 0.0);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    for (int64_t i = 0; i < w.n_cols; ++i) y[r] += double(m[r * w.n_cols + i]) * x[i];
  }
  return y;
}

Vec Norm(const Vec& x, const std::vector<float>& w, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  ms /= x.size();
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(ms + eps) * w[i];
  return y;
}

void Rope(double* v, int64_t n_rot, double base, int64_t pos) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double th = pos * std::pow(base, -2.0 * i / n_rot);
    const double a = v[i], b = v[i + n_rot / 2];
    v[i] = a * std::cos(th) - b * std::sin(th);
    v[i + n_rot / 2] = a * std::sin(th) + b * std::cos(th);
  }
}

Vec Ffn(const quant::WeightView& gate, const quant::WeightView& up,
        const quant::WeightView& down, const Vec& h) {
  Vec g = MatVec(gate, h), u = MatVec(up, h);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return MatVec(down, g);
}

void AddBias(Vec* y, const std::vector<float>& b) {
  for (size_t i = 0; i < b.size(); ++i) (*y)[i] += b[i];
}

Vec NaiveMoe(const Model& m, int il, const Vec& h) {
  const HyperParams& hp = m.hparams();
  const LayerWeights& L = m.layer(il);
  Vec p = MatVec(L.router, h);
  if (hp.router_scoring == RouterSpec::Scoring::kSigmoid) {
    for (double& v : p) v = 1 / (1 + std::exp(-v));
  } else {
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& v : p) sum += (v = std::exp(v - mx));
    for (double& v : p) v /= sum;
  }
  // The choice on the scores plus the selection bias (when the layer has
  // one); the weights from the scores alone.
  Vec choice = p;
  AddBias(&choice, L.router_sel_b);
  std::vector<int> ids(hp.n_expert);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return choice[a] > choice[b]; });
  double sel = 0;
  for (int k = 0; k < hp.n_expert_used; ++k) sel += p[ids[k]];
  Vec out(hp.n_embd, 0.0);
  for (int k = 0; k < hp.n_expert_used; ++k) {
    const double w = hp.norm_topk ? p[ids[k]] / sel : p[ids[k]];
    const Vec y = Ffn(L.gate_exps.Expert(ids[k]), L.up_exps.Expert(ids[k]),
                      L.down_exps.Expert(ids[k]), h);
    for (int64_t i = 0; i < hp.n_embd; ++i) out[i] += w * y[i];
  }
  if (L.has_shared_expert()) {
    const Vec y = Ffn(L.shexp_gate, L.shexp_up, L.shexp_down, h);
    const double g = 1 / (1 + std::exp(-MatVec(L.shexp_gate_inp, h)[0]));
    for (int64_t i = 0; i < hp.n_embd; ++i) out[i] += g * y[i];
  }
  return out;
}


// Per-head QK-norm then RoPE.
void HeadsNormRope(Vec* v, int64_t heads, const HyperParams& hp, const std::vector<float>& nw,
                   int64_t pos) {
  for (int64_t h = 0; h < heads; ++h) {
    double* x = v->data() + h * hp.head_dim_k;
    if (!nw.empty()) {
      const Vec n = Norm(Vec(x, x + hp.head_dim_k), nw, hp.rms_eps);
      std::copy(n.begin(), n.end(), x);
    }
    Rope(x, hp.rope.n_rot, hp.rope.freq_base, pos);
  }
}

// Logits of every position, n x n_vocab.
std::vector<Vec> NaiveForward(const Model& m, const std::vector<int32_t>& tokens) {
  const HyperParams& hp = m.hparams();
  const int64_t n = tokens.size(), d = hp.n_embd, hk = hp.head_dim_k, hv = hp.head_dim_v;
  const std::vector<float> embd = Dequant(m.token_embd());
  std::vector<Vec> x(n);
  for (int64_t t = 0; t < n; ++t) x[t].assign(&embd[tokens[t] * d], &embd[tokens[t] * d] + d);
  for (int il = 0; il < m.n_layer(); ++il) {
    const LayerWeights& L = m.layer(il);
    std::vector<Vec> q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      const Vec h = Norm(x[t], L.attn_norm, hp.rms_eps);
      q[t] = MatVec(L.wq, h);
      k[t] = MatVec(L.wk, h);
      v[t] = MatVec(L.wv, h);
      AddBias(&q[t], L.bq);
      AddBias(&k[t], L.bk);
      AddBias(&v[t], L.bv);
      if (hp.qk_norm_whole) {  // minimax-m2: one norm over each whole projection
        q[t] = Norm(q[t], L.q_norm, hp.rms_eps);
        k[t] = Norm(k[t], L.k_norm, hp.rms_eps);
        HeadsNormRope(&q[t], hp.n_head, hp, {}, t);
        HeadsNormRope(&k[t], hp.n_head_kv, hp, {}, t);
      } else {
        HeadsNormRope(&q[t], hp.n_head, hp, L.q_norm, t);
        HeadsNormRope(&k[t], hp.n_head_kv, hp, L.k_norm, t);
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      Vec a(hp.n_head * hv, 0.0);
      for (int64_t h = 0; h < hp.n_head; ++h) {
        const int64_t kvh = h / (hp.n_head / hp.n_head_kv);
        Vec s(t + 1);
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t i = 0; i < hk; ++i) s[j] += q[t][h * hk + i] * k[j][kvh * hk + i];
          s[j] /= std::sqrt(double(hk));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t c = 0; c < hv; ++c) a[h * hv + c] += s[j] / sum * v[j][kvh * hv + c];
        }
      }
      const Vec o = MatVec(L.wo, a);
      for (int64_t i = 0; i < d; ++i) x[t][i] += o[i];
      const Vec moe = NaiveMoe(m, il, Norm(x[t], L.ffn_norm, hp.rms_eps));
      for (int64_t i = 0; i < d; ++i) x[t][i] += moe[i];
    }
  }
  std::vector<Vec> logits(n);
  for (int64_t t = 0; t < n; ++t) {
    logits[t] = MatVec(m.output(), Norm(x[t], m.output_norm(), hp.rms_eps));
  }
  return logits;
}

double Nmse(const float* ours, const Vec& ref) {
  double e = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e += (ours[i] - ref[i]) * (ours[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return e / r;
}

// ------------------------------------------------------------------ fixture

using Engine = testing::TinyEngine;

Engine MakeEngine(const TinyModelOptions& o, int threads = 2) {
  auto e = testing::MakeTinyEngine(o, threads);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : Engine{};
}

std::unique_ptr<SequenceState> Cache(const Engine& e, int64_t n_ctx) {
  auto c = SequenceState::Create(e.model->hparams(), n_ctx);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

const std::vector<int32_t> kTokens = {3, 17, 5, 39, 0, 22, 22, 8, 11, 30, 2, 19};

class ForwardArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardArchTest, MatchesNaiveDoublePrecisionForward) {
  TinyModelOptions o;
  o.arch = GetParam();
  Engine e = MakeEngine(o);
  ASSERT_NE(e.forward, nullptr);
  auto cache = Cache(e, 32);
  std::vector<float> logits;
  ASSERT_TRUE(e.forward->Eval(kTokens, cache.get(), LogitsMode::kAll, &logits).ok());
  const int64_t nv = e.model->hparams().n_vocab;
  ASSERT_EQ(logits.size(), kTokens.size() * nv);
  const std::vector<Vec> ref = NaiveForward(*e.model, kTokens);
  for (size_t t = 0; t < kTokens.size(); ++t) {
    // f16 K/V and f16-rounded queries/probabilities bound the agreement.
    EXPECT_LT(Nmse(logits.data() + t * nv, ref[t]), 1e-5) << GetParam() << " position " << t;
  }
  EXPECT_EQ(cache->n_past(), static_cast<int64_t>(kTokens.size()));
}

TEST_P(ForwardArchTest, IncrementalDecodeMatchesOneBatch) {
  TinyModelOptions o;
  o.arch = GetParam();
  o.matrix_type = GgmlType::kQ8_0;
  Engine e = MakeEngine(o);
  ASSERT_NE(e.forward, nullptr);
  const int64_t nv = e.model->hparams().n_vocab;
  auto batch_cache = Cache(e, 16);
  std::vector<float> all;
  ASSERT_TRUE(e.forward->Eval(kTokens, batch_cache.get(), LogitsMode::kAll, &all).ok());

  auto cache = Cache(e, 16);
  std::vector<float> inc, chunk;
  // A prefix of 5, then a chunk of 3, then one token at a time.
  ASSERT_TRUE(e.forward->Eval(absl::MakeSpan(kTokens).subspan(0, 5), cache.get(),
                              LogitsMode::kAll, &chunk).ok());
  inc.insert(inc.end(), chunk.begin(), chunk.end());
  ASSERT_TRUE(e.forward->Eval(absl::MakeSpan(kTokens).subspan(5, 3), cache.get(),
                              LogitsMode::kAll, &chunk).ok());
  inc.insert(inc.end(), chunk.begin(), chunk.end());
  for (size_t t = 8; t < kTokens.size(); ++t) {
    ASSERT_TRUE(e.forward->Eval(absl::MakeSpan(kTokens).subspan(t, 1), cache.get(),
                                LogitsMode::kLast, &chunk).ok());
    inc.insert(inc.end(), chunk.begin(), chunk.end());
  }
  ASSERT_EQ(inc.size(), all.size());
  for (size_t t = 0; t < kTokens.size(); ++t) {
    for (int64_t i = 0; i < nv; ++i) {
      ASSERT_NEAR(inc[t * nv + i], all[t * nv + i], 1e-5 * (1 + std::abs(all[t * nv + i])))
          << GetParam() << " position " << t << " vocab " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardArchTest,
                         ::testing::Values("qwen3moe", "qwen2moe", "minimax-m2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// ------------------------------------------------------ continuous batching

struct BatchCase {
  std::string arch;
  GgmlType type;
  int64_t n_embd;  // 256 for the K-quants (256-element blocks)
};

class EvalBatchTest : public ::testing::TestWithParam<BatchCase> {};

// Three sequences of different lengths stepped together in chunks that differ
// from step to step (chunked prefill next to one-token decodes) give, for
// every position, the SAME BITS as each sequence evaluated alone in one call.
TEST_P(EvalBatchTest, EverySequenceGetsTheBitsItGetsAlone) {
  TinyModelOptions o;
  o.arch = GetParam().arch;
  o.matrix_type = GetParam().type;
  o.n_embd = GetParam().n_embd;
  o.head_dim = GetParam().n_embd / o.n_head;
  o.n_ff_exp = GetParam().n_embd;
  o.n_ff_shexp = GetParam().n_embd;
  o.n_expert = 8;
  Engine e = MakeEngine(o);
  ASSERT_NE(e.forward, nullptr);
  const int64_t nv = e.model->hparams().n_vocab;
  const std::vector<std::vector<int32_t>> seqs = {
      {3, 17, 5, 39, 0, 22, 22, 8, 11, 30, 2, 19, 7, 7, 1, 33, 21},
      {9, 4, 26},
      {12, 30, 1, 1, 38, 6, 15, 27, 2}};
  // Chunk sizes per sequence and step (0: not in this step).
  const std::vector<std::vector<int>> chunks = {
      {6, 5, 1, 1, 1, 1, 2}, {2, 0, 1}, {1, 7, 0, 1}};
  std::vector<std::vector<float>> alone(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto c = Cache(e, 32);
    ASSERT_TRUE(e.forward->Eval(seqs[s], c.get(), LogitsMode::kAll, &alone[s]).ok());
  }
  std::vector<std::unique_ptr<SequenceState>> caches;
  for (size_t s = 0; s < seqs.size(); ++s) caches.push_back(Cache(e, 32));
  std::vector<std::vector<float>> got(seqs.size()), step_logits(seqs.size());
  std::vector<size_t> done(seqs.size(), 0);
  for (size_t step = 0;; ++step) {
    std::vector<SequenceBatch> batch;
    std::vector<size_t> who;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int n = step < chunks[s].size() ? chunks[s][step] : 0;
      if (n == 0) continue;
      ASSERT_LE(done[s] + n, seqs[s].size()) << "bad test schedule";
      batch.push_back({caches[s].get(), absl::MakeConstSpan(seqs[s]).subspan(done[s], n),
                       n == 1 ? LogitsMode::kLast : LogitsMode::kAll, &step_logits[s]});
      who.push_back(s);
      done[s] += n;
    }
    if (batch.empty()) break;
    ASSERT_TRUE(e.forward->EvalBatch(batch).ok()) << "step " << step;
    for (size_t s : who) got[s].insert(got[s].end(), step_logits[s].begin(), step_logits[s].end());
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    ASSERT_EQ(done[s], seqs[s].size());
    EXPECT_EQ(caches[s]->n_past(), static_cast<int64_t>(seqs[s].size()));
    ASSERT_EQ(got[s].size(), alone[s].size());
    for (size_t i = 0; i < got[s].size(); ++i) {
      // Bitwise: == on floats (no NaNs here), reported with the position.
      ASSERT_EQ(got[s][i], alone[s][i])
          << GgmlTypeName(o.matrix_type) << " " << o.arch << " sequence " << s << " position "
          << i / nv << " vocab " << i % nv;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, EvalBatchTest,
    ::testing::Values(BatchCase{"qwen3moe", GgmlType::kF32, 64},
                      BatchCase{"qwen3moe", GgmlType::kQ8_0, 64},
                      BatchCase{"qwen2moe", GgmlType::kQ4_0, 64},
                      BatchCase{"qwen3moe", GgmlType::kQ4_K, 256},
                      BatchCase{"qwen3moe", GgmlType::kQ6_K, 256}),
    [](const auto& info) {
      return info.param.arch + "_" + std::string(GgmlTypeName(info.param.type));
    });

TEST(EvalBatchTest, RejectsBadEntriesBeforeAnyWork) {
  Engine e = MakeEngine(TinyModelOptions{});
  ASSERT_NE(e.forward, nullptr);
  auto a = Cache(e, 8), b = Cache(e, 4);
  const std::vector<int32_t> ok = {1, 2, 3}, five = {1, 2, 3, 4, 5};
  std::vector<float> la, lb;
  EXPECT_EQ(e.forward->EvalBatch({}).code(), absl::StatusCode::kInvalidArgument);
  const SequenceBatch shared[] = {{a.get(), ok, LogitsMode::kLast, &la},
                                  {a.get(), ok, LogitsMode::kLast, &lb}};
  EXPECT_THAT(std::string(e.forward->EvalBatch(shared).message()), HasSubstr("share"));
  const SequenceBatch too_long[] = {{a.get(), ok, LogitsMode::kLast, &la},
                                    {b.get(), five, LogitsMode::kLast, &lb}};
  EXPECT_EQ(e.forward->EvalBatch(too_long).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(a->n_past(), 0);
  EXPECT_EQ(b->n_past(), 0);
}

TEST(ForwardTest, LastLogitsEqualLastRowAndThreadsDoNotMatter) {
  TinyModelOptions o;
  o.matrix_type = GgmlType::kQ8_0;
  Engine two = MakeEngine(o, 2), one = MakeEngine(o, 1);
  ASSERT_NE(two.forward, nullptr);
  ASSERT_NE(one.forward, nullptr);
  auto c1 = Cache(two, 16), c2 = Cache(one, 16);
  std::vector<float> all, last;
  ASSERT_TRUE(two.forward->Eval(kTokens, c1.get(), LogitsMode::kAll, &all).ok());
  ASSERT_TRUE(one.forward->Eval(kTokens, c2.get(), LogitsMode::kLast, &last).ok());
  const int64_t nv = two.model->hparams().n_vocab;
  ASSERT_EQ(last.size(), static_cast<size_t>(nv));
  EXPECT_EQ(last, std::vector<float>(all.end() - nv, all.end()));
}

// Dense matrices packed (quant/packed.h) where the CPU prefers it give the
// bits of the GGUF rows: prefill (tiled sizes) and decode, all logits.
TEST(ForwardTest, PackedDenseWeightsGiveTheSameBits) {
  TinyModelOptions o;
  o.n_embd = 256;
  o.n_ff_exp = 256;
  o.head_dim = 64;  // 4 x 64: whole Q4_K superblocks
  o.n_vocab = 48;   // 3 strips of output rows
  o.matrix_type = GgmlType::kQ4_K;
  o.type_overrides["blk.0.attn_v.weight"] = GgmlType::kQ6_K;
  o.type_overrides["output.weight"] = GgmlType::kQ6_K;
  Engine e = MakeEngine(o, 2);
  ASSERT_NE(e.forward, nullptr);
  Forward plain(e.model, e.experts.get(), e.pool.get(), /*pack_dense=*/false);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 7) % 48);
  auto c1 = Cache(e, 32), c2 = Cache(e, 32);
  std::vector<float> a, b;
  ASSERT_TRUE(e.forward->Eval(prompt, c1.get(), LogitsMode::kAll, &a).ok());
  ASSERT_TRUE(plain.Eval(prompt, c2.get(), LogitsMode::kAll, &b).ok());
  EXPECT_EQ(a, b);
  const int32_t one[1] = {5};
  ASSERT_TRUE(e.forward->Eval(one, c1.get(), LogitsMode::kLast, &a).ok());
  ASSERT_TRUE(plain.Eval(one, c2.get(), LogitsMode::kLast, &b).ok());
  EXPECT_EQ(a, b);
}

// Eval calls on distinct caches from several threads at once (each borrows
// its own workspace; workspaces are reused for steps of other sizes) give
// the bits of one call at a time.
TEST(ForwardTest, ConcurrentEvalsOnDistinctCachesGiveSequentialBits) {
  Engine e = MakeEngine(TinyModelOptions());
  ASSERT_NE(e.forward, nullptr);
  const std::vector<std::vector<int32_t>> prompts = {
      kTokens, {4, 9}, {30, 1, 7, 7, 2, 5, 12, 25, 6, 3, 3, 14, 0, 1, 2, 3, 4}};
  std::vector<std::vector<float>> want(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto c = Cache(e, 32);
    ASSERT_TRUE(e.forward->Eval(prompts[i], c.get(), LogitsMode::kAll, &want[i]).ok());
  }
  constexpr int kRounds = 3;
  std::vector<std::vector<std::vector<float>>> got(prompts.size(),
                                                   std::vector<std::vector<float>>(kRounds));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < kRounds; ++r) {
        auto c = Cache(e, 32);
        // Alternate the thread's prompts so workspaces change sizes.
        const size_t p = (i + r) % prompts.size();
        EXPECT_TRUE(e.forward->Eval(prompts[p], c.get(), LogitsMode::kAll, &got[i][r]).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int r = 0; r < kRounds; ++r) {
      EXPECT_EQ(got[i][r], want[(i + r) % prompts.size()]) << "thread " << i << " round " << r;
    }
  }
}

TEST(ForwardTest, CausalPrefixIsUnaffectedByLaterTokens) {
  Engine e = MakeEngine(TinyModelOptions());
  ASSERT_NE(e.forward, nullptr);
  std::vector<int32_t> other = kTokens;
  other[6] = 1;
  auto c1 = Cache(e, 16), c2 = Cache(e, 16);
  std::vector<float> a, b;
  ASSERT_TRUE(e.forward->Eval(kTokens, c1.get(), LogitsMode::kAll, &a).ok());
  ASSERT_TRUE(e.forward->Eval(other, c2.get(), LogitsMode::kAll, &b).ok());
  const int64_t nv = e.model->hparams().n_vocab;
  EXPECT_EQ(std::vector<float>(a.begin(), a.begin() + 6 * nv),
            std::vector<float>(b.begin(), b.begin() + 6 * nv));
  EXPECT_NE(std::vector<float>(a.begin() + 6 * nv, a.begin() + 7 * nv),
            std::vector<float>(b.begin() + 6 * nv, b.begin() + 7 * nv));
}

TEST(SequenceStateTest, RefusesOverflowNamingBothNumbers) {
  Engine e = MakeEngine(TinyModelOptions());
  ASSERT_NE(e.forward, nullptr);
  auto cache = Cache(e, 8);
  std::vector<float> logits;
  ASSERT_TRUE(e.forward->Eval(absl::MakeSpan(kTokens).subspan(0, 6), cache.get(),
                              LogitsMode::kLast, &logits).ok());
  const absl::Status st = e.forward->Eval(absl::MakeSpan(kTokens).subspan(6, 3), cache.get(),
                                          LogitsMode::kLast, &logits);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("6 positions used + 3 new"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("n_ctx 8"));
  EXPECT_EQ(cache->n_past(), 6);
  EXPECT_TRUE(e.forward->Eval(absl::MakeSpan(kTokens).subspan(6, 2), cache.get(),
                              LogitsMode::kLast, &logits).ok());
  EXPECT_EQ(cache->n_past(), 8);
  cache->Clear();
  EXPECT_EQ(cache->n_past(), 0);
  EXPECT_TRUE(cache->CheckRoom(8).ok());
  EXPECT_FALSE(cache->CheckRoom(9).ok());
  EXPECT_EQ(cache->Truncate(1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SequenceState::Create(e.model->hparams(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SequenceStateTest, TruncateThenReplayGivesSameLogits) {
  Engine e = MakeEngine(TinyModelOptions());
  ASSERT_NE(e.forward, nullptr);
  auto cache = Cache(e, 16);
  std::vector<float> first, second;
  ASSERT_TRUE(e.forward->Eval(kTokens, cache.get(), LogitsMode::kLast, &first).ok());
  ASSERT_TRUE(cache->Truncate(static_cast<int64_t>(kTokens.size()) - 1).ok());
  ASSERT_TRUE(e.forward->Eval(absl::MakeSpan(kTokens).subspan(kTokens.size() - 1),
                              cache.get(), LogitsMode::kLast, &second).ok());
  EXPECT_EQ(first, second);
}

TEST(ForwardTest, RejectsBadInputWithoutTouchingTheCache) {
  Engine e = MakeEngine(TinyModelOptions());
  ASSERT_NE(e.forward, nullptr);
  auto cache = Cache(e, 16);
  std::vector<float> logits;
  ASSERT_TRUE(e.forward->Eval({1, 2}, cache.get(), LogitsMode::kLast, &logits).ok());
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{1, 40}, std::vector<int32_t>{-1}, std::vector<int32_t>{}}) {
    const absl::Status st = e.forward->Eval(bad, cache.get(), LogitsMode::kLast, &logits);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(cache->n_past(), 2);
  }
  EXPECT_THAT(std::string(e.forward->Eval({40}, cache.get(), LogitsMode::kLast, &logits)
                              .message()),
              HasSubstr("id 40, outside [0, 40)"));
  TinyModelOptions wide;
  wide.n_head_kv = 4;
  Engine other = MakeEngine(wide);
  ASSERT_NE(other.forward, nullptr);
  auto foreign = Cache(other, 16);
  EXPECT_EQ(e.forward->Eval({1}, foreign.get(), LogitsMode::kLast, &logits).code(),
            absl::StatusCode::kInvalidArgument);
}

// Records the calls and answers zeros: checks what the forward pass routes.
class RecordingExperts : public ExpertBackend {
 public:
  absl::Status ComputeInto(const ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override {
    calls.push_back(CopyCall(call));
    std::fill(partial, partial + call.hidden.size(), 0.0f);
    return absl::OkStatus();
  }
  std::vector<ExpertCall> calls;
};

TEST(ForwardTest, RoutesTopKWithArchitectureNormalisation) {
  for (const char* arch : {"qwen3moe", "qwen2moe"}) {
    TinyModelOptions o;
    o.arch = arch;
    auto m = MakeTinyModel(o);
    ASSERT_TRUE(m.ok()) << m.status();
    RecordingExperts rec;
    Forward f(*m, &rec, nullptr);
    auto cache = SequenceState::Create((*m)->hparams(), 8);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(f.Eval({4, 5, 6}, cache->get(), LogitsMode::kNone, nullptr).ok());
    ASSERT_EQ(rec.calls.size(), 2u) << arch;
    for (size_t i = 0; i < rec.calls.size(); ++i) {
      const ExpertCall& c = rec.calls[i];
      EXPECT_EQ(c.layer, static_cast<int>(i));
      EXPECT_EQ(c.n_tokens, 3);
      EXPECT_EQ(c.token_offsets, (std::vector<uint32_t>{0, 2, 4, 6}));
      for (int t = 0; t < 3; ++t) {
        const float sum = c.weights[2 * t] + c.weights[2 * t + 1];
        EXPECT_GE(c.weights[2 * t], c.weights[2 * t + 1]) << arch;
        EXPECT_NE(c.expert_ids[2 * t], c.expert_ids[2 * t + 1]) << arch;
        if (std::string(arch) == "qwen3moe") {
          EXPECT_NEAR(sum, 1.0f, 1e-6) << arch;
        } else {
          EXPECT_LT(sum, 0.999f) << arch;  // plain softmax probabilities of 4 experts
        }
      }
    }
    EXPECT_NE(rec.calls[0].call_id, rec.calls[1].call_id);
  }
}

TEST(GreedyGenerateTest, MatchesArgmaxOfFullEvaluationAndStops) {
  TinyModelOptions o;
  o.matrix_type = GgmlType::kF16;
  Engine e = MakeEngine(o);
  ASSERT_NE(e.forward, nullptr);
  const std::vector<int32_t> prompt = {7, 8, 9};
  auto cache = Cache(e, 32);
  auto gen = GreedyGenerate(*e.forward, cache.get(), prompt, 6);
  ASSERT_TRUE(gen.ok()) << gen.status();
  ASSERT_EQ(gen->size(), 6u);
  EXPECT_EQ(cache->n_past(), 3 + 5);
  // Re-derive each token from a fresh full evaluation of the sequence so far.
  std::vector<int32_t> seq = prompt;
  const int64_t nv = e.model->hparams().n_vocab;
  for (int32_t tok : *gen) {
    auto c = Cache(e, 32);
    std::vector<float> logits;
    ASSERT_TRUE(e.forward->Eval(seq, c.get(), LogitsMode::kLast, &logits).ok());
    const int32_t want = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.begin() + nv) - logits.begin());
    EXPECT_EQ(tok, want);
    seq.push_back(tok);
  }
  auto c2 = Cache(e, 32);
  auto stopped = GreedyGenerate(*e.forward, c2.get(), prompt, 6, {(*gen)[1]});
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->size(), (*gen)[0] == (*gen)[1] ? 1u : 2u);
  int seen = 0;
  auto c3 = Cache(e, 32);
  auto cb = GreedyGenerate(*e.forward, c3.get(), prompt, 6, {}, [&](int32_t) {
    return ++seen < 3;
  });
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(cb->size(), 3u);
}


// ------------------------------------------------- sliding-window rings

namespace {

std::vector<int32_t> LongPrompt(int64_t n, int64_t n_vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((7 * i * i + 3 * i + 1) % n_vocab);
  return t;
}

// The tiny gpt-oss model (window 4 on layer 0) in process.
Engine GptOssEngine(GgmlType type = GgmlType::kF32) {
  TinyModelOptions o;
  o.arch = "gpt-oss";
  o.matrix_type = type;
  return MakeEngine(o);
}

}  // namespace

// gpt-oss's sliding-window layers (window 4 here) keep a ring of
// window + max_step - 1 positions; a state with max_step 3 (the forward
// splits a 40-token prompt into steps of 3 on those layers) gives the same
// bits as one that keeps every position, in prefill and decode, alone and
// batched, and costs less.
TEST(SlidingWindowRingTest, RingsGiveTheBitsOfTheFullCache) {
  Engine e = GptOssEngine(GgmlType::kQ8_0);
  ASSERT_NE(e.forward, nullptr);
  const HyperParams& hp = e.model->hparams();
  ASSERT_EQ(hp.layers[0].sliding_window, 4);
  auto full = SequenceState::Create(hp, 64, 64);  // 4 + 63 + 3 >= 64: no ring
  auto ring = SequenceState::Create(hp, 64, 3);
  ASSERT_TRUE(full.ok() && ring.ok());
  EXPECT_FALSE((*full)->has_ring(0));
  EXPECT_TRUE((*ring)->has_ring(0));
  EXPECT_FALSE((*ring)->has_ring(1));  // a full-attention layer
  EXPECT_LT((*ring)->bytes(), (*full)->bytes());
  EXPECT_EQ((*ring)->bytes(), SequenceState::BytesFor(hp, 64, 3));
  EXPECT_EQ(SequenceState::LayerPositions(hp, 0, 64, 3), 4 + 3 - 1 + 4 - 1);
  EXPECT_EQ(SequenceState::LayerPositions(hp, 1, 64, 3), 64);

  const std::vector<int32_t> prompt = LongPrompt(40, hp.n_vocab);
  std::vector<float> want, got;
  ASSERT_TRUE(e.forward->Eval(prompt, full->get(), LogitsMode::kAll, &want).ok());
  ASSERT_TRUE(e.forward->Eval(prompt, ring->get(), LogitsMode::kAll, &got).ok());
  ASSERT_EQ(got, want);
  for (int32_t tok : {5, 9, 2, 31, 0, 17, 8}) {
    ASSERT_TRUE(e.forward->Eval({tok}, full->get(), LogitsMode::kLast, &want).ok());
    ASSERT_TRUE(e.forward->Eval({tok}, ring->get(), LogitsMode::kLast, &got).ok());
    ASSERT_EQ(got, want) << "decode of " << tok;
  }

  // Batched with another ring sequence: each gets its bits.
  auto a = SequenceState::Create(hp, 64, 3), c = SequenceState::Create(hp, 64, 3);
  ASSERT_TRUE(a.ok() && c.ok());
  const std::vector<int32_t> other = LongPrompt(23, hp.n_vocab);
  std::vector<float> alone_a, alone_c, la, lc;
  {
    auto s = SequenceState::Create(hp, 64, 64);
    ASSERT_TRUE(e.forward->Eval(prompt, s->get(), LogitsMode::kAll, &alone_a).ok());
    s = SequenceState::Create(hp, 64, 64);
    ASSERT_TRUE(e.forward->Eval(other, s->get(), LogitsMode::kAll, &alone_c).ok());
  }
  const SequenceBatch both[2] = {{a->get(), prompt, LogitsMode::kAll, &la},
                                 {c->get(), other, LogitsMode::kAll, &lc}};
  ASSERT_TRUE(e.forward->EvalBatch(both).ok());
  EXPECT_EQ(la, alone_a);
  EXPECT_EQ(lc, alone_c);
}

// gemma4's layers differ in their KV rows (sliding: 2 heads x 64, window
// 6, their own RoPE; full: 1 head x 128, V = K, rope_freqs): rings (max
// step 4) give the bits of the full cache, a prompt decoded token by token
// the bits of one batch, and two sequences batched the bits each gets alone.
TEST(SlidingWindowRingTest, Gemma4PerLayerGeometryRingsDecodeAndBatch) {
  auto m = Model::Open(testing::FixtureModelsDir() + "/gemma4-tiny-q8_0.gguf");
  ASSERT_TRUE(m.ok()) << m.status();
  const HyperParams& hp = (*m)->hparams();
  ThreadPool pool(2);
  InProcessExperts experts(ExpertStore(*m), &pool);
  Forward fwd(*m, &experts, &pool);
  const std::vector<int32_t> prompt = LongPrompt(29, hp.n_vocab);
  auto full = SequenceState::Create(hp, 48, 48);
  auto ring = SequenceState::Create(hp, 48, 4);
  ASSERT_TRUE(full.ok() && ring.ok());
  EXPECT_TRUE((*ring)->has_ring(0));
  EXPECT_FALSE((*ring)->has_ring(3));
  EXPECT_EQ((*ring)->bytes(), SequenceState::BytesFor(hp, 48, 4));
  std::vector<float> want, got;
  ASSERT_TRUE(fwd.Eval(prompt, full->get(), LogitsMode::kAll, &want).ok());
  ASSERT_TRUE(fwd.Eval(prompt, ring->get(), LogitsMode::kAll, &got).ok());
  ASSERT_EQ(got, want);

  auto inc = SequenceState::Create(hp, 48, 4);
  ASSERT_TRUE(inc.ok());
  std::vector<float> one, steps;
  for (int32_t tok : prompt) {
    ASSERT_TRUE(fwd.Eval({tok}, inc->get(), LogitsMode::kLast, &one).ok());
    steps.insert(steps.end(), one.begin(), one.end());
  }
  ASSERT_EQ(steps.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(steps[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  }

  const std::vector<int32_t> other = LongPrompt(11, hp.n_vocab);
  std::vector<float> alone, la, lo;
  {
    auto s = SequenceState::Create(hp, 48, 48);
    ASSERT_TRUE(fwd.Eval(other, s->get(), LogitsMode::kAll, &alone).ok());
  }
  auto a = SequenceState::Create(hp, 48, 4), o = SequenceState::Create(hp, 48, 4);
  ASSERT_TRUE(a.ok() && o.ok());
  const SequenceBatch both[2] = {{a->get(), prompt, LogitsMode::kAll, &la},
                                 {o->get(), other, LogitsMode::kAll, &lo}};
  ASSERT_TRUE(fwd.EvalBatch(both).ok());
  EXPECT_EQ(la, want);
  EXPECT_EQ(lo, alone);

  // The prefix cache's copy: every layer's own rows out of the full cache,
  // into a fresh ring state, then decoding gives the same bits.
  const uint64_t row = (*full)->kv_bytes_per_position();
  EXPECT_EQ(row, SequenceState::KvBytesPerPosition(hp));
  EXPECT_EQ(row, 8u * 256 * 2);  // 8 layers of 256 f16 values each
  std::vector<uint8_t> rows(row * prompt.size());
  ASSERT_TRUE((*full)->ExportKv(0, prompt.size(), rows.data()).ok());
  auto resumed = SequenceState::Create(hp, 48, 4);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->ImportKv(0, rows.data(), rows.size()).ok());
  ASSERT_TRUE((*resumed)->Resume(prompt.size(), nullptr, 0).ok());
  for (int32_t tok : {4, 11, 6}) {
    ASSERT_TRUE(fwd.Eval({tok}, full->get(), LogitsMode::kLast, &want).ok());
    ASSERT_TRUE(fwd.Eval({tok}, resumed->get(), LogitsMode::kLast, &got).ok());
    ASSERT_EQ(got, want) << tok;
  }
}

// Export / import with rings: only rows still in the ring export; a state
// resumed from a full cache's rows decodes the same bits.
TEST(SlidingWindowRingTest, ExportsWhatTheRingHoldsAndResumes) {
  Engine e = GptOssEngine();
  ASSERT_NE(e.forward, nullptr);
  const HyperParams& hp = e.model->hparams();
  auto full = *SequenceState::Create(hp, 64, 64);
  auto ring = *SequenceState::Create(hp, 64, 3);
  const std::vector<int32_t> prompt = LongPrompt(30, hp.n_vocab);
  ASSERT_TRUE(e.forward->Eval(prompt, full.get(), LogitsMode::kNone, nullptr).ok());
  ASSERT_TRUE(e.forward->Eval(prompt, ring.get(), LogitsMode::kNone, nullptr).ok());
  const uint64_t row = full->kv_bytes_per_position();
  ASSERT_EQ(ring->kv_bytes_per_position(), row);
  std::vector<uint8_t> from_full(row * 4), from_ring(row * 4);
  ASSERT_TRUE(full->ExportKv(26, 30, from_full.data()).ok());
  ASSERT_TRUE(ring->ExportKv(26, 30, from_ring.data()).ok());
  EXPECT_EQ(from_ring, from_full);
  const absl::Status gone = ring->ExportKv(0, 4, from_ring.data());
  EXPECT_EQ(gone.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(gone.message()), HasSubstr("no longer in layer 0's sliding-window ring"));

  // All 30 rows of the full cache into a fresh ring state, then decode.
  std::vector<uint8_t> rows(row * 30);
  ASSERT_TRUE(full->ExportKv(0, 30, rows.data()).ok());
  auto resumed = *SequenceState::Create(hp, 64, 3);
  ASSERT_TRUE(resumed->ImportKv(0, rows.data(), rows.size()).ok());
  ASSERT_TRUE(resumed->Resume(30, nullptr, 0).ok());
  std::vector<float> want, got;
  for (int32_t tok : {4, 11, 6}) {
    ASSERT_TRUE(e.forward->Eval({tok}, full.get(), LogitsMode::kLast, &want).ok());
    ASSERT_TRUE(e.forward->Eval({tok}, resumed.get(), LogitsMode::kLast, &got).ok());
    ASSERT_EQ(got, want);
  }
}

// The rewind rule: back at most max_step - 1 positions past the window;
// a failed step that overwrote the window makes the state refuse steps
// until Clear().
TEST(SlidingWindowRingTest, RewindsOnlyAsFarAsTheRingHolds) {
  Engine e = GptOssEngine();
  ASSERT_NE(e.forward, nullptr);
  const HyperParams& hp = e.model->hparams();
  const std::vector<int32_t> prompt = LongPrompt(20, hp.n_vocab);
  auto s = *SequenceState::Create(hp, 64, 3);  // keeps the window + 2
  ASSERT_TRUE(e.forward->Eval(prompt, s.get(), LogitsMode::kNone, nullptr).ok());
  const absl::Status far = s->Truncate(17);
  EXPECT_EQ(far.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(far.message()), HasSubstr("keep only their window and 2 positions more"));
  EXPECT_EQ(s->n_past(), 20);
  ASSERT_TRUE(s->Truncate(18).ok());
  // Replaying the two tokens gives the bits of the first time.
  auto ref = *SequenceState::Create(hp, 64, 64);
  std::vector<float> want, got;
  ASSERT_TRUE(e.forward->Eval(prompt, ref.get(), LogitsMode::kLast, &want).ok());
  ASSERT_TRUE(e.forward->Eval(absl::MakeConstSpan(prompt).subspan(18), s.get(), LogitsMode::kLast, &got).ok());
  EXPECT_EQ(got, want);

  // A failed step of 2 tokens keeps the window; one of 8 overwrote it.
  testing::FlakyExperts failing(e.experts.get());
  Forward f(e.model, &failing, e.pool.get());
  failing.fail_layer = 1;  // after layer 0 (sliding) wrote its rows
  const std::vector<int32_t> more = LongPrompt(8, hp.n_vocab);
  EXPECT_EQ(f.Eval(absl::MakeConstSpan(more).subspan(0, 2), s.get(), LogitsMode::kLast, &got).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(s->n_past(), 20);
  failing.fail_layer = -1;
  ASSERT_TRUE(f.Eval({more[0]}, s.get(), LogitsMode::kLast, &got).ok());
  ASSERT_TRUE(f.Eval({more[0]}, ref.get(), LogitsMode::kLast, &want).ok());
  EXPECT_EQ(got, want);
  failing.fail_layer = 1;
  EXPECT_FALSE(f.Eval(more, s.get(), LogitsMode::kLast, &got).ok());
  failing.fail_layer = -1;
  const absl::Status broken = f.Eval({more[1]}, s.get(), LogitsMode::kLast, &got);
  EXPECT_EQ(broken.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(broken.message()), HasSubstr("overwritten by a failed step"));
  s->Clear();
  ASSERT_TRUE(f.Eval(prompt, s.get(), LogitsMode::kLast, &got).ok());
  ASSERT_TRUE(f.Eval(prompt, (*SequenceState::Create(hp, 64, 64)).get(), LogitsMode::kLast, &want).ok());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace moesplit::model
