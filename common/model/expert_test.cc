// InProcessExperts against a naive computation from dequantised weights, and
// ExpertCall validation.
#include "common/model/expert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/base/memory_bandwidth.h"
#include "common/model/testing/tiny_model.h"
#include "common/quant/packed.h"
#include "common/quant/quant.h"

namespace moesplit::model {
namespace {

using ::testing::HasSubstr;
using testing::MakeTinyModel;
using testing::TinyModelOptions;

std::vector<float> DequantExpert(const ExpertTensorView& v, int e) {
  std::vector<float> w(v.n_out * v.n_in);
  const quant::WeightView m = v.Expert(e);
  for (int64_t r = 0; r < v.n_out; ++r) {
    EXPECT_TRUE(quant::DequantizeRow(v.type, m.data + r * m.row_bytes, w.data() + r * v.n_in,
                                     v.n_in)
                    .ok());
  }
  return w;
}

// partial[t] = sum_k w_k * E_k(h), in double, with the model's expert FFN
// (arch.h ExpertFfnSpec): SiLU(gate h) * up h, or gpt-oss's clamped SwiGLU,
// and the biases where the model has them. `clamped` (optional) counts the
// gate values past the clamp.
std::vector<double> Naive(const Model& m, const ExpertCall& c, int* clamped = nullptr) {
  const LayerWeights& L = m.layer(c.layer);
  const ExpertFfnSpec& f = m.hparams().expert_ffn;
  const int64_t d = c.d, ff = L.gate_exps.n_out;
  auto bias = [](const std::vector<float>& b, int64_t i) { return b.empty() ? 0.0 : double(b[i]); };
  std::vector<double> out(c.n_tokens * d, 0.0);
  for (int t = 0; t < c.n_tokens; ++t) {
    const float* h = c.hidden.data() + t * d;
    for (uint32_t k = c.token_offsets[t]; k < c.token_offsets[t + 1]; ++k) {
      const int e = c.expert_ids[k];
      const auto g = DequantExpert(L.gate_exps, e), u = DequantExpert(L.up_exps, e),
                 dn = DequantExpert(L.down_exps, e);
      std::vector<double> act(ff);
      for (int64_t r = 0; r < ff; ++r) {
        double gs = bias(L.gate_exps_b, e * ff + r), us = bias(L.up_exps_b, e * ff + r);
        for (int64_t i = 0; i < d; ++i) {
          gs += double(g[r * d + i]) * h[i];
          us += double(u[r * d + i]) * h[i];
        }
        if (f.activation == ExpertActivation::kSwiGluOai) {
          if (clamped != nullptr) *clamped += gs > f.limit;
          const double x = std::min<double>(gs, f.limit);
          const double y = std::clamp<double>(us, -f.limit, f.limit);
          act[r] = x / (1 + std::exp(-f.alpha * x)) * (y + 1);
        } else {
          act[r] = gs / (1 + std::exp(-gs)) * us;
        }
      }
      for (int64_t i = 0; i < d; ++i) {
        double sum = bias(L.down_exps_b, e * d + i);
        for (int64_t r = 0; r < ff; ++r) sum += double(dn[i * ff + r]) * act[r];
        out[t * d + i] += c.weights[k] * sum;
      }
    }
  }
  return out;
}

// A call with varying numbers of experts per token (including none).
ExpertCall RandomCall(const Model& m, int layer, int n_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const HyperParams& hp = m.hparams();
  ExpertCall c;
  c.call_id = seed;
  c.layer = layer;
  c.n_tokens = n_tokens;
  c.d = static_cast<int32_t>(hp.n_embd);
  c.hidden.resize(n_tokens * hp.n_embd);
  for (float& v : c.hidden) v = u(rng);
  c.token_offsets.push_back(0);
  for (int t = 0; t < n_tokens; ++t) {
    const int k = t % 4 == 3 ? 0 : 1 + t % static_cast<int>(hp.n_expert_used);
    for (int j = 0; j < k; ++j) {
      c.expert_ids.push_back(static_cast<int32_t>((t * 3 + j * 5) % hp.n_expert));
      c.weights.push_back(0.25f + 0.5f * std::abs(u(rng)));
    }
    c.token_offsets.push_back(static_cast<uint32_t>(c.expert_ids.size()));
  }
  return c;
}

struct TypeCase {
  GgmlType type;
  double max_nmse;
};

class InProcessExpertsTest : public ::testing::TestWithParam<TypeCase> {};

TEST_P(InProcessExpertsTest, MatchesNaiveDequantisedComputation) {
  TinyModelOptions o;
  o.matrix_type = GetParam().type;
  o.n_expert = 6;
  o.n_expert_used = 3;
  auto model = MakeTinyModel(o);
  ASSERT_TRUE(model.ok()) << model.status();
  ThreadPool pool(2);
  InProcessExperts experts(ExpertStore(*model), &pool);
  for (int layer = 0; layer < 2; ++layer) {
    const ExpertCall call = RandomCall(**model, layer, 7, 10 + layer);
    ExpertResult res;
    ASSERT_TRUE(experts.Compute(call, &res).ok());
    EXPECT_EQ(res.call_id, call.call_id);
    const std::vector<double> want = Naive(**model, call);
    ASSERT_EQ(res.partial.size(), want.size());
    double err = 0, ref = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += (res.partial[i] - want[i]) * (res.partial[i] - want[i]);
      ref += want[i] * want[i];
    }
    EXPECT_GT(ref, 0);
    EXPECT_LE(err / ref, GetParam().max_nmse) << GgmlTypeName(GetParam().type) << " layer "
                                              << layer;
    // Token 3 has no experts: its partial is exactly zero.
    for (int64_t i = 0; i < o.n_embd; ++i) EXPECT_EQ(res.partial[3 * o.n_embd + i], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, InProcessExpertsTest,
                         ::testing::Values(TypeCase{GgmlType::kF32, 1e-10},
                                           TypeCase{GgmlType::kF16, 1e-5},
                                           TypeCase{GgmlType::kQ8_0, 1e-4},
                                           TypeCase{GgmlType::kQ4_0, 1e-2}));

TEST(InProcessExpertsTest, ThreadCountDoesNotChangeResults) {
  TinyModelOptions o;
  o.matrix_type = GgmlType::kQ8_0;
  auto model = MakeTinyModel(o);
  ASSERT_TRUE(model.ok()) << model.status();
  ThreadPool pool(2);
  InProcessExperts threaded(ExpertStore(*model), &pool);
  InProcessExperts single(ExpertStore(*model), nullptr);
  const ExpertCall call = RandomCall(**model, 1, 9, 3);
  ExpertResult a, b;
  ASSERT_TRUE(threaded.Compute(call, &a).ok());
  ASSERT_TRUE(single.Compute(call, &b).ok());
  EXPECT_EQ(a.partial, b.partial);
}

// Calls of up to 4 tokens with at least 2 experts per thread run the decode
// split (whole-expert items, then a reduction phase); larger calls run the
// batched schedule. A token's partial must not depend on which: the first n
// tokens of a 6-token call, sent alone, give the same bits.
// The read-only roofline reads each distinct expert's three matrices once:
// the sum is SumWords over exactly those bytes, on 1 or 3 threads.
TEST(ReadExpertWeightsTest, SumsTheDistinctExpertsBytes) {
  constexpr int kExperts = 6;
  constexpr uint64_t kBytes = 512;  // per expert and matrix (a multiple of 128)
  std::vector<uint8_t> buf[3];
  LayerExperts le;
  ExpertTensorView* views[3] = {&le.gate, &le.up, &le.down};
  for (int k = 0; k < 3; ++k) {
    buf[k].resize(kExperts * kBytes);
    for (size_t i = 0; i < buf[k].size(); ++i) buf[k][i] = static_cast<uint8_t>(i * 7 + k * 13);
    views[k]->data = buf[k].data();
    views[k]->n_expert = kExperts;
    views[k]->expert_bytes = kBytes;
  }
  const std::vector<int32_t> ids = {4, 1, 4, 0, 1, 5};
  uint64_t want = 0;
  for (int32_t e : {0, 1, 4, 5}) {
    for (int k = 0; k < 3; ++k) want += SumWords(buf[k].data() + e * kBytes, kBytes);
  }
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(ReadExpertWeights(le, ids, &pool), want) << threads;
  }
}

TEST(InProcessExpertsTest, DecodeSplitGivesTheBitsOfTheBatchedSchedule) {
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K}) {
    TinyModelOptions o;
    o.n_embd = 256;
    o.n_ff_exp = 512;
    o.head_dim = 64;
    o.n_expert = 16;
    o.n_expert_used = 8;
    o.matrix_type = type;
    o.type_overrides["blk.1.ffn_down_exps.weight"] = type == GgmlType::kQ4_K ? GgmlType::kQ6_K : type;
    auto model = MakeTinyModel(o);
    ASSERT_TRUE(model.ok()) << model.status();
    const Model& m = **model;
    ThreadPool pool2(2), pool3(3);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      // Packed where the CPU reads it fastest, as the worker does.
      InProcessExperts experts(LocalExpertStore(*model, p), p);
      for (int layer = 0; layer < m.n_layer(); ++layer) {
        std::mt19937 rng(7 + layer);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        ExpertCall big;
        big.call_id = 1;
        big.layer = layer;
        big.n_tokens = 6;
        big.d = static_cast<int32_t>(o.n_embd);
        big.hidden.resize(6 * o.n_embd);
        for (float& v : big.hidden) v = u(rng);
        big.token_offsets.push_back(0);
        for (int t = 0; t < 6; ++t) {
          for (int j = 0; j < 8; ++j) {  // 8 distinct experts per token
            big.expert_ids.push_back(static_cast<int32_t>((t * 5 + j * 3) % o.n_expert));
            big.weights.push_back(0.1f + 0.3f * std::abs(u(rng)));
          }
          big.token_offsets.push_back(static_cast<uint32_t>(big.expert_ids.size()));
        }
        ExpertResult whole;
        ASSERT_TRUE(experts.Compute(big, &whole).ok());
        for (int n = 1; n <= 4; ++n) {
          ExpertCall small = big;
          small.n_tokens = n;
          small.hidden.resize(n * o.n_embd);
          small.token_offsets.resize(n + 1);
          small.expert_ids.resize(8 * n);
          small.weights.resize(8 * n);
          ExpertResult part;
          ASSERT_TRUE(experts.Compute(small, &part).ok());
          ASSERT_EQ(part.partial.size(), static_cast<size_t>(n * o.n_embd));
          EXPECT_TRUE(std::equal(part.partial.begin(), part.partial.end(), whole.partial.begin()))
              << GgmlTypeName(type) << ", layer " << layer << ", " << n << " tokens, "
              << (p == nullptr ? 1 : p->size()) << " threads";
        }
      }
    }
  }
}

