// Tests of the forward pass's small ops against direct formulas.
#include "common/model/internal/ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/base/fp16.h"

namespace moesplit::model::internal {
namespace {

// RmsNormRows (16 rows per AVX-512 pass, strided, in place) gives
// RmsNorm's bits for every row.
TEST(RmsNormTest, RowsEqualRmsNormPerRow) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t n : {1, 7, 128, 2048}) {
    for (int64_t rows : {1, 15, 16, 17, 40}) {
      const int64_t stride = n + 3;
      std::vector<float> x(rows * stride), w(n);
      for (float& v : x) v = u(rng) * (rng() % 7 == 0 ? 1e-3f : 1.0f);
      for (float& v : w) v = u(rng);
      std::vector<float> want(rows * n), got(rows * n), inplace = x;
      for (int64_t r = 0; r < rows; ++r) {
        RmsNorm(x.data() + r * stride, w.data(), n, 1e-6f, want.data() + r * n);
      }
      RmsNormRows(x.data(), stride, w.data(), rows, n, 1e-6f, got.data(), n);
      RmsNormRows(inplace.data(), stride, nullptr, rows, n, 1e-6f, inplace.data(), stride);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> no_w(n);
        RmsNorm(x.data() + r * stride, nullptr, n, 1e-6f, no_w.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(Fp32ToBits(got[r * n + i]), Fp32ToBits(want[r * n + i]))
              << "n " << n << " rows " << rows << " row " << r << " i " << i;
          ASSERT_EQ(Fp32ToBits(inplace[r * stride + i]), Fp32ToBits(no_w[i]))
              << "n " << n << " rows " << rows << " row " << r << " i " << i;
        }
      }
    }
  }
}

TEST(RmsNormTest, MatchesFormula) {
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, 0.5f};
  const std::vector<float> w = {1.0f, 2.0f, 0.5f, -1.0f};
  std::vector<float> y(4);
  RmsNorm(x.data(), w.data(), 4, 1e-6f, y.data());
  double ms = 0;
  for (float v : x) ms += v * v;
  ms /= 4;
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(y[i], x[i] / std::sqrt(ms + 1e-6) * w[i], 1e-6) << i;
  }
  RmsNorm(x.data(), nullptr, 4, 1e-6f, y.data());
  EXPECT_NEAR(y[2], 3.0 / std::sqrt(ms + 1e-6), 1e-6);
}

// ggml's GELU table: the input and the result rounded to f16, the tails
// exact.
TEST(GeluTest, FollowsGgmlsF16Table) {
  EXPECT_EQ(GeluF16Table(-10.0f), 0.0f);
  EXPECT_EQ(GeluF16Table(-12.5f), 0.0f);
  EXPECT_EQ(GeluF16Table(10.0f), 10.0f);
  EXPECT_EQ(GeluF16Table(11.3f), 11.3f);
  EXPECT_EQ(GeluF16Table(0.0f), 0.0f);
  // gelu(1) = 0.841192, the nearest f16 is 1723 / 2048.
  EXPECT_EQ(GeluF16Table(1.0f), 1723.0f / 2048.0f);
  for (float x : {-3.7f, -0.41f, 0.0013f, 0.5f, 2.2f, 7.9f}) {
    const float h = Fp16ToFp32(Fp32ToFp16(x));
    const double g = 0.5 * h * (1.0 + std::tanh(0.7978845608 * h * (1.0 + 0.044715 * h * h)));
    const float got = GeluF16Table(x);
    EXPECT_EQ(got, Fp16ToFp32(Fp32ToFp16(got))) << x;  // an f16 value
    EXPECT_NEAR(got, g, std::abs(g) * 1e-3 + 1e-6) << x;
    EXPECT_EQ(GeluF16Table(h), got) << x;  // only the f16 input counts
  }
  const float gate[3] = {1.0f, -11.0f, 12.0f}, up[3] = {2.0f, 5.0f, 0.5f};
  float out[3];
  GeGlu(gate, up, 3, out);
  EXPECT_EQ(out[0], 2.0f * 1723.0f / 2048.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 6.0f);
}

