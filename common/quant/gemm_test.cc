// Tiled GEMM: every implementation (scalar, AVX2, AVX-512, AMX where the CPU
// has it, and the AMX kernel with emulated tile instructions) against the
// canonical dot per (row, token), bit for bit, for every quantised format,
// decode-sized and prefill-sized token counts, ragged row counts; and the
// public TileGemm against the active vec_dot.

#include "common/quant/gemm.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/quant/internal/gemm_impl.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/internal/test_util.h"
#include "common/quant/internal/unpack.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"
#include "gtest/gtest.h"

namespace moesplit::quant {
namespace {

using internal::GemmImpl;
using testing::Name;

struct AlignedBuf {
  explicit AlignedBuf(uint64_t n) : v(n + 64) {}
  uint8_t* data() { return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63}); }
  std::vector<uint8_t> v;
};

std::string ImplName(GemmImpl i) {
  switch (i) {
    case GemmImpl::kScalar: return "scalar";
    case GemmImpl::kAvx2: return "avx2";
    case GemmImpl::kAvx512: return "avx512";
    case GemmImpl::kAmx: return "amx";
    case GemmImpl::kAmxEmulated: return "amx_emulated";
  }
  return "?";
}

std::vector<GgmlType> QuantisedTypes() {
  std::vector<GgmlType> out;
  internal::UnpackLayout L;
  for (GgmlType t : testing::WeightTypes()) {
    if (internal::GetUnpackLayout(t, &L)) out.push_back(t);
  }
  return out;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A weight matrix, activation rows quantised to the vec_dot_type, and tiles.
struct Problem {
  GgmlType type, act_type;
  int64_t k, n_rows, n_tokens;
  uint64_t row_bytes, act_bytes;
  std::vector<uint8_t> w, act;
  AlignedBuf tiles{0};

  Problem(GgmlType t, int64_t k_, int64_t rows, int64_t tokens, uint32_t seed)
      : type(t), act_type(GetTypeTraits(t)->vec_dot_type), k(k_), n_rows(rows), n_tokens(tokens) {
    row_bytes = *RowBytes(type, k);
    act_bytes = *RowBytes(act_type, k);
    w.resize(row_bytes * rows);
    EXPECT_TRUE(FillRandomBlocks(type, seed, 0.03f, w.data(), k * rows).ok());
    act.resize(act_bytes * tokens);
    const std::vector<float> x = testing::RandomActivations(k * tokens, seed + 1);
    EXPECT_TRUE(QuantizeRow(act_type, x.data(), act.data(), k * tokens).ok());
    std::vector<const uint8_t*> rows_ptr(tokens);
    for (int64_t t2 = 0; t2 < tokens; ++t2) rows_ptr[t2] = act.data() + t2 * act_bytes;
    tiles = AlignedBuf(ActTileBytes(k, tokens));
    PackActTiles(act_type, rows_ptr.data(), tokens, k, tiles.data());
  }
  WeightView View() const { return {type, w.data(), n_rows, k, row_bytes}; }
  float Dot(VecDotFn fn, int64_t r, int64_t t) const {
    return fn(k, w.data() + r * row_bytes, act.data() + t * act_bytes);
  }
};

struct GemmCase {
  int64_t k, n_rows, n_tokens, row0;
};

class TileGemmTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(TileGemmTest, EveryImplementationEqualsCanonicalDot) {
  const GgmlType type = GetParam();
  const bool k256 = TypeInfo(type).block_size == 256;
  const std::vector<GemmCase> cases = {
      {k256 ? 256 : 32, 5, 1, 0},      // decode-sized
      {k256 ? 512 : 96, 21, 3, 2},     // ragged rows, a partial tile
      {k256 ? 768 : 160, 40, 37, 7},   // prefill-sized: 3 tiles
  };
  const VecDotFn canonical = internal::CanonicalVecDot(type);
  int checked = 0;
  for (const GemmCase& c : cases) {
    Problem pr(type, c.k, c.row0 + c.n_rows, c.n_tokens, static_cast<uint32_t>(c.k + c.n_tokens));
    AlignedBuf scratch(TileGemmScratchBytes(type, c.k));
    for (GemmImpl impl : {GemmImpl::kScalar, GemmImpl::kAvx2, GemmImpl::kAvx512, GemmImpl::kAmx,
                          GemmImpl::kAmxEmulated}) {
      const int64_t ldy = c.n_rows + 3;
      std::vector<float> y(c.n_tokens * ldy, -7.0f);
      if (!internal::TileGemmWith(impl, pr.View(), c.row0, c.n_rows, pr.tiles.data(), c.n_tokens,
                                  y.data(), ldy, scratch.data())) {
        continue;
      }
      ++checked;
      int bad = 0;
      for (int64_t t = 0; t < c.n_tokens; ++t) {
        for (int64_t r = 0; r < c.n_rows; ++r) {
          const float want = pr.Dot(canonical, c.row0 + r, t);
          if (Bits(y[t * ldy + r]) != Bits(want) && bad++ < 3) {
            ADD_FAILURE() << Name(type) << " " << ImplName(impl) << " k=" << c.k << " row " << r
                          << " token " << t << ": " << y[t * ldy + r] << " want " << want;
          }
        }
        for (int64_t r = c.n_rows; r < ldy; ++r) EXPECT_EQ(y[t * ldy + r], -7.0f) << "wrote past n_rows";
      }
      EXPECT_EQ(bad, 0) << Name(type) << " " << ImplName(impl) << " k=" << c.k;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST_P(TileGemmTest, PublicTileGemmEqualsActiveVecDot) {
  const GgmlType type = GetParam();
  if (!TileGemmAvailable(type)) GTEST_SKIP() << "no tiled GEMM at the active level";
  const int64_t k = TypeInfo(type).block_size == 256 ? 512 : 256;
  Problem pr(type, k, 24, 19, 5);
  AlignedBuf scratch(TileGemmScratchBytes(type, k));
  std::vector<float> y(19 * 24);
  TileGemm(pr.View(), 0, 24, pr.tiles.data(), 19, y.data(), 24, scratch.data());
  const VecDotFn dot = GetTypeTraits(type)->vec_dot;
  for (int64_t t = 0; t < 19; ++t) {
    for (int64_t r = 0; r < 24; ++r) {
      ASSERT_EQ(Bits(y[t * 24 + r]), Bits(pr.Dot(dot, r, t))) << Name(type) << " row " << r << " token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, TileGemmTest, ::testing::ValuesIn(QuantisedTypes()),
                         [](const auto& info) { return Name(info.param); });

// Restores the active level when a test changes it.
class LevelGuard {
 public:
  LevelGuard() : saved_(ActiveKernelLevel()) {}
  ~LevelGuard() { SetActiveKernelLevel(saved_); }

 private:
  KernelLevel saved_;
};

TEST(TileGemmAvailableTest, FollowsLevelAndFormat) {
  LevelGuard guard;
  EXPECT_FALSE(TileGemmAvailable(GgmlType::kF32));
  EXPECT_FALSE(TileGemmAvailable(GgmlType::kF16));
  EXPECT_FALSE(TileGemmAvailable(GgmlType::kQ8_K));
  SetActiveKernelLevel(KernelLevel::kScalar);
  EXPECT_FALSE(TileGemmAvailable(GgmlType::kQ4_K));
  SetActiveKernelLevel(KernelLevel::kAvx2);
  EXPECT_EQ(TileGemmAvailable(GgmlType::kQ4_K), internal::CpuHasAvx2());
  SetActiveKernelLevel(KernelLevel::kAmx);
  EXPECT_EQ(TileGemmAvailable(GgmlType::kQ6_K), internal::CpuHasAvx2());
}

TEST(TileGemmAmxTest, RealTilesWhereTheCpuHasThem) {
  if (!internal::CpuHasAmxInt8()) GTEST_SKIP() << "no AMX-INT8 (or Linux refused the tile state)";
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kQ6_K}) {
    Problem pr(type, 512, 32, 40, 9);
    AlignedBuf scratch(TileGemmScratchBytes(type, 512));
    std::vector<float> y(40 * 32), want(40 * 32);
    ASSERT_TRUE(internal::TileGemmWith(GemmImpl::kAmx, pr.View(), 0, 32, pr.tiles.data(), 40, y.data(),
                                       32, scratch.data()));
    ASSERT_TRUE(internal::TileGemmWith(GemmImpl::kScalar, pr.View(), 0, 32, pr.tiles.data(), 40,
                                       want.data(), 32, scratch.data()));
    EXPECT_EQ(y, want) << Name(type);
  }
}

}  // namespace
}  // namespace moesplit::quant
