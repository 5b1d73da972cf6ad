// The f16 attention kernels: values against direct formulas, ggml's
// summation order, and bit-identity of the vector and scalar forms.
#include "common/model/internal/attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "common/base/fp16.h"

namespace moesplit::model::internal {
namespace {

std::vector<uint16_t> RandomF16(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = Fp32ToFp16(u(rng));
  return v;
}

class DotF16Test : public ::testing::TestWithParam<int64_t> {};

TEST_P(DotF16Test, MatchesExactSumAndScalarForm) {
  const int64_t n = GetParam();
  const auto x = RandomF16(n, 1), y = RandomF16(n, 2);
  double exact = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    exact += double(Fp16ToFp32(x[i])) * Fp16ToFp32(y[i]);
    mag += std::abs(double(Fp16ToFp32(x[i])) * Fp16ToFp32(y[i]));
  }
  const float fast = DotF16(n, x.data(), y.data());
  const float scalar = DotF16(n, x.data(), y.data(), F16Kernels::kScalar);
  const float avx2 = DotF16(n, x.data(), y.data(), F16Kernels::kAvx2);
  EXPECT_NEAR(fast, exact, 1e-6 * mag + 1e-30) << "n=" << n;
  EXPECT_EQ(Fp32ToBits(fast), Fp32ToBits(scalar)) << "n=" << n;
  EXPECT_EQ(Fp32ToBits(avx2), Fp32ToBits(scalar)) << "n=" << n;
}

INSTANTIATE_TEST_SUITE_P(Sizes, DotF16Test, ::testing::Values(1, 7, 63, 64, 100, 128, 200, 256));

// (a0 + a2) + (a1 + a3) lane-wise: 2^24 + 1 rounds back to 2^24 before the
// -2^24 arrives, so the result is 0 where a sequential or double sum gives 1.
TEST(DotF16OrderTest, FollowsGgmlAvx512Reduction) {
  std::vector<uint16_t> x(64, 0), y(64, 0);
  x[0] = Fp32ToFp16(4096.0f);   // accumulator 0, lane 0
  y[0] = Fp32ToFp16(4096.0f);
  x[16] = Fp32ToFp16(-4096.0f); // accumulator 1, lane 0
  y[16] = Fp32ToFp16(4096.0f);
  x[32] = Fp32ToFp16(1.0f);     // accumulator 2, lane 0
  y[32] = Fp32ToFp16(1.0f);
  EXPECT_EQ(DotF16(64, x.data(), y.data()), 0.0f);
  EXPECT_EQ(DotF16(64, x.data(), y.data(), F16Kernels::kScalar), 0.0f);
  // Past the last block of 64 the tail is summed in double.
  std::vector<uint16_t> xt(65, 0), yt(65, 0);
  xt[64] = Fp32ToFp16(3.0f);
  yt[64] = Fp32ToFp16(0.5f);
  EXPECT_EQ(DotF16(65, xt.data(), yt.data()), 1.5f);
}

TEST(MadScaleF16Test, VectorEqualsScalarAndFormula) {
  for (int64_t n : {1, 7, 8, 16, 31, 64, 130}) {
    const auto x = RandomF16(n, 3), y0 = RandomF16(n, 4);
    std::vector<uint16_t> a = y0, b = y0, c = y0;
    MadF16(n, a.data(), x.data(), 0.37f);
    MadF16(n, b.data(), x.data(), 0.37f, F16Kernels::kScalar);
    MadF16(n, c.data(), x.data(), 0.37f, F16Kernels::kAvx2);
    EXPECT_EQ(a, b) << "n=" << n;
    EXPECT_EQ(c, b) << "n=" << n;
    for (int64_t i = 0; i < n; ++i) {
      const float want = std::fma(Fp16ToFp32(x[i]), 0.37f, Fp16ToFp32(y0[i]));
      EXPECT_EQ(a[i], Fp32ToFp16(want)) << i;
    }
    ScaleF16(n, a.data(), 0.81f);
    ScaleF16(n, b.data(), 0.81f, F16Kernels::kScalar);
    ScaleF16(n, c.data(), 0.81f, F16Kernels::kAvx2);
    EXPECT_EQ(a, b) << "n=" << n;
    EXPECT_EQ(c, b) << "n=" << n;
  }
}

TEST(ToF16Test, EqualsScalarConversion) {
  std::vector<float> x;
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 1e6f,
                  INFINITY, -INFINITY, NAN, -NAN, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f,
                  -1e-7f, 1e-9f, 0.333333f, 1.0009765625f, 1.00048828125f, 1.00146484375f}) {
    x.push_back(v);
  }
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> e(-30.0f, 20.0f);
  while (x.size() < 16 * 20 + 7) x.push_back((rng() % 2 ? 1.0f : -1.0f) * std::exp2(e(rng)));
  std::vector<uint16_t> got(x.size());
  for (size_t off : {size_t{0}, size_t{3}}) {  // blocks with and without a NaN
    ToF16(int64_t(x.size() - off), x.data() + off, got.data());
    for (size_t i = 0; i + off < x.size(); ++i) {
      EXPECT_EQ(got[i], Fp32ToFp16(x[i + off])) << "value " << x[i + off];
    }
  }
}