TEST(SoftmaxTest, LongRowsMatchFormula) {
  // 40 values: two blocks of 16 through GgmlVExpf, a tail of 8 through expf.
  std::vector<float> x(40);
  for (int i = 0; i < 40; ++i) x[i] = std::sin(0.7f * i) * 3.0f;
  std::vector<float> y = x;
  Softmax(y.data(), 40);
  double mx = -INFINITY, sum = 0;
  for (float v : x) mx = std::max<double>(mx, v);
  for (float v : x) sum += std::exp(v - mx);
  double total = 0;
  for (int i = 0; i < 40; ++i) {
    EXPECT_NEAR(y[i], std::exp(x[i] - mx) / sum, 1e-6) << i;
    total += y[i];
  }
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(SoftmaxTest, SumsToOneAndIsShiftInvariant) {
  std::vector<float> a = {1.0f, 2.0f, 3.0f, -100.0f};
  std::vector<float> b = {1001.0f, 1002.0f, 1003.0f, 900.0f};
  Softmax(a.data(), 4);
  Softmax(b.data(), 4);
  float sum = 0;
  for (int i = 0; i < 4; ++i) {
    sum += a[i];
    EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  }
  EXPECT_NEAR(sum, 1.0f, 1e-6);
  EXPECT_NEAR(a[2] / a[1], std::exp(1.0), 1e-5);
}

struct TopKCase {
  std::vector<float> logits;
  int k;
  bool normalize;
  std::vector<int32_t> ids;
};

class SelectExpertsTest : public ::testing::TestWithParam<TopKCase> {};

TEST_P(SelectExpertsTest, PicksLargestWithLowerIdOnTies) {
  const TopKCase& c = GetParam();
  std::vector<float> probs = c.logits;
  Softmax(probs.data(), static_cast<int64_t>(probs.size()));
  std::vector<float> logits = c.logits;
  std::vector<int32_t> ids(c.k);
  std::vector<float> w(c.k);
  SelectExperts(logits.data(), static_cast<int>(logits.size()), c.k, c.normalize, ids.data(),
                w.data());
  EXPECT_EQ(ids, c.ids) << "k=" << c.k;
  float sel_sum = 0;
  for (int i = 0; i < c.k; ++i) sel_sum += probs[c.ids[i]];
  for (int i = 0; i < c.k; ++i) {
    const float want = c.normalize ? probs[c.ids[i]] / sel_sum : probs[c.ids[i]];
    EXPECT_NEAR(w[i], want, 1e-6) << "entry " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SelectExpertsTest,
    ::testing::Values(TopKCase{{0.1f, 2.0f, -1.0f, 1.5f}, 2, true, {1, 3}},
                      TopKCase{{0.1f, 2.0f, -1.0f, 1.5f}, 2, false, {1, 3}},
                      TopKCase{{1.0f, 1.0f, 1.0f, 1.0f}, 2, false, {0, 1}},
                      TopKCase{{0.0f, 3.0f, 3.0f, 5.0f, 3.0f}, 3, true, {3, 1, 2}},
                      TopKCase{{-5.0f, -1.0f, -3.0f}, 1, true, {1}},
                      TopKCase{{0.5f, 0.25f, 0.125f}, 3, false, {0, 1, 2}}));

TEST(SelectExpertsTest, NormalizedWeightsSumToOne) {
  std::vector<float> logits = {0.3f, -0.2f, 0.9f, 0.1f, 0.0f, 0.8f, -1.0f, 0.4f};
  int32_t ids[4];
  float w[4];
  SelectExperts(logits.data(), 8, 4, true, ids, w);
  EXPECT_NEAR(w[0] + w[1] + w[2] + w[3], 1.0f, 1e-6);
  EXPECT_THAT(ids, ::testing::ElementsAre(2, 5, 7, 0));
}

// Direct RoPE formula in double: theta_i = pos * base^(-2i/n_rot).
// gpt-oss's router: top-k of the raw logits, softmax over those k only.
TEST(SelectExpertsTest, SoftmaxOfTopKWeighsOnlyTheSelected) {
  const float logits[8] = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f, -7.0f, 0.0f, 1.0f};
  int32_t ids[3];
  float w[3];
  SelectExpertsSoftmaxOfTopK(logits, 8, 3, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);  // the tie goes to the lower id first
  EXPECT_EQ(ids[2], 4);
  const double z = 2 * std::exp(0.0) + std::exp(-1.0);
  EXPECT_NEAR(w[0], 1 / z, 1e-6);
  EXPECT_NEAR(w[1], 1 / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(-1.0) / z, 1e-6);
  EXPECT_EQ(logits[5], -7.0f);  // unchanged
}

// deepseek2's router: sigmoid scores, a bias that chooses but does not
// weigh, the best groups only, normalised weights times the scale.
TEST(SelectExpertsTest, GeneralRouterGroupsBiasAndScale) {
  // 8 experts in 4 groups of 2; logits 0 everywhere but expert 1 (group 0)
  // and 6, 7 (group 3).
  float logits[8] = {0, 2, 0, 0, 0, 0, 1, 1};
  const float bias[8] = {0, 0, 0, 0, 0, 0.9f, 0, 0};  // lifts expert 5 (group 2)
  RouterChoice rc;
  rc.scoring = RouterSpec::Scoring::kSigmoid;
  rc.n_expert = 8;
  rc.k = 3;
  rc.normalize = true;
  rc.scale = 2.5f;
  rc.bias = bias;
  rc.n_groups = 4;
  rc.n_group_used = 2;
  int32_t ids[3];
  float w[3];
  SelectExpertsGeneral(rc, logits, ids, w);
  // Group sums of the two best biased scores: g0 = s(2) + s(0) = 1.38,
  // g2 = s(0) + s(0) + 0.9 = 1.9, g3 = 2 s(1) = 1.46: groups 2 and 3 win
  // although expert 1 has the largest score; then 5 (biased) > 6 = 7.
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 6);
  EXPECT_EQ(ids[2], 7);
  const float s0 = 0.5f, s1 = 1.0f / (1.0f + std::exp(-1.0f));
  const float sum = s0 + 2 * s1;
  EXPECT_NEAR(w[0], s0 / sum * 2.5f, 1e-6);  // unbiased score
  EXPECT_NEAR(w[1], s1 / sum * 2.5f, 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2], 2.5f, 1e-5);
  // Without groups expert 1 (group 0) is chosen, after the biased 5.
  float again[8] = {0, 2, 0, 0, 0, 0, 1, 1};
  rc.n_groups = 0;
  SelectExpertsGeneral(rc, again, ids, w);
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 1);
}

