#include "common/quant/random_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/iq_grids.h"
#include "common/quant/internal/kernels.h"

namespace moesplit::quant {
namespace {

using namespace internal;  // NOLINT: block layouts

// wyrand: 64 random bits per multiply, passes BigCrush; seeded by splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s_ = z ^ (z >> 31);
  }
  uint64_t Next() {
    s_ += 0xa0761d6478bd642full;
    const __uint128_t t = static_cast<__uint128_t>(s_) * (s_ ^ 0xe7037ed1a0b428dbull);
    return static_cast<uint64_t>(t >> 64) ^ static_cast<uint64_t>(t);
  }
  void Fill(void* dst, size_t n) {
    uint8_t* p = static_cast<uint8_t*>(dst);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint64_t r = Next();
      std::memcpy(p + i, &r, 8);
    }
    if (i < n) {
      const uint64_t r = Next();
      std::memcpy(p + i, &r, n - i);
    }
  }

 private:
  uint64_t s_;
};

// First and second moments of a random variable; independent factors
// multiply moment-wise.
struct Moments {
  double m1 = 1, m2 = 1;
  Moments operator*(const Moments& o) const { return {m1 * o.m1, m2 * o.m2}; }
  double Var() const { return m2 - m1 * m1; }
};

Moments UniformInts(int lo, int hi, double offset = 0) {
  Moments m{0, 0};
  for (int v = lo; v <= hi; ++v) {
    m.m1 += v + offset;
    m.m2 += (v + offset) * (v + offset);
  }
  m.m1 /= hi - lo + 1;
  m.m2 /= hi - lo + 1;
  return m;
}

Moments OfTable(const int8_t* t, int n) {
  Moments m{0, 0};
  for (int i = 0; i < n; ++i) {
    m.m1 += t[i];
    m.m2 += static_cast<double>(t[i]) * t[i];
  }
  m.m1 /= n;
  m.m2 /= n;
  return m;
}

// Per-block scale factor 0.5 + k/15 for a uniform 4-bit k.
inline float BlockFactor(uint64_t k) { return 0.5f + static_cast<float>(k & 15) / 15.0f; }
// Same with a random sign from bit 4, for formats whose ggml quantisers emit
// scales of either sign; it centres their asymmetric codebooks.
inline float SignedBlockFactor(uint64_t r) {
  return (r & 16) ? -BlockFactor(r) : BlockFactor(r);
}

Moments FactorMoments() {
  Moments m{0, 0};
  for (int k = 0; k < 16; ++k) {
    m.m1 += BlockFactor(k);
    m.m2 += static_cast<double>(BlockFactor(k)) * BlockFactor(k);
  }
  m.m1 /= 16;
  m.m2 /= 16;
  return m;
}

// Random int8 codes in [-127, 127] (-128 folded onto -127, as real
// quantisers never emit it and some SIMD sign tricks overflow on it).
inline void FixInt8(int8_t* q, int n) {
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(q[i] + (q[i] == -128));
}
Moments Int8CodeMoments() {
  Moments m{0, 0};
  for (int b = -128; b < 128; ++b) {
    const int v = b == -128 ? -127 : b;
    m.m1 += v;
    m.m2 += static_cast<double>(v) * v;
  }
  m.m1 /= 256;
  m.m2 /= 256;
  return m;
}

// Plan for one type: the base block scale d0, the f16 block scales for each
// 4-bit factor index (entries 16..31 negated) and the f16 mins at
// min_mult * d, so no block pays for an f32 -> f16 conversion.
struct Plan {
  double d0 = 0;
  double max_mult = 1.5;  // largest stored scale or min, in units of d0
  uint16_t d16[32] = {};
  uint16_t m16[16] = {};

  uint16_t D(uint64_t r) const { return d16[r & 15]; }
  uint16_t SignedD(uint64_t r) const { return d16[r & 31]; }
  uint16_t M(uint64_t r) const { return m16[r & 15]; }
};

Plan MakePlan(double scale, Moments unit, double min_mult) {
  Plan p;
  p.d0 = scale / std::sqrt((FactorMoments() * unit).Var());
  p.max_mult = 1.5 * std::max(1.0, std::fabs(min_mult));
  for (int k = 0; k < 32; ++k) {
    p.d16[k] = Fp32ToFp16(static_cast<float>(p.d0) * SignedBlockFactor(k));
  }
  for (int k = 0; k < 16; ++k) {
    p.m16[k] = Fp32ToFp16(static_cast<float>(min_mult) * Fp16ToFp32(p.d16[k]));
  }
  return p;
}