TEST(InProcessExpertsTest, GptOssBiasesAndClampedSwiGluMatchNaive) {
  auto model = Model::Open(std::string(MOESPLIT_FIXTURES_DIR) + "/models/gptoss-tiny-f16.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->hparams().expert_ffn.activation, ExpertActivation::kSwiGluOai);
  ThreadPool pool(2);
  InProcessExperts plain(ExpertStore(*model), &pool);
  InProcessExperts local(LocalExpertStore(*model, &pool), &pool);
  int clamped = 0;
  for (int n_tokens : {1, 7}) {
    ExpertCall call = RandomCall(**model, 1, n_tokens, 40 + n_tokens);
    for (float& x : call.hidden) x *= 6.0f;  // gate values past the clamp too
    const std::vector<double> want = Naive(**model, call, &clamped);
    for (InProcessExperts* experts : {&plain, &local}) {
      ExpertResult res;
      ASSERT_TRUE(experts->Compute(call, &res).ok());
      double err = 0, ref = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        err += (res.partial[i] - want[i]) * (res.partial[i] - want[i]);
        ref += want[i] * want[i];
      }
      EXPECT_GT(ref, 0);
      EXPECT_LE(err / ref, 1e-5) << n_tokens << " tokens";
    }
  }
  EXPECT_GT(clamped, 0);
}

