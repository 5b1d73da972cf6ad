#include "common/quant/random_blocks.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/quant/internal/test_util.h"
#include "common/quant/quant.h"
#include "gtest/gtest.h"

namespace moesplit::quant {
namespace {

using testing::Bytes;
using testing::Name;

const GgmlType kAllTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,  GgmlType::kQ4_0,   GgmlType::kQ4_1,
    GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,  GgmlType::kQ8_1,   GgmlType::kQ2_K,
    GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,  GgmlType::kQ6_K,   GgmlType::kQ8_K,
    GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kMXFP4, GgmlType::kIQ1_S, GgmlType::kIQ1_M,
    GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,
    GgmlType::kTQ1_0, GgmlType::kTQ2_0};

TEST(FillRandomBlocksTest, DequantisesToFiniteValuesWithRequestedStdDev) {
  for (GgmlType type : kAllTypes) {
    for (float scale : {0.02f, 0.1f, 1.0f}) {
      const int64_t n = 256 * 512;
      std::vector<uint8_t> buf = Bytes(type, n);
      const absl::Status s = FillRandomBlocks(type, 42, scale, buf.data(), n);
      ASSERT_TRUE(s.ok()) << Name(type) << " scale " << scale << ": " << s;
      const std::vector<float> v = testing::Dequant(type, buf.data(), n);
      double sum = 0, sum2 = 0;
      int64_t non_finite = 0, zeros = 0;
      for (float f : v) {
        non_finite += !std::isfinite(f);
        zeros += f == 0.0f;
        sum += f;
        sum2 += double(f) * f;
      }
      ASSERT_EQ(non_finite, 0) << Name(type) << " scale " << scale;
      const double mean = sum / n;
      const double sd = std::sqrt(sum2 / n - mean * mean);
      EXPECT_NEAR(sd, scale, 0.2 * scale) << Name(type) << " scale " << scale;
      EXPECT_NEAR(mean, 0.0, 0.1 * scale) << Name(type) << " scale " << scale;
      // Ternary digits are zero a third of the time by design.
      const bool ternary = type == GgmlType::kTQ1_0 || type == GgmlType::kTQ2_0;
      EXPECT_LT(zeros, ternary ? n * 0.35 : n / 4) << Name(type) << " scale " << scale;
    }
  }
}

TEST(FillRandomBlocksTest, StdDevIsTightForEveryType) {
  // With 2^20 values the sampling error is far below 5%; the construction
  // targets the exact expected variance.
  for (GgmlType type : kAllTypes) {
    const int64_t n = 1 << 20;
    std::vector<uint8_t> buf = Bytes(type, n);
    ASSERT_TRUE(FillRandomBlocks(type, 9, 0.05f, buf.data(), n).ok()) << Name(type);
    const std::vector<float> v = testing::Dequant(type, buf.data(), n);
    double sum = 0, sum2 = 0;
    for (float f : v) {
      sum += f;
      sum2 += double(f) * f;
    }
    const double sd = std::sqrt(sum2 / n - (sum / n) * (sum / n));
    EXPECT_NEAR(sd, 0.05, 0.05 * 0.05) << Name(type);
  }
}

TEST(FillRandomBlocksTest, DeterministicPerSeed) {
  for (GgmlType type : kAllTypes) {
    const int64_t n = 256 * 8;
    std::vector<uint8_t> a = Bytes(type, n), b = Bytes(type, n), c = Bytes(type, n);
    ASSERT_TRUE(FillRandomBlocks(type, 5, 0.1f, a.data(), n).ok()) << Name(type);
    ASSERT_TRUE(FillRandomBlocks(type, 5, 0.1f, b.data(), n).ok()) << Name(type);
    ASSERT_TRUE(FillRandomBlocks(type, 6, 0.1f, c.data(), n).ok()) << Name(type);
    EXPECT_EQ(a, b) << Name(type);
    EXPECT_NE(a, c) << Name(type);
  }
}

TEST(FillRandomBlocksTest, UsesEveryCode) {
  // Q4_0 nibbles and Q8_0 bytes: all codes should appear in a large fill.
  const int64_t n = 32 * 4096;
  std::vector<uint8_t> buf = Bytes(GgmlType::kQ4_0, n);
  ASSERT_TRUE(FillRandomBlocks(GgmlType::kQ4_0, 1, 1.0f, buf.data(), n).ok());
  std::vector<int> seen(16, 0);
  for (int64_t b = 0; b < n / 32; ++b) {
    for (int j = 0; j < 16; ++j) {
      const uint8_t q = buf[b * 18 + 2 + j];
      ++seen[q & 15];
      ++seen[q >> 4];
    }
  }
  for (int c = 0; c < 16; ++c) EXPECT_GT(seen[c], n / 16 / 2) << "Q4_0 code " << c;
}

// random_blocks.h: "Every type accepts 0.005 .. 1e4".
TEST(FillRandomBlocksTest, EveryTypeAcceptsTheDocumentedScaleRange) {
  for (GgmlType type : kAllTypes) {
    const int64_t n = 256 * 4;
    std::vector<uint8_t> buf = Bytes(type, n);
    for (float scale : {0.005f, 1e4f}) {
      const absl::Status s = FillRandomBlocks(type, 1, scale, buf.data(), n);
      EXPECT_TRUE(s.ok()) << Name(type) << " scale " << scale << ": " << s;
    }
  }
}

// The ternary types hold only the digits 0, 1, 2 (values -d, 0, d, one d per
// block), each about a third of the time (TQ2_0's unused digit 3 never
// appears: it would decode to 2 d).
TEST(FillRandomBlocksTest, TernaryDigitsAreUniform) {
  for (GgmlType type : {GgmlType::kTQ1_0, GgmlType::kTQ2_0}) {
    const int64_t n = 256 * 256;
    std::vector<uint8_t> buf = Bytes(type, n);
    ASSERT_TRUE(FillRandomBlocks(type, 3, 1.0f, buf.data(), n).ok()) << Name(type);
    const std::vector<float> v = testing::Dequant(type, buf.data(), n);
    int64_t count[3] = {0, 0, 0};
    for (int64_t b = 0; b < n / 256; ++b) {
      float d = 0;
      for (int k = 0; k < 256; ++k) {
        const float x = v[b * 256 + k];
        if (x == 0.0f) {
          ++count[1];
          continue;
        }
        if (d == 0) d = std::fabs(x);
        ASSERT_EQ(std::fabs(x), d) << Name(type) << " block " << b;
        ++count[x > 0 ? 2 : 0];
      }
    }
    for (int digit = 0; digit < 3; ++digit) {
      EXPECT_NEAR(count[digit], n / 3.0, n * 0.02) << Name(type) << " digit " << digit;
    }
  }
}

TEST(FillRandomBlocksTest, BadArgumentsAreInvalidArgument) {
  std::vector<uint8_t> buf(1 << 16);
  struct Case {
    std::string what;
    absl::Status status;
  };
  const Case cases[] = {
      {"unsupported", FillRandomBlocks(GgmlType::kI32, 1, 1.0f, buf.data(), 256)},
      {"unknown id", FillRandomBlocks(static_cast<GgmlType>(99), 1, 1.0f, buf.data(), 256)},
      {"partial block", FillRandomBlocks(GgmlType::kQ4_K, 1, 1.0f, buf.data(), 255)},
      {"negative n", FillRandomBlocks(GgmlType::kF32, 1, 1.0f, buf.data(), -4)},
      {"null dst", FillRandomBlocks(GgmlType::kQ8_0, 1, 1.0f, nullptr, 32)},
      {"misaligned f32", FillRandomBlocks(GgmlType::kF32, 1, 1.0f, buf.data() + 2, 32)},
      {"misaligned q4_k", FillRandomBlocks(GgmlType::kQ4_K, 1, 1.0f, buf.data() + 1, 256)},
      {"zero scale", FillRandomBlocks(GgmlType::kQ8_0, 1, 0.0f, buf.data(), 32)},
      {"negative scale", FillRandomBlocks(GgmlType::kQ8_0, 1, -1.0f, buf.data(), 32)},
      {"nan scale", FillRandomBlocks(GgmlType::kQ8_0, 1, NAN, buf.data(), 32)},
      {"f16 overflow", FillRandomBlocks(GgmlType::kF16, 1, 1e5f, buf.data(), 32)},
      {"q8_0 scale too big", FillRandomBlocks(GgmlType::kQ8_0, 1, 1e7f, buf.data(), 32)},
      {"q6_k scale too small", FillRandomBlocks(GgmlType::kQ6_K, 1, 1e-6f, buf.data(), 256)},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << c.status;
  }
  EXPECT_TRUE(FillRandomBlocks(GgmlType::kQ4_K, 1, 1.0f, nullptr, 0).ok());
  EXPECT_TRUE(FillRandomBlocks(GgmlType::kMXFP4, 1, 1.0f, buf.data() + 1, 32).ok());
}

}  // namespace
}  // namespace moesplit::quant
