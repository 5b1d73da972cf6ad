// The CUDA kernels' block decoders and KV encoders (internal/block_codec.h),
// compiled for the host, against common/quant's dequantisers and reference
// quantisers: bit for bit, every format, random valid blocks and random
// bytes. Runs without a GPU; the device compiles the same functions with
// --fmad=false.
#include "common/backend/cuda/internal/block_codec.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/base/fp16.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"
#include "gtest/gtest.h"

namespace moesplit::cuda::codec {
namespace {

template <GgmlType T>
void DecodeRow(const uint8_t* row, int64_t n, float* out) {
  for (int64_t e = 0; e < n; ++e) out[e] = DecodeRowElement<T>(row, e);
}

bool Decode(GgmlType t, const uint8_t* row, int64_t n, float* out) {
#define MS_CASE(T)                       \
  case GgmlType::T:                      \
    DecodeRow<GgmlType::T>(row, n, out); \
    return true;
  switch (t) {
    MS_CASE(kF32) MS_CASE(kF16) MS_CASE(kBF16) MS_CASE(kQ4_0) MS_CASE(kQ4_1) MS_CASE(kQ5_0)
    MS_CASE(kQ5_1) MS_CASE(kQ8_0) MS_CASE(kQ8_1) MS_CASE(kMXFP4) MS_CASE(kQ2_K) MS_CASE(kQ3_K)
    MS_CASE(kQ4_K) MS_CASE(kQ5_K) MS_CASE(kQ6_K) MS_CASE(kQ8_K) MS_CASE(kIQ4_NL)
    MS_CASE(kIQ4_XS) MS_CASE(kIQ2_XXS) MS_CASE(kIQ2_XS) MS_CASE(kIQ2_S) MS_CASE(kIQ3_XXS)
    MS_CASE(kIQ3_S) MS_CASE(kIQ1_S) MS_CASE(kIQ1_M) MS_CASE(kTQ1_0) MS_CASE(kTQ2_0)
    default:
      return false;
  }
#undef MS_CASE
}

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,    GgmlType::kBF16,
                           GgmlType::kQ4_0, GgmlType::kQ4_1,   GgmlType::kQ5_0,
                           GgmlType::kQ5_1, GgmlType::kQ8_0,   GgmlType::kQ8_1,
                           GgmlType::kMXFP4, GgmlType::kQ2_K,  GgmlType::kQ3_K,
                           GgmlType::kQ4_K, GgmlType::kQ5_K,   GgmlType::kQ6_K,
                           GgmlType::kQ8_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS,
                           GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
                           GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kIQ1_S,
                           GgmlType::kIQ1_M, GgmlType::kTQ1_0, GgmlType::kTQ2_0};

bool SameValue(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

void ExpectSameAsQuant(GgmlType t, const std::vector<uint8_t>& data, int64_t n,
                       const char* what) {
  std::vector<float> want(n), got(n);
  ASSERT_TRUE(quant::DequantizeRow(t, data.data(), want.data(), n).ok());
  ASSERT_TRUE(Decode(t, data.data(), n, got.data())) << GgmlTypeName(t);
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    if (!SameValue(got[i], want[i])) {
      ++bad;
      ADD_FAILURE() << GgmlTypeName(t) << " " << what << " element " << i << ": got " << got[i]
                    << " want " << want[i];
    }
  }
}

TEST(BlockCodecTest, DecodesRandomValidBlocksLikeTheCpu) {
  const int64_t n = 256 * 16;
  for (GgmlType t : kTypes) {
    std::vector<uint8_t> data(*RowBytes(t, n) + 8);
    ASSERT_TRUE(quant::FillRandomBlocks(t, 7, 0.5f, data.data(), n).ok()) << GgmlTypeName(t);
    ExpectSameAsQuant(t, data, n, "random blocks");
  }
}

TEST(BlockCodecTest, DecodesRandomBytesLikeTheCpu) {
  const int64_t n = 256 * 16;
  std::mt19937 rng(3);
  for (GgmlType t : kTypes) {
    std::vector<uint8_t> data(*RowBytes(t, n) + 8);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    ExpectSameAsQuant(t, data, n, "random bytes");
  }
}

TEST(BlockCodecTest, HalfConversionsMatchFp16H) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_TRUE(SameValue(HalfToFloat(static_cast<uint16_t>(h)),
                          Fp16ToFp32(static_cast<uint16_t>(h))))
        << h;
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (i % 2) f = std::ldexp(static_cast<float>(rng() % 100000) / 1000.0f - 50.0f, rng() % 40 - 30);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), Fp32ToFp16(f)) << f;
  }
}

TEST(BlockCodecTest, KvEncodersMatchTheReferenceQuantisers) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (int trial = 0; trial < 200; ++trial) {
    float x[32];
    for (float& v : x) v = trial == 0 ? 0.0f : dist(rng);
    uint8_t got8[34], want8[34], got4[18], want4[18];
    EncodeQ8_0(x, got8);
    EncodeQ4_0(x, got4);
    ASSERT_TRUE(quant::QuantizeRow(GgmlType::kQ8_0, x, want8, 32).ok());
    ASSERT_TRUE(quant::QuantizeRow(GgmlType::kQ4_0, x, want4, 32).ok());
    EXPECT_EQ(0, std::memcmp(got8, want8, 34)) << "trial " << trial;
    EXPECT_EQ(0, std::memcmp(got4, want4, 18)) << "trial " << trial;
  }
}

// The activation rounding of the GPU products equals the CPU's conversion to
// each weight type's vec_dot_type followed by that format's dequantiser.
TEST(BlockCodecTest, ActivationRoundingMatchesTheVecDotTypeRoundTrip) {
  const int64_t n = 256 * 4;
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  for (GgmlType t : kTypes) {
    const quant::TypeTraits* tr = quant::GetTypeTraits(t);
    ASSERT_NE(tr, nullptr);
    if (tr->vec_dot == nullptr) continue;  // Q8_1 / Q8_K: activation formats only
    const GgmlType vdt = tr->vec_dot_type;
    const ActRounding r = ActRoundingOf(t);
    const int block = ActRoundingBlock(r);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(n), want(n), got(n);
      for (float& v : x) v = dist(rng) * (trial % 3 == 0 ? 1e-3f : 1.0f);
      if (trial == 1) std::fill(x.begin(), x.begin() + 256, 0.0f);  // an all-zero block
      if (trial == 2) x[5] = -x[9] - 100.0f;  // a negative maximum
      if (vdt == GgmlType::kF32) {
        want = x;
      } else {
        std::vector<uint8_t> q(*RowBytes(vdt, n));
        ASSERT_TRUE(quant::QuantizeRow(vdt, x.data(), q.data(), n).ok()) << GgmlTypeName(vdt);
        ASSERT_TRUE(quant::DequantizeRow(vdt, q.data(), want.data(), n).ok());
      }
      for (int64_t i = 0; i < n; i += block) RoundActivations(r, x.data() + i, got.data() + i);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(SameValue(got[i], want[i]))
            << GgmlTypeName(t) << " (" << GgmlTypeName(vdt) << ") trial " << trial << " element "
            << i << ": got " << got[i] << " want " << want[i];
      }
    }
  }
}

}  // namespace
}  // namespace moesplit::cuda::codec