struct AttendCase {
  int64_t n_kv, dk, dv;
};

class AttendHeadTest : public ::testing::TestWithParam<AttendCase> {};

TEST_P(AttendHeadTest, MatchesSoftmaxFormula) {
  const AttendCase c = GetParam();
  const int64_t stride_k = 2 * c.dk, stride_v = 2 * c.dv;  // two KV heads interleaved
  const auto q16 = RandomF16(c.dk, 5, 2.0f);
  const auto k = RandomF16(c.n_kv * stride_k, 6, 2.0f);
  const auto v = RandomF16(c.n_kv * stride_v, 7);
  HeadAttention a;
  a.q16 = q16.data();
  a.k = k.data() + c.dk;  // the second head
  a.v = v.data() + c.dv;
  a.k_stride = stride_k;
  a.v_stride = stride_v;
  a.n_kv = c.n_kv;
  a.dk = c.dk;
  a.dv = c.dv;
  a.scale = 1.0f / std::sqrt(float(c.dk));
  std::vector<uint16_t> acc(c.dv);
  std::vector<float> out(c.dv), out_scalar(c.dv);
  AttendHead(a, acc.data(), out.data());
  AttendHead(a, acc.data(), out_scalar.data(), F16Kernels::kScalar);
  EXPECT_EQ(out, out_scalar);
  std::vector<float> out_avx2(c.dv);
  AttendHead(a, acc.data(), out_avx2.data(), F16Kernels::kAvx2);
  EXPECT_EQ(out_avx2, out_scalar);

  std::vector<double> s(c.n_kv);
  double mx = -INFINITY;
  for (int64_t j = 0; j < c.n_kv; ++j) {
    for (int64_t i = 0; i < c.dk; ++i) {
      s[j] += double(Fp16ToFp32(q16[i])) * Fp16ToFp32(a.k[j * stride_k + i]);
    }
    s[j] *= a.scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (double& e : s) sum += (e = std::exp(e - mx));
  for (int64_t d = 0; d < c.dv; ++d) {
    double want = 0;
    for (int64_t j = 0; j < c.n_kv; ++j) want += s[j] / sum * Fp16ToFp32(a.v[j * stride_v + d]);
    // The f16 accumulator rounds once per position.
    EXPECT_NEAR(out[d], want, 2e-3 + 1e-3 * std::sqrt(double(c.n_kv))) << "d=" << d;
  }
  if (c.n_kv == 1) {
    for (int64_t d = 0; d < c.dv; ++d) EXPECT_EQ(out[d], Fp16ToFp32(a.v[d])) << d;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttendHeadTest,
                         ::testing::Values(AttendCase{1, 64, 64}, AttendCase{2, 64, 64},
                                           AttendCase{17, 128, 128}, AttendCase{300, 64, 64},
                                           AttendCase{9, 40, 24}));

struct GroupCase {
  int64_t dk, dv, n_q, max_kv;
  float k_scale;
};

class AttendGroupTest : public ::testing::TestWithParam<GroupCase> {};

// The fused group kernel against AttendHead (scalar form) per query, bit for
// bit: queries of one KV head with different n_kv (causal rows of a token
// block and GQA heads), key/value heads interleaved with another head.
TEST_P(AttendGroupTest, EqualsAttendHeadPerQuery) {
  const GroupCase c = GetParam();
  const int64_t stride_k = 3 * c.dk, stride_v = 3 * c.dv;
  auto k = RandomF16(c.max_kv * stride_k, 11, c.k_scale);
  const auto v = RandomF16(c.max_kv * stride_v, 12, 4.0f);
  // Keys that grow with the position force a rescale of the accumulator at
  // many positions (a new maximum score), not only at the first.
  for (int64_t j = 0; j < c.max_kv; j += 3) {
    for (int64_t i = 0; i < c.dk; ++i) {
      uint16_t& e = k[j * stride_k + c.dk + i];
      e = Fp32ToFp16(Fp16ToFp32(e) * (1.0f + 0.01f * float(j)));
    }
  }
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<std::vector<float>> q(c.n_q, std::vector<float>(c.dk));
  for (auto& row : q) {
    for (float& x : row) x = u(rng);
  }
  std::vector<const float*> qp;
  std::vector<int64_t> n_kv;
  std::vector<std::vector<float>> out(c.n_q, std::vector<float>(c.dv, -1.0f)),
      want = out, avx2 = out;
  std::vector<float*> op, ap;
  for (int64_t i = 0; i < c.n_q; ++i) {
    qp.push_back(q[i].data());
    // Descending, equal and ascending counts, always in [1, max_kv].
    n_kv.push_back(i % 3 == 0 ? c.max_kv - i / 2 % c.max_kv : 1 + (i * 37) % c.max_kv);
    op.push_back(out[i].data());
    ap.push_back(avx2[i].data());
  }
  GroupAttention g;
  g.k = k.data() + c.dk;
  g.v = v.data() + c.dv;
  g.k_stride = stride_k;
  g.v_stride = stride_v;
  g.dk = c.dk;
  g.dv = c.dv;
  g.scale = 1.0f / std::sqrt(float(c.dk));
  g.n_q = c.n_q;
  g.q = qp.data();
  g.n_kv = n_kv.data();
  g.out = op.data();
  AttendGroup(g);
  g.out = ap.data();
  AttendGroup(g, F16Kernels::kAvx2);

  std::vector<uint16_t> q16(c.dk), acc(c.dv);
  HeadAttention a;
  a.q16 = q16.data();
  a.k = g.k;
  a.v = g.v;
  a.k_stride = stride_k;
  a.v_stride = stride_v;
  a.dk = c.dk;
  a.dv = c.dv;
  a.scale = g.scale;
  for (int64_t i = 0; i < c.n_q; ++i) {
    ToF16(c.dk, q[i].data(), q16.data());
    a.n_kv = n_kv[i];
    AttendHead(a, acc.data(), want[i].data(), F16Kernels::kScalar);
    for (int64_t d = 0; d < c.dv; ++d) {
      ASSERT_EQ(Fp32ToBits(out[i][d]), Fp32ToBits(want[i][d]))
          << "query " << i << " n_kv " << n_kv[i] << " d " << d;
      ASSERT_EQ(Fp32ToBits(avx2[i][d]), Fp32ToBits(want[i][d])) << "query " << i << " d " << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttendGroupTest,
    ::testing::Values(GroupCase{128, 128, 32, 300, 2.0f}, GroupCase{128, 128, 8, 1, 2.0f},
                      GroupCase{64, 64, 5, 129, 8.0f}, GroupCase{40, 24, 7, 20, 2.0f},
                      GroupCase{100, 130, 9, 140, 2.0f}, GroupCase{192, 72, 4, 70, 1.0f},
                      GroupCase{256, 256, 3, 260, 2.0f}, GroupCase{320, 17, 6, 33, 2.0f},
                      GroupCase{65, 8, 2, 128, 30.0f}, GroupCase{16, 16, 1, 5, 2.0f},
                      // MLA's absorbed shape (keys of 9 x 64, values of 32
                      // vectors), and keys past 4 x 64 with values of 8 + 5.
                      GroupCase{576, 512, 20, 150, 2.0f}, GroupCase{384, 200, 9, 131, 2.0f},
                      // Scores hundreds apart: exp underflows to 0 and subnormals.
                      GroupCase{128, 128, 32, 200, 40.0f}, GroupCase{64, 64, 17, 90, 60.0f}));

// Sink logits (gpt-oss): one softmax entry without a value. The fused group
// kernel, the AVX2 and the scalar forms agree bit for bit, the result
// matches the formula, and a sink of -inf changes nothing.
TEST(AttendSinkTest, GroupEqualsHeadAndFormula) {
  const int64_t dk = 64, dv = 64, n_q = 6, max_kv = 150;
  const auto k = RandomF16(max_kv * dk, 21, 2.0f);
  const auto v = RandomF16(max_kv * dv, 22, 4.0f);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<std::vector<float>> q(n_q, std::vector<float>(dk));
  for (auto& row : q) {
    for (float& x : row) x = u(rng);
  }
  // Sinks far below, near and far above the scores.
  const std::vector<float> sinks = {-30.0f, -0.5f, 0.3f, 2.0f, 25.0f, -INFINITY};
  std::vector<int64_t> n_kv = {1, 7, 150, 64, 129, 33};
  std::vector<const float*> qp;
  std::vector<std::vector<float>> out(n_q, std::vector<float>(dv)), avx2 = out, plain = out;
  std::vector<float*> op, ap, pp;
  for (int64_t i = 0; i < n_q; ++i) {
    qp.push_back(q[i].data());
    op.push_back(out[i].data());
    ap.push_back(avx2[i].data());
    pp.push_back(plain[i].data());
  }
  GroupAttention g;
  g.k = k.data();
  g.v = v.data();
  g.k_stride = dk;
  g.v_stride = dv;
  g.dk = dk;
  g.dv = dv;
  g.scale = 1.0f / std::sqrt(float(dk));
  g.n_q = n_q;
  g.q = qp.data();
  g.n_kv = n_kv.data();
  g.sinks = sinks.data();
  g.out = op.data();
  AttendGroup(g);
  g.out = ap.data();
  AttendGroup(g, F16Kernels::kAvx2);
  g.sinks = nullptr;
  g.out = pp.data();
  AttendGroup(g);
  std::vector<uint16_t> q16(dk), acc(dv);
  for (int64_t i = 0; i < n_q; ++i) {
    HeadAttention a;
    a.q16 = q16.data();
    a.k = g.k;
    a.v = g.v;
    a.k_stride = dk;
    a.v_stride = dv;
    a.dk = dk;
    a.dv = dv;
    a.scale = g.scale;
    a.n_kv = n_kv[i];
    a.sink = sinks[i];
    ToF16(dk, q[i].data(), q16.data());
    std::vector<float> want(dv);
    AttendHead(a, acc.data(), want.data(), F16Kernels::kScalar);
    double mx = sinks[i], sum = 0;
    std::vector<double> s(n_kv[i]);
    for (int64_t j = 0; j < n_kv[i]; ++j) {
      for (int64_t c = 0; c < dk; ++c) s[j] += double(Fp16ToFp32(q16[c])) * Fp16ToFp32(k[j * dk + c]);
      s[j] *= g.scale;
      mx = std::max(mx, s[j]);
    }
    for (double& e : s) sum += (e = std::exp(e - mx));
    sum += std::exp(double(sinks[i]) - mx);
    for (int64_t d = 0; d < dv; ++d) {
      ASSERT_EQ(Fp32ToBits(out[i][d]), Fp32ToBits(want[d])) << "query " << i << " d " << d;
      ASSERT_EQ(Fp32ToBits(avx2[i][d]), Fp32ToBits(want[d])) << "query " << i << " d " << d;
      double f = 0;
      for (int64_t j = 0; j < n_kv[i]; ++j) f += s[j] / sum * Fp16ToFp32(v[j * dv + d]);
      EXPECT_NEAR(out[i][d], f, 1e-2 + 2e-3 * std::sqrt(double(n_kv[i]))) << "query " << i;
      if (sinks[i] == -INFINITY) {
        EXPECT_EQ(Fp32ToBits(out[i][d]), Fp32ToBits(plain[i][d])) << "d " << d;
      }
    }
  }
  // A sink far above every score takes (nearly) all the weight.
  for (int64_t d = 0; d < dv; ++d) EXPECT_NEAR(out[4][d], 0.0f, 1e-6f);
}

// The softmax's exp against the C library over a sweep of float bit
// patterns (all of [-inf, 0] with a stride, the positive range up to and
// past overflow, NaNs), bit for bit; and on x86 with AVX-512 or AVX2 under
// glibc it is the vector form (a failed run-time check would fall back
// silently).
TEST(ExpF32Test, EqualsLibmBitForBit) {
#if defined(__x86_64__) && defined(__GLIBC__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    EXPECT_TRUE(VectorExpInUse());
  }
#endif
  std::vector<float> x;
  for (uint64_t b = 0x80000000u; b <= 0xff800000u; b += 251) x.push_back(Fp32FromBits(uint32_t(b)));
  for (uint32_t b = 0; b < 0x43000000u; b += 4099) x.push_back(Fp32FromBits(b));
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 88.7228317f, 88.7228394f,
                  -103.278923f, -103.278931f, -103.972076f, -103.972084f, -87.33654f}) {
    x.push_back(v);
  }
  x.push_back(Fp32FromBits(0xff800001u));  // a signalling NaN
  std::vector<float> y(x.size());
  ExpF32(int64_t(x.size()), x.data(), y.data());
  int64_t wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i]);
    if (std::isnan(want) ? !std::isnan(y[i]) : Fp32ToBits(y[i]) != Fp32ToBits(want)) {
      if (++wrong <= 5) ADD_FAILURE() << "exp(" << x[i] << ") = " << y[i] << ", want " << want;
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << x.size();
}

}  // namespace
}  // namespace moesplit::model::internal
