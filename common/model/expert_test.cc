// InProcessExperts against a naive computation from dequantised weights, and
// ExpertCall validation.
#include "common/model/expert.h"

#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/model/testing/tiny_model.h"
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

// partial[t] = sum_k w_k * down(silu(gate h) * up h), in double.
std::vector<double> Naive(const Model& m, const ExpertCall& c) {
  const LayerWeights& L = m.layer(c.layer);
  const int64_t d = c.d, ff = L.gate_exps.n_out;
  std::vector<double> out(c.n_tokens * d, 0.0);
  for (int t = 0; t < c.n_tokens; ++t) {
    const float* h = c.hidden.data() + t * d;
    for (uint32_t k = c.token_offsets[t]; k < c.token_offsets[t + 1]; ++k) {
      const int e = c.expert_ids[k];
      const auto g = DequantExpert(L.gate_exps, e), u = DequantExpert(L.up_exps, e),
                 dn = DequantExpert(L.down_exps, e);
      std::vector<double> act(ff);
      for (int64_t r = 0; r < ff; ++r) {
        double gs = 0, us = 0;
        for (int64_t i = 0; i < d; ++i) {
          gs += double(g[r * d + i]) * h[i];
          us += double(u[r * d + i]) * h[i];
        }
        act[r] = gs / (1 + std::exp(-gs)) * us;
      }
      for (int64_t i = 0; i < d; ++i) {
        double s = 0;
        for (int64_t r = 0; r < ff; ++r) s += double(dn[i * ff + r]) * act[r];
        out[t * d + i] += c.weights[k] * s;
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
