// Every SIMD level against the references, per format:
//  - quantised weights: each level's vec_dot equals the canonical scalar dot
//    (internal/unpack.h) bit for bit, and that is ggml's generic dot to float
//    rounding; on realistic blocks (FillRandomBlocks) and on raw random
//    bytes (every code pattern, extreme activations);
//  - float weights: each level within float rounding of the f64 scalar dot;
//  - activation quantisers: each level byte-identical to the reference.

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/internal/test_util.h"
#include "common/quant/internal/unpack.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"
#include "gtest/gtest.h"

namespace moesplit::quant {
namespace {

using testing::Bytes;
using testing::Name;
using testing::RandomActivations;

const KernelLevel kSimdLevels[] = {KernelLevel::kAvx2, KernelLevel::kAvx512};

std::string LevelName(KernelLevel l) {
  switch (l) {
    case KernelLevel::kScalar: return "scalar";
    case KernelLevel::kAvx2: return "avx2";
    case KernelLevel::kAvx512: return "avx512";
    case KernelLevel::kAmx: return "amx";
  }
  return "?";
}

bool IsFloatType(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

// Byte offsets of the half-precision scale fields of each weight block.
std::vector<int> HalfFields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: return {0, 2};
    case GgmlType::kQ2_K: return {80, 82};
    case GgmlType::kQ3_K: return {108};
    case GgmlType::kQ6_K: return {208};
    case GgmlType::kTQ1_0: return {52};
    case GgmlType::kTQ2_0: return {64};
    case GgmlType::kMXFP4:
    case GgmlType::kIQ1_M: return {};  // IQ1_M: the f16 scale is in the top nibbles (below)
    default: return {0};
  }
}

// Random bytes with the scale fields set to finite values of either sign.
std::vector<uint8_t> RawRandomWeights(GgmlType t, int64_t n, std::mt19937* rng) {
  std::vector<uint8_t> w = Bytes(t, n);
  for (auto& b : w) b = static_cast<uint8_t>((*rng)());
  const auto& info = TypeInfo(t);
  std::uniform_real_distribution<float> u(0.001f, 0.05f);
  for (int64_t b = 0; b < n / info.block_size; ++b) {
    uint8_t* blk = w.data() + b * info.type_size;
    if (t == GgmlType::kMXFP4) blk[0] = static_cast<uint8_t>(110 + (*rng)() % 20);
    for (int off : HalfFields(t)) {
      const uint16_t h = Fp32ToFp16(((*rng)() & 1 ? -1.0f : 1.0f) * u(*rng));
      std::memcpy(blk + off, &h, 2);
    }
    if (t == GgmlType::kIQ1_M) {
      const uint16_t h = Fp32ToFp16(((*rng)() & 1 ? -1.0f : 1.0f) * u(*rng));
      for (int k = 0; k < 4; ++k) {  // scales words at byte 48: nibble k of d in word k's top nibble
        uint16_t word;
        std::memcpy(&word, blk + 48 + 2 * k, 2);
        word = static_cast<uint16_t>((word & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12));
        std::memcpy(blk + 48 + 2 * k, &word, 2);
      }
    }
  }
  return w;
}

// Activation row of `type` (Q8_0/Q8_1/Q8_K) with random codes in [-127, 127]
// (or all +-127 when `extreme`) and consistent sums.
std::vector<uint8_t> RawActivations(GgmlType type, int64_t n, bool extreme, std::mt19937* rng) {
  std::vector<uint8_t> a = Bytes(type, n);
  auto code = [&]() -> int8_t {
    if (extreme) return (*rng)() & 1 ? 127 : -127;
    return static_cast<int8_t>(static_cast<int>((*rng)() % 255) - 127);
  };
  if (type == GgmlType::kQ8_K) {
    auto* y = reinterpret_cast<internal::BlockQ8_K*>(a.data());
    for (int64_t i = 0; i < n / 256; ++i) {
      y[i].d = 0.01f + 0.001f * ((*rng)() % 10);
      for (auto& q : y[i].qs) q = code();
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int k = 0; k < 16; ++k) s += y[i].qs[16 * g + k];
        y[i].bsums[g] = static_cast<int16_t>(s);
      }
    }
  } else {
    const bool q8_1 = type == GgmlType::kQ8_1;
    const size_t bs = q8_1 ? sizeof(internal::BlockQ8_1) : sizeof(internal::BlockQ8_0);
    for (int64_t i = 0; i < n / 32; ++i) {
      uint8_t* blk = a.data() + i * bs;
      const float d = 0.01f + 0.001f * ((*rng)() % 10);
      const uint16_t hd = Fp32ToFp16(d);
      std::memcpy(blk, &hd, 2);
      int8_t* qs = reinterpret_cast<int8_t*>(blk + (q8_1 ? 4 : 2));
      int s = 0;
      for (int k = 0; k < 32; ++k) s += (qs[k] = code());
      if (q8_1) {
        const uint16_t hs = Fp32ToFp16(s * d);
        std::memcpy(blk + 2, &hs, 2);
      }
    }
  }
  return a;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<int64_t> Lengths(GgmlType t) {
  if (TypeInfo(t).block_size == 256) return {256, 512, 2048};
  return {32, 96, 160, 256, 2048};
}

