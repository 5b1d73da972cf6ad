// The packed strip layout (packed.h): PackedGemm (the CPU's best kernel) and
// PackedGemmScalar against the GGUF rows' canonical dot (and the SIMD
// levels' vec_dot), bit for bit, for random raw blocks (every code, sub-scale and min, scales of
// both signs), extreme activations, decode and prefill token counts and row
// ranges; and the layout arithmetic.

#include "common/quant/packed.h"

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common/base/fp16.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/internal/packed_impl.h"
#include "common/quant/internal/unpack.h"
#include "common/quant/quant.h"
#include "gtest/gtest.h"

namespace moesplit::quant {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// n_rows GGUF rows of random raw blocks with finite f16 scales.
std::vector<uint8_t> RandomRows(GgmlType type, int64_t n_rows, int64_t n_cols, uint64_t seed) {
  const uint64_t rb = *RowBytes(type, n_cols);
  std::vector<uint8_t> v(rb * n_rows);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(-0.02f, 0.02f);
  const uint64_t bb = TypeInfo(type).type_size;
  for (uint64_t off = 0; off < v.size(); off += bb) {
    const uint16_t d = Fp32ToFp16(u(rng)), dmin = Fp32ToFp16(u(rng));
    if (type == GgmlType::kMXFP4) {
      // E8M0: mostly around 2^-7 (so the dots stay finite), sometimes the
      // denormal exponents 0 and 1.
      const uint64_t k = rng() % 16;
      v[off] = static_cast<uint8_t>(k == 0 ? 0 : k == 1 ? 1 : 112 + rng() % 16);
    } else if (type == GgmlType::kQ5_0) {  // d first, then the random fifth bits
      std::memcpy(&v[off], &d, 2);
    } else if (type == GgmlType::kQ8_0 || type == GgmlType::kQ4_K || type == GgmlType::kQ5_K) {
      std::memcpy(&v[off], &d, 2);
      std::memcpy(&v[off + 2], &dmin, 2);
    } else {  // Q6_K: d last
      std::memcpy(&v[off + bb - 2], &d, 2);
    }
  }
  return v;
}

// n_tokens rows of `type`'s vec_dot_type: random values, then one
// all-maximum and one alternating row (codes +-127).
std::vector<std::vector<uint8_t>> Activations(GgmlType type, int64_t n_tokens, int64_t n_cols, uint64_t seed) {
  const GgmlType act_type = GetTypeTraits(type)->vec_dot_type;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<std::vector<uint8_t>> out;
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<float> x(n_cols);
    for (int64_t i = 0; i < n_cols; ++i) {
      x[i] = t % 5 == 3 ? 1.0f : t % 5 == 4 ? (i % 2 ? -2.0f : 2.0f) : n(rng);
    }
    std::vector<uint8_t> q(*RowBytes(act_type, n_cols));
    GetTypeTraits(act_type)->quantize(x.data(), q.data(), n_cols);
    out.push_back(std::move(q));
  }
  return out;
}

class PackedTest : public ::testing::TestWithParam<GgmlType> {
 protected:
  void TearDown() override { SetActiveKernelLevel(internal::CpuBestLevel()); }
};