struct BadCallCase {
  std::string label;
  std::function<void(ExpertCall*)> edit;
  std::string message;
};

class BadCallTest : public ::testing::TestWithParam<BadCallCase> {};

TEST_P(BadCallTest, IsInvalidArgument) {
  auto model = MakeTinyModel(TinyModelOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  InProcessExperts experts(ExpertStore(*model), nullptr);
  ExpertCall call = RandomCall(**model, 0, 5, 1);
  GetParam().edit(&call);
  ExpertResult res;
  const absl::Status st = experts.Compute(call, &res);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << GetParam().label << ": " << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(GetParam().message)) << GetParam().label;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadCallTest,
    ::testing::Values(
        BadCallCase{"layer_high", [](ExpertCall* c) { c->layer = 2; }, "layer 2 out of range"},
        BadCallCase{"layer_negative", [](ExpertCall* c) { c->layer = -1; }, "layer -1"},
        BadCallCase{"expert_id", [](ExpertCall* c) { c->expert_ids[0] = 4; },
                    "expert id 4 out of range"},
        BadCallCase{"negative_id", [](ExpertCall* c) { c->expert_ids[1] = -2; }, "expert id -2"},
        BadCallCase{"nan_weight", [](ExpertCall* c) { c->weights[2] = NAN; }, "not finite"},
        BadCallCase{"inf_weight", [](ExpertCall* c) { c->weights[0] = INFINITY; }, "not finite"},
        BadCallCase{"d", [](ExpertCall* c) { c->d = 32; }, "d = 32"},
        BadCallCase{"hidden_size", [](ExpertCall* c) { c->hidden.pop_back(); }, "hidden has"},
        BadCallCase{"offsets_size", [](ExpertCall* c) { c->token_offsets.pop_back(); },
                    "token_offsets has"},
        BadCallCase{"offsets_start", [](ExpertCall* c) { c->token_offsets[0] = 1; },
                    "token_offsets[0]"},
        BadCallCase{"offsets_decrease",
                    [](ExpertCall* c) { c->token_offsets[2] = c->token_offsets[1] - 1; },
                    "decrease"},
        BadCallCase{"weights_size", [](ExpertCall* c) { c->weights.pop_back(); }, "weights"},
        BadCallCase{"negative_tokens", [](ExpertCall* c) { c->n_tokens = -1; }, "negative"}),
    [](const auto& info) { return info.param.label; });