absl::Status CheckPlan(GgmlType type, float scale, const Plan& p) {
  const double lo = p.d0 * 0.5, hi = p.d0 * p.max_mult;
  if (lo < 1.0 / (1 << 20) || hi > 60000.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FillRandomBlocks: scale ", scale, " puts ", std::string(GgmlTypeName(type)),
        " block scales outside the f16 range"));
  }
  return absl::OkStatus();
}

template <typename Block, typename FillOne>
void ForBlocks(uint8_t* dst, int64_t n_blocks, FillOne fill_one) {
  Block* b = reinterpret_cast<Block*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i) fill_one(&b[i]);
}

// ---- plain floats ---------------------------------------------------------

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void Fp32ToFp16F16c(const float* x, uint16_t* y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) y[i] = Fp32ToFp16(x[i]);
}
bool HaveF16c() { return CpuHasAvx2(); }
#else
void Fp32ToFp16F16c(const float*, uint16_t*, int) {}
bool HaveF16c() { return false; }
#endif

// Uniform on [-sqrt(3) scale, sqrt(3) scale), generated 256 values at a time
// and converted in bulk (F16C where present; identical rounding either way).
void FillFloats(GgmlType type, Rng& rng, float scale, uint8_t* dst, int64_t n) {
  constexpr int kChunk = 256;
  const float a = scale * std::sqrt(3.0f) / 2147483648.0f;  // 2^31
  float v[kChunk];
  uint16_t h[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int m = static_cast<int>(std::min<int64_t>(kChunk, n - i));
    for (int k = 0; k < m; k += 2) {
      const uint64_t r = rng.Next();
      v[k] = static_cast<float>(static_cast<int32_t>(r)) * a;
      v[k + 1] = static_cast<float>(static_cast<int32_t>(r >> 32)) * a;
    }
    if (type == GgmlType::kF32) {
      std::memcpy(dst + 4 * i, v, 4 * m);
      continue;
    }
    if (type == GgmlType::kBF16) {
      // Values are finite by construction, so Fp32ToBf16's NaN branch is
      // not needed and the round-to-nearest-even loop vectorises.
      for (int k = 0; k < m; ++k) {
        const uint32_t u = Fp32ToBits(v[k]);
        h[k] = static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
      }
    } else if (HaveF16c()) {
      Fp32ToFp16F16c(v, h, m);
    } else {
      for (int k = 0; k < m; ++k) h[k] = Fp32ToFp16(v[k]);
    }
    std::memcpy(dst + 2 * i, h, 2 * m);
  }
}

// ---- 32-element blocks ----------------------------------------------------