TEST(RopeTest, NormRotatesAdjacentPairs) {
  RopeParams p;
  p.n_rot = 4;
  RopeAngles a;
  ComputeRopeAngles(p, 3, &a);
  float x[6] = {1, 2, 3, 4, 5, 6};
  ApplyRopeNorm(a, 4, x);
  EXPECT_NEAR(x[0], 1 * a.cos[0] - 2 * a.sin[0], 1e-6);
  EXPECT_NEAR(x[1], 1 * a.sin[0] + 2 * a.cos[0], 1e-6);
  EXPECT_NEAR(x[2], 3 * a.cos[1] - 4 * a.sin[1], 1e-6);
  EXPECT_NEAR(x[3], 3 * a.sin[1] + 4 * a.cos[1], 1e-6);
  EXPECT_EQ(x[4], 5);
  EXPECT_EQ(x[5], 6);
}

TEST(RopeTest, NeoxMatchesDirectFormula) {
  RopeParams p;
  p.n_rot = 16;
  p.freq_base = 1e6f;
  const int64_t head_dim = 20;  // last 4 dims not rotated
  for (int64_t pos : {0, 1, 7, 100, 1000}) {
    std::vector<float> x(head_dim);
    for (int64_t i = 0; i < head_dim; ++i) x[i] = std::sin(0.37 * (i + 1)) + 0.1 * i;
    std::vector<float> y = x;
    RopeAngles a;
    ComputeRopeAngles(p, pos, &a);
    ApplyRopeNeox(a, p.n_rot, y.data());
    const int64_t half = p.n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
      const double theta = pos * std::pow(1e6, -2.0 * i / p.n_rot);
      const double y0 = x[i] * std::cos(theta) - x[i + half] * std::sin(theta);
      const double y1 = x[i] * std::sin(theta) + x[i + half] * std::cos(theta);
      const double tol = 2e-6 * (1 + pos);
      EXPECT_NEAR(y[i], y0, tol) << "pos " << pos << " i " << i;
      EXPECT_NEAR(y[i + half], y1, tol) << "pos " << pos << " i " << i;
    }
    for (int64_t i = p.n_rot; i < head_dim; ++i) EXPECT_EQ(y[i], x[i]) << i;
  }
}