TEST(InProcessExpertsTest, EmptyCallGivesEmptyResult) {
  auto model = MakeTinyModel(TinyModelOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  InProcessExperts experts(ExpertStore(*model), nullptr);
  ExpertCall call;
  call.call_id = 77;
  call.d = 64;
  call.token_offsets = {0};
  ExpertResult res;
  ASSERT_TRUE(experts.Compute(call, &res).ok());
  EXPECT_EQ(res.call_id, 77u);
  EXPECT_TRUE(res.partial.empty());
}

}  // namespace
}  // namespace moesplit::model

namespace moesplit::model {
namespace {

// Experts copied into the packed layout (quant/packed.h) give the bits of the
// GGUF mapping, for decode and prefill calls, with and without threads.
TEST(PackedExpertsTest, EqualGgufExpertsBitForBit) {
  TinyModelOptions o;
  o.n_embd = 256;
  o.n_ff_exp = 256;
  o.head_dim = 64;  // 4 heads x 64: whole Q4_K superblocks
  o.matrix_type = GgmlType::kQ4_K;
  o.type_overrides["blk.1.ffn_down_exps.weight"] = GgmlType::kQ6_K;
  // Q5_0 (where K-quant files' rows are not whole superblocks): its GGUF
  // dots are canonical only on the SIMD levels, where it is packed.
  const bool q5_0 = quant::PackedPreferred(GgmlType::kQ5_0);
  if (q5_0) o.type_overrides["blk.0.ffn_down_exps.weight"] = GgmlType::kQ5_0;
  auto model = MakeTinyModel(o);
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  // Every tensor packed, whatever the CPU (PackedGemm falls back to its
  // scalar kernel without VNNI).
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  std::vector<LayerExperts> layers;
  for (int l = 0; l < m.n_layer(); ++l) {
    const LayerWeights& lw = m.layer(l);
    LayerExperts le;
    ExpertTensorView* out[3] = {&le.gate, &le.up, &le.down};
    const ExpertTensorView* in[3] = {&lw.gate_exps, &lw.up_exps, &lw.down_exps};
    for (int k = 0; k < 3; ++k) {
      const int n = static_cast<int>(in[k]->n_expert);
      buffers.emplace_back(new uint8_t[CopiedExpertBytes(*in[k], 0, n, true)]);
      *out[k] = CopyExperts(*in[k], 0, n, true, buffers.back().get());
      EXPECT_TRUE(out[k]->packed) << "layer " << l << " tensor " << k;
    }
    layers.push_back(le);
  }
  ExpertStore packed(layers, m.n_layer(), static_cast<int>(m.hparams().n_expert), 0, 0, m.hparams().n_embd,
                     m.hparams().n_ff_exp);
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    InProcessExperts gguf(ExpertStore(*model), p);
    InProcessExperts pk(packed, p);
    InProcessExperts local(LocalExpertStore(*model, p), p);
    for (int layer = 0; layer < m.n_layer(); ++layer) {
      for (int n_tokens : {1, 2, 5, 9, 40}) {
        const ExpertCall call = RandomCall(m, layer, n_tokens, 10 * n_tokens + layer);
        ExpertResult a, b, c;
        ASSERT_TRUE(gguf.Compute(call, &a).ok());
        ASSERT_TRUE(pk.Compute(call, &b).ok());
        ASSERT_TRUE(local.Compute(call, &c).ok());
        EXPECT_EQ(a.partial, b.partial) << "layer " << layer << ", " << n_tokens << " tokens";
        EXPECT_EQ(a.partial, c.partial) << "local store, layer " << layer << ", " << n_tokens << " tokens";
      }
    }
  }
  // Sizes: Q4_K packs to 2368 bytes per 16 rows x 256 columns, Q6_K to its
  // GGUF size.
  EXPECT_EQ(layers[0].gate.expert_bytes, 256u / 16 * 2368);
  EXPECT_EQ(layers[1].down.expert_bytes, m.layer(1).down_exps.expert_bytes);
  if (q5_0) {
    EXPECT_EQ(layers[0].down.expert_bytes, m.layer(0).down_exps.expert_bytes);  // 16 x 22 bytes a block
  }
}

// A type without a packed layout is copied as it is. (Every valid row of a
// 32-column packed type fits its layout; K-quant shapes that do not are
// refused by PackedMatrixBytes, see packed_test.)
TEST(PackedExpertsTest, UnpackableTypesAreCopiedUnchanged) {
  TinyModelOptions o;
  o.matrix_type = GgmlType::kQ4_0;
  auto model = MakeTinyModel(o);
  ASSERT_TRUE(model.ok()) << model.status();
  const ExpertTensorView& src = (*model)->layer(0).gate_exps;
  std::vector<uint8_t> buf(CopiedExpertBytes(src, 1, 3, true));
  EXPECT_EQ(buf.size(), 2 * src.expert_bytes);
  const ExpertTensorView v = CopyExperts(src, 1, 3, true, buf.data());
  EXPECT_FALSE(v.packed);
  EXPECT_EQ(v.n_expert, 2);
  EXPECT_EQ(0, std::memcmp(buf.data(), src.data + src.expert_bytes, buf.size()));
}

}  // namespace
}  // namespace moesplit::model