void FillQ4_0(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ4_0>(dst, nb, [&](BlockQ4_0* b) {
    b->d = p.SignedD(rng.Next());
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

void FillQ4_1(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ4_1>(dst, nb, [&](BlockQ4_1* b) {
    const uint64_t r = rng.Next();
    b->d = p.D(r);
    b->m = p.M(r);
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

void FillQ5_0(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ5_0>(dst, nb, [&](BlockQ5_0* b) {
    const uint64_t r = rng.Next();
    b->d = p.SignedD(r);
    const uint32_t qh = static_cast<uint32_t>(r >> 32);
    std::memcpy(b->qh, &qh, 4);
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

void FillQ5_1(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ5_1>(dst, nb, [&](BlockQ5_1* b) {
    const uint64_t r = rng.Next();
    b->d = p.D(r);
    b->m = p.M(r);
    const uint32_t qh = static_cast<uint32_t>(r >> 32);
    std::memcpy(b->qh, &qh, 4);
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

void FillQ8_0(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ8_0>(dst, nb, [&](BlockQ8_0* b) {
    b->d = p.D(rng.Next());
    rng.Fill(b->qs, sizeof(b->qs));
    FixInt8(b->qs, kQK8_0);
  });
}

void FillQ8_1(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ8_1>(dst, nb, [&](BlockQ8_1* b) {
    const float d = static_cast<float>(p.d0) * BlockFactor(rng.Next());
    rng.Fill(b->qs, sizeof(b->qs));
    FixInt8(b->qs, kQK8_1);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) sum += b->qs[j];
    b->d = Fp32ToFp16(d);
    b->s = Fp32ToFp16(sum * d);
  });
}

void FillIq4Nl(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockIq4Nl>(dst, nb, [&](BlockIq4Nl* b) {
    b->d = p.SignedD(rng.Next());
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

// MXFP4 scales are powers of two: each block takes exponent e0 with
// probability p_low and e0 + 1 otherwise, which matches the variance exactly.
struct Mxfp4Plan {
  int e0 = 0;
  uint32_t p_low_u32 = 0;  // p_low * 2^32
};

absl::Status PlanMxfp4(float scale, Mxfp4Plan* plan) {
  const double sigma1 = std::sqrt(OfTable(kValuesMxfp4, 16).Var());
  const double t = std::log2(scale / sigma1) + 128;
  const int e0 = static_cast<int>(std::floor(t));
  if (e0 < 2 || e0 > 253) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FillRandomBlocks: scale ", scale, " is outside the MXFP4 exponent range"));
  }
  const double u = std::exp2(2 * (t - e0));  // variance ratio in [1, 4)
  const double p_low = (4 - u) / 3;
  plan->e0 = e0;
  plan->p_low_u32 = static_cast<uint32_t>(std::min(p_low * 4294967296.0, 4294967295.0));
  return absl::OkStatus();
}

void FillMxfp4(Rng& rng, const Mxfp4Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockMxfp4>(dst, nb, [&](BlockMxfp4* b) {
    const uint32_t r = static_cast<uint32_t>(rng.Next());
    b->e = static_cast<uint8_t>(r < p.p_low_u32 ? p.e0 : p.e0 + 1);
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

// ---- 256-element super-blocks -------------------------------------------

// Sub-block scale ranges (kept small so the f16 super-block scale stays in
// the normal range for typical weight scales).
constexpr int kSubLo = 8, kSubHi = 15;     // Q2_K, Q3_K, IQ4_XS (3 random bits)
constexpr int kSub6Lo = 16, kSub6Hi = 31;  // Q4_K, Q5_K, Q6_K (4 random bits)

void FillQ2_K(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ2_K>(dst, nb, [&](BlockQ2_K* b) {
    uint64_t r = rng.Next();
    b->d = p.D(r);
    b->dmin = p.M(r);
    r >>= 4;
    for (int j = 0; j < 16; ++j, r >>= 3) {
      const int sc = kSubLo + static_cast<int>(r & 7);
      b->scales[j] = static_cast<uint8_t>(sc | (sc << 4));
    }
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

void FillQ3_K(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ3_K>(dst, nb, [&](BlockQ3_K* b) {
    uint64_t r = rng.Next();
    b->d = p.SignedD(r);
    r >>= 5;
    std::memset(b->scales, 0, sizeof(b->scales));
    for (int j = 0; j < 16; ++j, r >>= 3) {
      PutQ3KScale(j, 32 + kSubLo + static_cast<int>(r & 7), b->scales);
    }
    rng.Fill(b->hmask, sizeof(b->hmask));
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

// Q4_K / Q5_K scales: min = scale and dmin = centre * d (from the plan), so
// each sub-block is d * sc * (q - centre).
void FillKScales(Rng& rng, const Plan& p, uint8_t* scales, uint16_t* d, uint16_t* dmin) {
  uint64_t r = rng.Next();
  *d = p.D(r);
  *dmin = p.M(r);
  r >>= 4;
  std::memset(scales, 0, kKScaleSize);
  for (int j = 0; j < 8; ++j, r >>= 4) {
    const uint8_t sc = static_cast<uint8_t>(kSub6Lo + (r & 15));
    PutScaleMinK4(j, sc, sc, scales);
  }
}

void FillQ4_K(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ4_K>(dst, nb, [&](BlockQ4_K* b) {
    FillKScales(rng, p, b->scales, &b->d, &b->dmin);
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

void FillQ5_K(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ5_K>(dst, nb, [&](BlockQ5_K* b) {
    FillKScales(rng, p, b->scales, &b->d, &b->dmin);
    rng.Fill(b->qh, sizeof(b->qh));
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

void FillQ6_K(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ6_K>(dst, nb, [&](BlockQ6_K* b) {
    b->d = p.SignedD(rng.Next());
    uint64_t r = rng.Next();
    for (int j = 0; j < 16; ++j, r >>= 4) b->scales[j] = static_cast<int8_t>(kSub6Lo + (r & 15));
    rng.Fill(b->ql, sizeof(b->ql));
    rng.Fill(b->qh, sizeof(b->qh));
  });
}

void FillQ8_K(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockQ8_K>(dst, nb, [&](BlockQ8_K* b) {
    b->d = static_cast<float>(p.d0) * BlockFactor(rng.Next());
    rng.Fill(b->qs, sizeof(b->qs));
    FixInt8(b->qs, kQK_K);
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += b->qs[16 * j + k];
      b->bsums[j] = static_cast<int16_t>(sum);
    }
  });
}

void FillIq4Xs(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockIq4Xs>(dst, nb, [&](BlockIq4Xs* b) {
    uint64_t r = rng.Next();
    b->d = p.SignedD(r);
    r >>= 5;
    b->scales_h = 0;
    std::memset(b->scales_l, 0, sizeof(b->scales_l));
    for (int ib = 0; ib < 8; ++ib, r >>= 3) {
      const int ls = 32 + kSubLo + static_cast<int>(r & 7);
      b->scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
      b->scales_h |= static_cast<uint16_t>(((ls >> 4) & 3) << (2 * ib));
    }
    rng.Fill(b->qs, sizeof(b->qs));
  });
}

// ---- i-quants and ternary types ---------------------------------------------
//
// Every bit pattern of the i-quant blocks is valid (grid indices address the
// whole codebook, the sign patterns and 3/4-bit sub-block scales use every
// value), so only the f16 block scale is chosen; the rest is random bits.
// The ternary types get uniform digits in {0, 1, 2}, packed as ggml does.

template <typename Block>
void FillIqBits(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<Block>(dst, nb, [&](Block* b) {
    rng.Fill(b, sizeof(Block));
    b->d = p.D(rng.Next());
  });
}

void FillIq1M(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  ForBlocks<BlockIq1M>(dst, nb, [&](BlockIq1M* b) {
    rng.Fill(b, sizeof(BlockIq1M));
    // The f16 scale lives in the top nibble of the four 16-bit scale words.
    const uint16_t d = p.D(rng.Next());
    uint16_t sc[4];
    std::memcpy(sc, b->scales, sizeof(sc));
    for (int k = 0; k < 4; ++k) {
      sc[k] = static_cast<uint16_t>((sc[k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12));
    }
    std::memcpy(b->scales, sc, sizeof(sc));
  });
}

// Uniform base-3 digits: byte % 3 of random bytes, the byte 255 rejected
// (0..254 is 85 whole runs of 3, so exactly uniform).
class TritSource {
 public:
  explicit TritSource(Rng& rng) : rng_(rng) {}
  int Next() {
    for (;;) {
      if (left_ == 0) {
        bits_ = rng_.Next();
        left_ = 8;
      }
      const int byte = static_cast<int>(bits_ & 0xFF);
      bits_ >>= 8;
      --left_;
      if (byte < 255) return byte % 3;
    }
  }

 private:
  Rng& rng_;
  uint64_t bits_ = 0;
  int left_ = 0;
};

// ggml quantize_row_tq1_0_ref's packing of digits (most significant first,
// as a fixed-point fraction rounded up).
inline uint8_t PackTrits(const int* digits, int count) {
  uint16_t q = 0;
  for (int k = 0; k < count; ++k) q = static_cast<uint16_t>(q * 3 + digits[k]);
  for (int k = count; k < 5; ++k) q = static_cast<uint16_t>(q * 3);
  return static_cast<uint8_t>((q * 256 + 242) / 243);
}

void FillTq1_0(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  TritSource trits(rng);
  ForBlocks<BlockTq1_0>(dst, nb, [&](BlockTq1_0* b) {
    int digits[5];
    for (size_t m = 0; m < sizeof(b->qs); ++m) {
      for (int& t : digits) t = trits.Next();
      b->qs[m] = PackTrits(digits, 5);
    }
    for (size_t m = 0; m < sizeof(b->qh); ++m) {
      for (int k = 0; k < 4; ++k) digits[k] = trits.Next();
      b->qh[m] = PackTrits(digits, 4);
    }
    b->d = p.D(rng.Next());
  });
}

void FillTq2_0(Rng& rng, const Plan& p, uint8_t* dst, int64_t nb) {
  TritSource trits(rng);
  ForBlocks<BlockTq2_0>(dst, nb, [&](BlockTq2_0* b) {
    for (uint8_t& q : b->qs) {
      q = 0;
      for (int l = 0; l < 4; ++l) q = static_cast<uint8_t>(q | (trits.Next() << (2 * l)));
    }
    b->d = p.D(rng.Next());
  });
}

// Moments of the values of a codebook of `width` one-byte values per entry
// (unsigned magnitudes, or int8 when is_signed), every entry equally likely;
// `sign_flips`: each value gets an independent random sign (mean 0).
template <typename Entry>
Moments OfGrid(const Entry* grid, int n, int width, bool is_signed, bool sign_flips) {
  Moments m{0, 0};
  for (int e = 0; e < n; ++e) {
    for (int j = 0; j < width; ++j) {
      const uint8_t byte = static_cast<uint8_t>(grid[e] >> (8 * j));
      const double v = is_signed ? static_cast<int8_t>(byte) : byte;
      m.m1 += v;
      m.m2 += v * v;
    }
  }
  m.m1 = sign_flips ? 0 : m.m1 / (n * width);
  m.m2 /= n * width;
  return m;
}

// Moments of a + b s for s uniform on 0 .. 2^bits - 1.
Moments AffineScale(double a, double b, int bits) {
  Moments m{0, 0};
  const int n = 1 << bits;
  for (int s = 0; s < n; ++s) {
    m.m1 += a + b * s;
    m.m2 += (a + b * s) * (a + b * s);
  }
  m.m1 /= n;
  m.m2 /= n;
  return m;
}

// Grid value plus IQ1's delta of +-1/8 (random sign).
Moments Iq1Values() {
  Moments g = OfGrid(kIq1SGrid, 2048, 8, true, false);
  g.m2 += static_cast<double>(kIq1SDelta) * kIq1SDelta;
  return g;
}

// Unit moments (block factor excluded) and the min as a multiple of d.
bool UnitMoments(GgmlType type, Moments* unit, double* min_mult) {
  const Moments sub = UniformInts(kSubLo, kSubHi), sub6 = UniformInts(kSub6Lo, kSub6Hi);
  *min_mult = 0;
  switch (type) {
    case GgmlType::kQ4_0: *unit = UniformInts(0, 15, -8); return true;
    case GgmlType::kQ4_1: *unit = UniformInts(0, 15, -7.5); *min_mult = -7.5; return true;
    case GgmlType::kQ5_0: *unit = UniformInts(0, 31, -16); return true;
    case GgmlType::kQ5_1: *unit = UniformInts(0, 31, -15.5); *min_mult = -15.5; return true;
    case GgmlType::kQ8_0:
    case GgmlType::kQ8_1:
    case GgmlType::kQ8_K: *unit = Int8CodeMoments(); return true;
    case GgmlType::kIQ4_NL: *unit = OfTable(kValuesIq4Nl, 16); return true;
    case GgmlType::kIQ4_XS: *unit = OfTable(kValuesIq4Nl, 16) * sub; return true;
    case GgmlType::kQ2_K: *unit = UniformInts(0, 3, -1.5) * sub; *min_mult = 1.5; return true;
    case GgmlType::kQ3_K: *unit = UniformInts(-4, 3) * sub; return true;
    case GgmlType::kQ4_K: *unit = UniformInts(0, 15, -7.5) * sub6; *min_mult = 7.5; return true;
    case GgmlType::kQ5_K: *unit = UniformInts(0, 31, -15.5) * sub6; *min_mult = 15.5; return true;
    case GgmlType::kQ6_K: *unit = UniformInts(0, 63, -32) * sub6; return true;
    // value = d * sub-scale * grid value (* sign), the sub-scale as ggml's
    // dequantize_row_* forms it from its 3- or 4-bit field.
    case GgmlType::kIQ2_XXS:
      *unit = AffineScale(0.125, 0.25, 4) * OfGrid(kIq2XxsGrid, 256, 8, false, true);
      return true;
    case GgmlType::kIQ2_XS:
      *unit = AffineScale(0.125, 0.25, 4) * OfGrid(kIq2XsGrid, 512, 8, false, true);
      return true;
    case GgmlType::kIQ2_S:
      *unit = AffineScale(0.125, 0.25, 4) * OfGrid(kIq2SGrid, 1024, 8, false, true);
      return true;
    case GgmlType::kIQ3_XXS:
      *unit = AffineScale(0.25, 0.5, 4) * OfGrid(kIq3XxsGrid, 256, 4, false, true);
      return true;
    case GgmlType::kIQ3_S: *unit = AffineScale(1, 2, 4) * OfGrid(kIq3SGrid, 512, 4, false, true); return true;
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M: *unit = AffineScale(1, 2, 3) * Iq1Values(); return true;
    case GgmlType::kTQ1_0:
    case GgmlType::kTQ2_0: *unit = UniformInts(-1, 1); return true;
    default: return false;
  }
}

// Formats filled with a random scale sign: their mean is zero.
bool SignedScales(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS:
    case GgmlType::kQ3_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

using BlockFiller = void (*)(Rng&, const Plan&, uint8_t*, int64_t);

BlockFiller FillerFor(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return FillQ4_0;
    case GgmlType::kQ4_1: return FillQ4_1;
    case GgmlType::kQ5_0: return FillQ5_0;
    case GgmlType::kQ5_1: return FillQ5_1;
    case GgmlType::kQ8_0: return FillQ8_0;
    case GgmlType::kQ8_1: return FillQ8_1;
    case GgmlType::kQ8_K: return FillQ8_K;
    case GgmlType::kIQ4_NL: return FillIq4Nl;
    case GgmlType::kIQ4_XS: return FillIq4Xs;
    case GgmlType::kQ2_K: return FillQ2_K;
    case GgmlType::kQ3_K: return FillQ3_K;
    case GgmlType::kQ4_K: return FillQ4_K;
    case GgmlType::kQ5_K: return FillQ5_K;
    case GgmlType::kQ6_K: return FillQ6_K;
    case GgmlType::kIQ2_XXS: return FillIqBits<BlockIq2Xxs>;
    case GgmlType::kIQ2_XS: return FillIqBits<BlockIq2Xs>;
    case GgmlType::kIQ2_S: return FillIqBits<BlockIq2S>;
    case GgmlType::kIQ3_XXS: return FillIqBits<BlockIq3Xxs>;
    case GgmlType::kIQ3_S: return FillIqBits<BlockIq3S>;
    case GgmlType::kIQ1_S: return FillIqBits<BlockIq1S>;
    case GgmlType::kIQ1_M: return FillIq1M;
    case GgmlType::kTQ1_0: return FillTq1_0;
    case GgmlType::kTQ2_0: return FillTq2_0;
    default: return nullptr;
  }
}

absl::Status CheckArgs(GgmlType type, float scale, const uint8_t* dst, int64_t n) {
  if (!LookupGgmlType(static_cast<uint32_t>(type)).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FillRandomBlocks: unknown type id ", static_cast<uint32_t>(type)));
  }
  if (!(std::isfinite(scale) && scale > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FillRandomBlocks: scale must be finite and > 0, got ", scale));
  }
  const int64_t bs = TypeInfo(type).block_size;
  if (n < 0 || n % bs != 0) {
    return absl::InvalidArgumentError(absl::StrCat("FillRandomBlocks: ", n, " ",
                                                   std::string(GgmlTypeName(type)),
                                                   " elements is not whole blocks of ", bs));
  }
  if (n > 0 && dst == nullptr) return absl::InvalidArgumentError("FillRandomBlocks: null dst");
  const uint64_t align = BlockAlignment(type);
  if (reinterpret_cast<uintptr_t>(dst) % align != 0) {
    return absl::InvalidArgumentError(absl::StrCat("FillRandomBlocks: dst of ",
                                                   std::string(GgmlTypeName(type)),
                                                   " needs ", align, "-byte alignment"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillRandomBlocks(GgmlType type, uint64_t seed, float scale, uint8_t* dst,
                              int64_t n_elements) {
  RETURN_IF_ERROR(CheckArgs(type, scale, dst, n_elements));
  Rng rng(seed ^ (static_cast<uint64_t>(type) << 56));
  const int64_t nb = n_elements / TypeInfo(type).block_size;
  if (type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16) {
    if (type == GgmlType::kF16 && scale * std::sqrt(3.0f) > 65504.0f) {
      return absl::InvalidArgumentError("FillRandomBlocks: scale overflows F16");
    }
    FillFloats(type, rng, scale, dst, n_elements);
    return absl::OkStatus();
  }
  if (type == GgmlType::kMXFP4) {
    Mxfp4Plan plan;
    RETURN_IF_ERROR(PlanMxfp4(scale, &plan));
    FillMxfp4(rng, plan, dst, nb);
    return absl::OkStatus();
  }
  Moments unit;
  double min_mult = 0;
  const BlockFiller filler = FillerFor(type);
  if (filler == nullptr || !UnitMoments(type, &unit, &min_mult)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FillRandomBlocks: type ", std::string(GgmlTypeName(type)), " is not supported"));
  }
  if (SignedScales(type)) unit.m1 = 0;
  const Plan plan = MakePlan(scale, unit, min_mult);
  RETURN_IF_ERROR(CheckPlan(type, scale, plan));
  filler(rng, plan, dst, nb);
  return absl::OkStatus();
}

}  // namespace moesplit::quant