TEST(RopeTest, LinearScalingDividesPositions) {
  RopeParams p;
  p.n_rot = 8;
  p.freq_base = 10000.0f;
  p.scaling = RopeScaling::kLinear;
  p.freq_scale = 0.25f;
  RopeAngles a;
  ComputeRopeAngles(p, 40, &a);
  for (int64_t i = 0; i < 4; ++i) {
    const double theta = 10.0 * std::pow(10000.0, -2.0 * i / 8);
    EXPECT_NEAR(a.cos[i], std::cos(theta), 1e-5) << i;
    EXPECT_NEAR(a.sin[i], std::sin(theta), 1e-5) << i;
  }
}

// YaRN: dims below corr[0] keep the extrapolated angle, dims above corr[1]
// the interpolated one; both scaled by mscale = 1 + 0.1 ln(1/freq_scale).
TEST(RopeTest, YarnMixesInterpolationAndExtrapolation) {
  RopeParams p;
  p.n_rot = 64;
  p.freq_base = 10000.0f;
  p.scaling = RopeScaling::kYarn;
  p.freq_scale = 0.25f;
  p.ext_factor = 1.0f;
  p.n_ctx_orig = 4096;
  float corr[2];
  RopeYarnCorrDims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr);
  // corr_dim(b) = n_rot * ln(n_ctx / (b * 2pi)) / (2 ln base)
  auto dim = [&](double b) {
    return 64 * std::log(4096 / (b * 2 * M_PI)) / (2 * std::log(10000.0));
  };
  EXPECT_EQ(corr[0], std::floor(dim(32)));
  EXPECT_EQ(corr[1], std::ceil(dim(1)));
  ASSERT_LT(corr[1], 31);
  RopeAngles a;
  const int64_t pos = 50;
  ComputeRopeAngles(p, pos, &a);
  const double mscale = 1 + 0.1 * std::log(4.0);
  for (int64_t i : {0, 1, 31}) {
    const double extrap = pos * std::pow(10000.0, -2.0 * i / 64);
    const double theta = i <= corr[0] ? extrap : (i >= corr[1] ? extrap * 0.25 : -1);
    ASSERT_GE(theta, 0) << i;
    EXPECT_NEAR(a.cos[i], std::cos(theta) * mscale, 1e-4) << i;
    EXPECT_NEAR(a.sin[i], std::sin(theta) * mscale, 1e-4) << i;
  }
}

TEST(ArgmaxTest, TiesPickLowerIndex) {
  const std::vector<float> x = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(Argmax(x.data(), 4), 1);
  EXPECT_EQ(Argmax(x.data(), 1), 0);
}

// The vector path (16 values or more) gives the scalar scan's index on
// ties in every lane, NaNs anywhere, -inf, signed zeros and every tail
// length.
TEST(ArgmaxTest, VectorPathIsTheScalarScan) {
  auto scalar = [](const std::vector<float>& x) {
    int64_t best = 0;
    for (int64_t i = 1; i < static_cast<int64_t>(x.size()); ++i) {
      if (x[i] > x[best]) best = i;
    }
    return best;
  };
  const float nan = std::nanf(""), inf = INFINITY;
  std::mt19937 rng(7);
  int cases = 0;
  for (int64_t n : {16, 17, 31, 32, 33, 47, 64, 100, 257, 1000, 201088}) {
    for (int kind = 0; kind < 8; ++kind) {
      std::vector<float> x(n);
      // Few distinct values, so that the largest repeats across lanes.
      for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 5)) - 2.0f;
      switch (kind) {
        case 1: x[rng() % n] = nan; x[rng() % n] = nan; break;
        case 2: x[0] = nan; break;
        case 3: for (int64_t i = 5; i < n; i += 16) x[i] = nan; break;  // a lane of NaNs
        case 4: for (float& v : x) v = -inf; break;
        case 5: for (float& v : x) v = (rng() & 1) ? 0.0f : -0.0f; break;
        case 6: x[n - 1] = 9.0f; break;                         // the tail wins
        case 7: x[rng() % n] = inf; x[rng() % n] = nan; break;
        default: break;
      }
      EXPECT_EQ(Argmax(x.data(), n), scalar(x)) << "n " << n << " kind " << kind;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 88);
}