std::vector<GgmlType> QuantisedWeightTypes() {
  std::vector<GgmlType> out;
  for (GgmlType t : testing::WeightTypes()) {
    if (!IsFloatType(t)) out.push_back(t);
  }
  return out;
}

class SimdDotTest : public ::testing::TestWithParam<GgmlType> {};
class SimdFloatDotTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(SimdDotTest, QuantisedLevelsEqualCanonicalOnRealisticBlocks) {
  const GgmlType type = GetParam();
  const VecDotFn canonical = internal::CanonicalVecDot(type);
  ASSERT_NE(canonical, nullptr);
  const GgmlType act_type = GetTypeTraits(type)->vec_dot_type;
  int checked = 0;
  for (int64_t n : Lengths(type)) {
    std::vector<uint8_t> w = Bytes(type, n);
    ASSERT_TRUE(FillRandomBlocks(type, 7 + n, 0.02f, w.data(), n).ok());
    const std::vector<float> x = RandomActivations(n, 3 + n);
    std::vector<uint8_t> a = Bytes(act_type, n);
    ASSERT_TRUE(QuantizeRow(act_type, x.data(), a.data(), n).ok());
    const float want = canonical(n, w.data(), a.data());
    const float ggml = internal::ScalarVecDot(type)(n, w.data(), a.data());
    EXPECT_NEAR(want, ggml, 2e-6 * std::sqrt(double(n)) * (1 + std::fabs(ggml))) << Name(type) << " n=" << n;
    for (KernelLevel level : kSimdLevels) {
      const VecDotFn fn = internal::LibrarySimdVecDot(type, level);
      if (fn == nullptr) continue;
      ++checked;
      EXPECT_EQ(Bits(fn(n, w.data(), a.data())), Bits(want))
          << Name(type) << " " << LevelName(level) << " n=" << n << " got " << fn(n, w.data(), a.data())
          << " want " << want;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD level on this CPU";
}

TEST_P(SimdDotTest, QuantisedLevelsEqualCanonicalOnRawBytes) {
  const GgmlType type = GetParam();
  const VecDotFn canonical = internal::CanonicalVecDot(type);
  const GgmlType act_type = GetTypeTraits(type)->vec_dot_type;
  std::mt19937 rng(static_cast<uint32_t>(type) * 977);
  int checked = 0;
  for (int rep = 0; rep < 6; ++rep) {
    const int64_t n = Lengths(type)[rep % Lengths(type).size()];
    const std::vector<uint8_t> w = RawRandomWeights(type, n, &rng);
    const std::vector<uint8_t> a = RawActivations(act_type, n, rep % 2 == 1, &rng);
    const float want = canonical(n, w.data(), a.data());
    ASSERT_TRUE(std::isfinite(want)) << Name(type);
    for (KernelLevel level : kSimdLevels) {
      const VecDotFn fn = internal::LibrarySimdVecDot(type, level);
      if (fn == nullptr) continue;
      ++checked;
      EXPECT_EQ(Bits(fn(n, w.data(), a.data())), Bits(want))
          << Name(type) << " " << LevelName(level) << " rep " << rep << " got "
          << fn(n, w.data(), a.data()) << " want " << want;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD level on this CPU";
}

// The AVX-512 i-quant kernels of CPUs without VBMI/BITALG, which a CPU that
// has them never runs through LibrarySimdVecDot.
TEST(SimdIqDotTest, Avx512WithoutVbmiEqualsCanonical) {
  if (!internal::CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (GgmlType type : {GgmlType::kIQ1_S, GgmlType::kIQ1_M, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
                        GgmlType::kIQ3_XXS, GgmlType::kIQ3_S}) {
    const VecDotFn fn = internal::Avx512IqDotWithoutVbmi(type);
    ASSERT_NE(fn, nullptr) << Name(type);
    const VecDotFn canonical = internal::CanonicalVecDot(type);
    const GgmlType act_type = GetTypeTraits(type)->vec_dot_type;
    std::mt19937 rng(static_cast<uint32_t>(type) * 131);
    for (int rep = 0; rep < 6; ++rep) {
      const int64_t n = Lengths(type)[rep % Lengths(type).size()];
      const std::vector<uint8_t> w = RawRandomWeights(type, n, &rng);
      const std::vector<uint8_t> a = RawActivations(act_type, n, rep % 2 == 1, &rng);
      EXPECT_EQ(Bits(fn(n, w.data(), a.data())), Bits(canonical(n, w.data(), a.data())))
          << Name(type) << " rep " << rep;
    }
  }
  EXPECT_EQ(internal::Avx512IqDotWithoutVbmi(GgmlType::kQ4_K), nullptr);
}

TEST_P(SimdFloatDotTest, LevelsMatchScalar) {
  const GgmlType type = GetParam();
  int checked = 0;
  for (int64_t n : {1, 7, 16, 33, 100, 2048, 2051}) {
    std::vector<uint8_t> w = Bytes(type, n);
    ASSERT_TRUE(FillRandomBlocks(type, n, 0.02f, w.data(), n).ok());
    const std::vector<float> x = RandomActivations(n, 9);
    std::vector<uint8_t> a = Bytes(type, n);
    ASSERT_TRUE(QuantizeRow(type, x.data(), a.data(), n).ok());
    const float want = internal::ScalarVecDot(type)(n, w.data(), a.data());
    for (KernelLevel level : kSimdLevels) {
      const VecDotFn fn = internal::LibrarySimdVecDot(type, level);
      if (fn == nullptr) continue;
      ++checked;
      EXPECT_NEAR(fn(n, w.data(), a.data()), want, 1e-5 * (1 + std::fabs(want)))
          << Name(type) << " " << LevelName(level) << " n=" << n;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD level on this CPU";
}

// vec_dot_rows equals vec_dot row by row, at every level (scalar included),
// for every weight format.
TEST(VecDotRowsTest, EqualsVecDotPerRowAtEveryLevel) {
  const KernelLevel saved = ActiveKernelLevel();
  for (KernelLevel level : {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512, KernelLevel::kAmx}) {
    SetActiveKernelLevel(level);
    for (GgmlType type : testing::WeightTypes()) {
      const TypeTraits* t = GetTypeTraits(type);
      ASSERT_NE(t->vec_dot_rows, nullptr) << Name(type) << " " << LevelName(level);
      const int64_t n = TypeInfo(type).block_size == 256 ? 768 : 96, rows = 37;
      const uint64_t rb = *RowBytes(type, n) + (IsFloatType(type) ? 0 : 2);  // padded rows too
      std::vector<uint8_t> w(rb * rows);
      for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(FillRandomBlocks(type, r, 0.02f, w.data() + r * rb, n).ok());
      const std::vector<float> x = RandomActivations(n, 4);
      std::vector<uint8_t> a = Bytes(t->vec_dot_type, n);
      ASSERT_TRUE(QuantizeRow(t->vec_dot_type, x.data(), a.data(), n).ok());
      std::vector<float> y(rows, NAN);
      t->vec_dot_rows(n, w.data(), rb, rows, a.data(), y.data());
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(Bits(y[r]), Bits(t->vec_dot(n, w.data() + r * rb, a.data())))
            << Name(type) << " " << LevelName(level) << " row " << r;
      }
    }
  }
  SetActiveKernelLevel(saved);
}

// vec_dot_tokens, where a level has one (F32 at AVX-512), equals vec_dot
// per (row, token) bit for bit: row, token and column counts that leave
// partial register blocks and both tails (16-lane and scalar).
TEST(VecDotTokensTest, EqualsVecDotPerRowAndToken) {
  const KernelLevel saved = ActiveKernelLevel();
  int checked = 0;
  for (KernelLevel level : {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512, KernelLevel::kAmx}) {
    SetActiveKernelLevel(level);
    for (GgmlType type : testing::WeightTypes()) {
      const TypeTraits* t = GetTypeTraits(type);
      if (t->vec_dot_tokens == nullptr) continue;
      for (int64_t n : {int64_t{2048}, int64_t{2880}, int64_t{100}, int64_t{7}}) {
        if (n % TypeInfo(type).block_size != 0) continue;
        ++checked;
        const int64_t rows = 7, tokens = 8;
        const uint64_t rb = *RowBytes(type, n), ab = *RowBytes(t->vec_dot_type, n);
        std::vector<uint8_t> w(rb * rows), a(ab * tokens);
        for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(FillRandomBlocks(type, r, 0.02f, w.data() + r * rb, n).ok());
        for (int64_t i = 0; i < tokens; ++i) {
          const std::vector<float> x = RandomActivations(n, 10 + i);
          ASSERT_TRUE(QuantizeRow(t->vec_dot_type, x.data(), a.data() + i * ab, n).ok());
        }
        const int64_t ldy = rows + 3;
        std::vector<float> y(tokens * ldy, NAN);
        t->vec_dot_tokens(n, w.data(), rb, rows, a.data(), ab, tokens, y.data(), ldy);
        for (int64_t i = 0; i < tokens; ++i) {
          for (int64_t r = 0; r < rows; ++r) {
            EXPECT_EQ(Bits(y[i * ldy + r]), Bits(t->vec_dot(n, w.data() + r * rb, a.data() + i * ab)))
                << Name(type) << " " << LevelName(level) << " n=" << n << " row " << r << " token " << i;
          }
          for (int64_t r = rows; r < ldy; ++r) EXPECT_TRUE(std::isnan(y[i * ldy + r]));
        }
      }
    }
  }
  SetActiveKernelLevel(saved);
  if (checked == 0) GTEST_SKIP() << "no level with a tokens form on this CPU";
}

float FakeDot(int64_t, const void*, const void*) { return 1.0f; }

TEST(VecDotRowsTest, ClearedWhenAKernelIsRegisteredOverTheLibrarys) {
  const KernelLevel saved = ActiveKernelLevel();
  RegisterVecDot(GgmlType::kQ4_0, KernelLevel::kAmx, FakeDot);
  SetActiveKernelLevel(KernelLevel::kAmx);
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ4_0)->vec_dot, FakeDot);
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ4_0)->vec_dot_rows, nullptr);
  RegisterVecDot(GgmlType::kQ4_0, KernelLevel::kAmx, nullptr);
  EXPECT_NE(GetTypeTraits(GgmlType::kQ4_0)->vec_dot_rows, nullptr);
  // The tokens form goes with it.
  const VecDotTokensFn f32_tokens = GetTypeTraits(GgmlType::kF32)->vec_dot_tokens;
  RegisterVecDot(GgmlType::kF32, KernelLevel::kAmx, FakeDot);
  EXPECT_EQ(GetTypeTraits(GgmlType::kF32)->vec_dot_tokens, nullptr);
  RegisterVecDot(GgmlType::kF32, KernelLevel::kAmx, nullptr);
  EXPECT_EQ(GetTypeTraits(GgmlType::kF32)->vec_dot_tokens, f32_tokens);
  SetActiveKernelLevel(saved);
}

INSTANTIATE_TEST_SUITE_P(Types, SimdDotTest, ::testing::ValuesIn(QuantisedWeightTypes()),
                         [](const auto& info) { return Name(info.param); });
INSTANTIATE_TEST_SUITE_P(Types, SimdFloatDotTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16),
                         [](const auto& info) { return Name(info.param); });

// ---- quantisers -----------------------------------------------------------

std::vector<float> TrickyActivations(int64_t n, uint32_t seed) {
  std::vector<float> x = RandomActivations(n, seed);
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    switch (rng() % 8) {
      case 0: x[i] = std::round(x[i] * 4) / 4; break;  // halves and quarters: rounding ties
      case 1: x[i] = -x[i] * 1e-3f; break;
      case 2: x[i] = 0.0f; break;
      default: break;
    }
  }
  // A zero block, a block whose extreme is negative and repeated, subnormals.
  for (int64_t i = 0; i < std::min<int64_t>(n, 256); ++i) x[i] = 0.0f;
  if (n >= 512) {
    x[300] = -9.0f;
    x[301] = 9.0f;
    x[302] = -9.0f;
  }
  if (n >= 600) x[550] = 1e-40f;
  return x;
}

TEST(SimdQuantizerTest, ByteIdenticalToReference) {
  const GgmlType types[] = {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ8_1,
                            GgmlType::kQ8_K};
  int checked = 0;
  for (const internal::SimdQuantizer& q : internal::CpuSimdKernels().quantizers) {
    for (GgmlType t : types) {
      if (q.type != t) continue;
      for (int64_t n : {256, 768, 2048}) {
        std::vector<float> x = TrickyActivations(n, static_cast<uint32_t>(n));
        if (t == GgmlType::kF16 || t == GgmlType::kBF16) {
          x[5] = NAN;
          x[6] = -INFINITY;
          x[7] = 70000.0f;
          x[8] = -1e-42f;
        }
        std::vector<uint8_t> want = Bytes(t, n), got = Bytes(t, n);
        internal::ReferenceQuantizer(t)(x.data(), want.data(), n);
        q.fn(x.data(), got.data(), n);
        EXPECT_EQ(got, want) << Name(t) << " " << LevelName(q.level) << " n=" << n;
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD quantisers on this CPU";
}

}  // namespace
}  // namespace moesplit::quant