TEST_P(PackedTest, EqualsVecDotAtEveryLevel) {
  const GgmlType type = GetParam();
  const bool block32 = PackedColumns(type) == 32;
  // 32-column types: also an odd number of blocks (the even/odd chains),
  // gpt-oss's 2880 columns and DeepSeek-V2-Lite's 1408.
  const std::vector<std::pair<int64_t, int64_t>> shapes =
      block32 ? std::vector<std::pair<int64_t, int64_t>>{{48, 32}, {32, 96}, {64, 768}, {32, 2880}, {32, 1408}}
              : std::vector<std::pair<int64_t, int64_t>>{{48, 256}, {64, 768}, {32, 2048}};
  for (const auto& [n_rows, n_cols] : shapes) {
    const uint64_t rb = *RowBytes(type, n_cols);
    const std::vector<uint8_t> rows = RandomRows(type, n_rows, n_cols, 7 * n_rows + n_cols);
    std::vector<uint8_t> packed(PackedMatrixBytes(type, n_rows, n_cols));
    ASSERT_GT(packed.size(), 0u);
    PackRows(type, rows.data(), rb, n_rows, n_cols, packed.data());
    const PackedView w{type, packed.data(), n_rows, n_cols};
    for (int64_t n_tokens : {1, 2, 3, 5, 7, 8, 9, 12, 17}) {
      const auto act = Activations(type, n_tokens, n_cols, n_tokens);
      std::vector<const uint8_t*> ptrs;
      for (const auto& a : act) ptrs.push_back(a.data());
      // Rows [16, n_rows) (an offset strip range) and all rows.
      for (int64_t row0 : {int64_t{0}, int64_t{16}}) {
        const int64_t nr = n_rows - row0;
        std::vector<float> fast(n_tokens * nr, -1.0f), scalar(n_tokens * nr, -2.0f);
        PackedGemm(w, row0, nr, ptrs.data(), n_tokens, fast.data(), nr);
        PackedGemmScalar(w, row0, nr, ptrs.data(), n_tokens, scalar.data(), nr);
        // The AVX2 kernel too where it exists, also on CPUs whose PackedGemm
        // is the AVX-512 one.
        std::vector<float> avx2(n_tokens * nr, -3.0f);
        const bool have_avx2 = internal::CpuHasAvx2();
        if (have_avx2) {
          ASSERT_TRUE(internal::PackedGemmAvx2(w, row0, nr, ptrs.data(), n_tokens, avx2.data(), nr));
        }
        // The canonical order (internal/unpack.h): the scalar canonical dot
        // and the SIMD levels' vec_dot. (The scalar level's vec_dot is ggml's
        // generic reference, equal only to float rounding.)
        std::vector<std::pair<const char*, VecDotFn>> refs = {{"canonical", internal::CanonicalVecDot(type)}};
        for (KernelLevel level : {KernelLevel::kAvx2, KernelLevel::kAvx512}) {
          if (level > internal::CpuBestLevel()) continue;
          SetActiveKernelLevel(level);
          refs.push_back({level == KernelLevel::kAvx2 ? "avx2" : "avx512", GetTypeTraits(type)->vec_dot});
        }
        for (const auto& [name, dot] : refs) {
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t r = 0; r < nr; ++r) {
              const float want = dot(n_cols, rows.data() + (row0 + r) * rb, ptrs[t]);
              ASSERT_EQ(Bits(fast[t * nr + r]), Bits(want))
                  << name << ", cols " << n_cols << " tokens " << n_tokens << " token " << t << " row "
                  << row0 + r << ": " << fast[t * nr + r] << " vs " << want;
              ASSERT_EQ(Bits(scalar[t * nr + r]), Bits(want)) << name << ", scalar packed, token " << t
                                                              << " row " << row0 + r;
              if (have_avx2) {
                ASSERT_EQ(Bits(avx2[t * nr + r]), Bits(want)) << name << ", avx2 packed, cols " << n_cols
                                                              << " tokens " << n_tokens << " token " << t
                                                              << " row " << row0 + r;
              }
            }
          }
        }
        SetActiveKernelLevel(internal::CpuBestLevel());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedTest,
                         ::testing::Values(GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_0,
                                           GgmlType::kMXFP4, GgmlType::kQ5_0),
                         [](const auto& info) { return std::string(GgmlTypeName(info.param)); });

TEST(PackedLayoutTest, Sizes) {
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ4_K, 16, 256), 2368u);
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ6_K, 32, 512), 4u * 3360u);
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ6_K, 768, 2048), 768u * *RowBytes(GgmlType::kQ6_K, 2048));
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ4_K, 8, 256), 0u);    // not whole strips
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ4_K, 16, 128), 0u);   // not whole superblocks
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ4_0, 16, 256), 0u);   // no layout
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ8_0, 32, 2880), 2u * 90 * 544);  // = the GGUF bytes
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ8_0, 32, 2880), 32u * *RowBytes(GgmlType::kQ8_0, 2880));
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kMXFP4, 16, 2880), 16u * *RowBytes(GgmlType::kMXFP4, 2880));
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kMXFP4, 16, 48), 0u);   // not whole 32-column blocks
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ5_0, 2048, 1408), 2048u * *RowBytes(GgmlType::kQ5_0, 1408));
  EXPECT_EQ(PackedColumns(GgmlType::kQ5_0), 32);
  EXPECT_EQ(PackedColumns(GgmlType::kQ6_K), 256);
  EXPECT_EQ(PackedColumns(GgmlType::kMXFP4), 32);
  EXPECT_EQ(PackedColumns(GgmlType::kQ4_0), 0);
  EXPECT_TRUE(PackedLayoutExists(GgmlType::kQ4_K));
  EXPECT_TRUE(PackedLayoutExists(GgmlType::kQ5_K));
  EXPECT_EQ(PackedMatrixBytes(GgmlType::kQ5_K, 16, 256), 2880u);
  EXPECT_FALSE(PackedLayoutExists(GgmlType::kQ2_K));
  if (std::getenv("MOESPLIT_PACKED") == nullptr) {
    EXPECT_EQ(PackedPreferred(GgmlType::kQ4_K), internal::CpuHasAvx2());
    EXPECT_EQ(PackedPreferred(GgmlType::kQ6_K), internal::CpuHasAvx2());
    EXPECT_EQ(PackedPreferred(GgmlType::kQ8_0), internal::CpuHasAvx2());
    EXPECT_EQ(PackedPreferred(GgmlType::kMXFP4), internal::CpuHasAvx2());
    EXPECT_EQ(PackedPreferred(GgmlType::kQ5_0), internal::CpuHasAvx2());
  }
  EXPECT_FALSE(PackedPreferred(GgmlType::kQ4_0));
}

}  // namespace
}  // namespace moesplit::quant