TEST(GgmlVExpfTest, WithinTwoUlpOfExpAndSaturates) {
  for (float x = -87.0f; x < 88.0f; x += 0.173f) {  // normal results
    const double want = std::exp(double(x));
    EXPECT_NEAR(GgmlVExpf(x), want, 2.5 * std::abs(want) * 0x1p-23) << x;
  }
  EXPECT_EQ(GgmlVExpf(0.0f), 1.0f);
  EXPECT_EQ(GgmlVExpf(-200.0f), 0.0f);
  EXPECT_EQ(GgmlVExpf(200.0f), INFINITY);
}

TEST(SwiGluTest, MatchesFormulaInVectorBodyAndTail) {
  // Rows of 19: 16 elements through GgmlVExpf, 3 through expf.
  const int64_t rows = 2, cols = 19;
  std::vector<float> g(rows * cols), u(rows * cols), out(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    g[i] = -6.0f + 0.33f * i;
    u[i] = 1.0f - 0.05f * i;
  }
  SwiGlu(g.data(), u.data(), rows, cols, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const double want = g[i] / (1 + std::exp(-double(g[i]))) * u[i];
      EXPECT_NEAR(out[i], want, 1e-6 * (1 + std::abs(want))) << i;
      if (c >= 16) {
        EXPECT_EQ(out[i], g[i] / (1.0f + std::exp(-g[i])) * u[i]) << "tail " << i;
      } else {
        EXPECT_EQ(out[i], g[i] / (1.0f + GgmlVExpf(-g[i])) * u[i]) << "body " << i;
      }
    }
  }
  EXPECT_NEAR(Sigmoid(0.0f), 0.5f, 1e-7);
}

// SiluVector's AVX-512 and AVX2 lanes give the scalar expression's bits for
// every input class: ordinary values, ones whose exp(-x) overflows or is
// subnormal or zero, infinities and NaN (compared as bits).
TEST(SiluVectorTest, EveryLaneIsTheScalarExpression) {
  std::vector<float> x;
  for (int i = 0; i < 4000; ++i) x.push_back(-90.0f + 0.0451f * i);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 87.5f, 88.8f, 103.0f, 104.0f, 150.0f, 191.9f, 250.0f,
                  -87.5f, -88.8f, -100.0f, -150.0f, -250.0f, INFINITY, -INFINITY, NAN, 3.0f}) {
    x.push_back(v);
  }
  while (x.size() % kGgmlVectorWidth != 0) x.push_back(0.5f);
  std::vector<float> u(x.size());
  for (size_t i = 0; i < u.size(); ++i) u[i] = 1.5f - 0.001f * static_cast<float>(i);
  auto bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  std::vector<int> lanes = {1};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lanes.push_back(8);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) lanes.push_back(16);
#endif
  for (int l : lanes) {
    std::vector<float> with_u(x.size()), alone(x.size());
    SiluVectorLanes(l, x.data(), u.data(), static_cast<int64_t>(x.size()), with_u.data());
    SiluVectorLanes(l, x.data(), nullptr, static_cast<int64_t>(x.size()), alone.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float s = x[i] / (1.0f + GgmlVExpf(0.0f - x[i]));
      ASSERT_EQ(bits(alone[i]), bits(s)) << l << " lanes, x = " << x[i];
      ASSERT_EQ(bits(with_u[i]), bits(s * u[i])) << l << " lanes, x = " << x[i];
    }
  }
  SiluVector(x.data(), u.data(), 16, u.data());  // the dispatch, in place
}

}  // namespace
}  // namespace moesplit::model::internal
