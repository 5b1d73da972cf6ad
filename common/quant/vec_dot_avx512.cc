// AVX-512 (F/BW/VL/DQ + VNNI) dot kernels for every weight format: the
// 32-element formats run the bodies of internal/x86_dot.inc with VNNI
// vpdpbusd as the byte dot; the K-quants, the i-quants (internal/
// iq_avx512.inc's decoder) and the float formats have 512-bit kernels here
// (TQ1_0/TQ2_0: x86_dot.inc's generic one over UnpackBlock). Same canonical order as every other SIMD kernel
// (internal/unpack.h). Compiled with `#pragma GCC target` inside an
// anonymous namespace; only called when CpuHasAvx512Vnni().

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/iq_grids.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/internal/unpack.h"

namespace moesplit::quant::internal {

#if defined(__x86_64__)
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
// GCC 12 warns about the deliberately undefined upper halves of the 512-bit
// cast intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

inline __m256i DotAcc(__m256i acc, __m256i u8, __m256i s8) { return _mm256_dpbusd_epi32(acc, u8, s8); }
inline __m256i BitsToBytes(uint32_t bits) { return _mm256_movm_epi8(bits); }

#include "common/quant/internal/x86_dot.inc"

inline __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }

// [a | b] from two 256-bit halves.
inline __m512i Join(__m256i a, __m256i b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}



// Two Q4_K / Q5_K superblocks at a time. Codes in natural order against the
// activation with VNNI; the 16 int32 lanes of each 64-element product are
// reduced to the 8 group sums, multiplied by the sub-scales, and reduced
// together with the mins term, giving [isum A, isum B, imin A, imin B]; the
// canonical float steps are DotQ45KPairs's (x86_dot.inc).

// Lane sums of a 64-element product D (lanes 0..7 group 2j, 8..15 group
// 2j+1) for j = 0..3: returns per superblock [S0 S2 S4 S6 | x | S1 S3 S5 S7 | x].
__attribute__((always_inline)) inline __m512i GroupSums4(__m512i d0, __m512i d1, __m512i d2, __m512i d3) {
  const __m512i x01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d0, d1), _mm512_unpackhi_epi32(d0, d1));
  const __m512i x23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d2, d3), _mm512_unpackhi_epi32(d2, d3));
  const __m512i z = _mm512_add_epi32(_mm512_unpacklo_epi64(x01, x23), _mm512_unpackhi_epi64(x01, x23));
  return _mm512_add_epi32(z, _mm512_shuffle_i32x4(z, z, _MM_SHUFFLE(2, 3, 0, 1)));
}

template <bool kFive>
__attribute__((always_inline)) inline __m512i K45Codes(const uint8_t* qs, const uint8_t* qh, int half, int p, __m512i m4) {
  const __m512i q = Load512(qs + 64 * p);
  const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
  __m512i c = half == 0 ? _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0))
                        : _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
  if constexpr (kFive) {
    // Elements 128p + 64 half + 0..63 are chunks 4p + 2 half (+1): bits of qh.
    const int b0 = 4 * p + 2 * half;
    const __m512i h = _mm512_broadcast_i64x4(Load256(qh));
    const __m512i bits = Join(_mm256_set1_epi8(static_cast<char>(1 << b0)), _mm256_set1_epi8(static_cast<char>(1 << (b0 + 1))));
    c = _mm512_mask_add_epi8(c, _mm512_test_epi8_mask(h, bits), c, _mm512_set1_epi8(16));
  }
  return c;
}

// [isum A, isum B, imin A, imin B] of superblocks a, b (the same block may
// be passed twice), for DotQ45KPairs.
struct K45Sums512 {
  template <bool kFive, typename Block>
  __attribute__((always_inline)) static __m128i Of(const Block& a, const Block& b, const BlockQ8_K& ya,
                                                   const BlockQ8_K& yb) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m256i sc_order = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 2, 4, 6, 1, 3,
                                              5, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m128i min_order = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
    __m512i d[2][4];
    const Block* blk[2] = {&a, &b};
    const BlockQ8_K* act[2] = {&ya, &yb};
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s) {
      const uint8_t* qh = nullptr;
      if constexpr (kFive) qh = blk[s]->qh;
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        d[s][c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), K45Codes<kFive>(blk[s]->qs, qh, c % 2, c / 2, m4),
                                      Load512(act[s]->qs + 64 * c));
      }
    }
    const __m512i ga = GroupSums4(d[0][0], d[0][1], d[0][2], d[0][3]);
    const __m512i gb = GroupSums4(d[1][0], d[1][1], d[1][2], d[1][3]);
    // [A: S0 S2 S4 S6 S1 S3 S5 S7 | B: same] times the matching sub-scales.
    const __m512i g = _mm512_shuffle_i32x4(ga, gb, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256i sm = _mm256_shuffle_epi8(K4ScalesPair(a.scales, b.scales), sc_order);
    const __m128i sc8 = _mm256_castsi256_si128(_mm256_permute4x64_epi64(sm, _MM_SHUFFLE(3, 1, 2, 0)));
    const __m512i prod = _mm512_mullo_epi32(g, _mm512_cvtepu8_epi32(sc8));
    // Mins: [A m0..3, B m0..3 | A m4..7, B m4..7] against the group sums of q.
    const __m128i mins8 =
        _mm_shuffle_epi8(_mm256_castsi256_si128(_mm256_permute4x64_epi64(sm, _MM_SHUFFLE(3, 1, 3, 1))), min_order);
    const __m256i qsum = _mm256_hadd_epi16(Load256(ya.bsums), Load256(yb.bsums));
    const __m256i mins = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mins8), qsum);
    const __m256i t = _mm256_hadd_epi32(_mm512_castsi512_si256(prod), _mm512_extracti64x4_epi64(prod, 1));
    const __m256i u = _mm256_hadd_epi32(t, mins);
    return _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
  }
};

float DotQ6K512(int64_t n, const void* vx, const void* vy) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3);
  // int16 lane l of the scale vector for quarter pair p: group 4p + l / 8.
  const __m512i idx_base = _mm512_srli_epi16(
      _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                       11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      3);
  float acc = 0;
  for (int64_t i = 0; i < n / 256; ++i) {
    const __m256i sc16y = _mm256_cvtepi8_epi16(Load128(x[i].scales));
    const int corr = HsumI32(_mm256_madd_epi16(sc16y, Load256(y[i].bsums)));
    const __m512i sc16 = _mm512_castsi256_si512(sc16y);
    __m512i sumi = _mm512_setzero_si512();
    #pragma GCC unroll 16
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = Load256(x[i].ql + 64 * h), ql1 = Load256(x[i].ql + 64 * h + 32);
      const __m256i qh = Load256(x[i].qh + 32 * h);
      const __m512i ql = Join(ql0, ql1);
      const __m512i h01 = Join(qh, _mm256_srli_epi16(qh, 2));
      const __m512i h23 = Join(_mm256_srli_epi16(qh, 4), _mm256_srli_epi16(qh, 6));
      const __m512i c01 = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                          _mm512_slli_epi16(_mm512_and_si512(h01, m3), 4));
      const __m512i c23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                          _mm512_slli_epi16(_mm512_and_si512(h23, m3), 4));
      const int8_t* q8 = y[i].qs + 128 * h;
      const __m512i p01 = _mm512_maddubs_epi16(c01, Load512(q8));
      const __m512i p23 = _mm512_maddubs_epi16(c23, Load512(q8 + 64));
      const __m512i s01 = _mm512_permutexvar_epi16(_mm512_add_epi16(idx_base, _mm512_set1_epi16(8 * h)), sc16);
      const __m512i s23 =
          _mm512_permutexvar_epi16(_mm512_add_epi16(idx_base, _mm512_set1_epi16(8 * h + 4)), sc16);
      sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p01, s01));
      sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p23, s23));
    }
    acc = FinishSuper(_mm512_reduce_add_epi32(sumi) - 32 * corr, _cvtsh_ss(x[i].d), y[i].d, acc);
  }
  return acc;
}

// ---- float formats -------------------------------------------------------------

inline __m512 LoadF16x16(const uint16_t* p) { return _mm512_cvtph_ps(Load256(p)); }
inline __m512 LoadBf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(Load256(p)), 16));
}
inline __m512 LoadF32x16(const float* p) { return _mm512_loadu_ps(p); }

template <typename T, __m512 (*kLoad)(const T*), float (*kScalar)(T)>
float DotFloat512(int64_t n, const void* vx, const void* vy) {
  const T* x = static_cast<const T*>(vx);
  const T* y = static_cast<const T*>(vy);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    #pragma GCC unroll 16
    for (int k = 0; k < 4; ++k) acc[k] = _mm512_fmadd_ps(kLoad(x + i + 16 * k), kLoad(y + i + 16 * k), acc[k]);
  }
  for (; i + 16 <= n; i += 16) acc[0] = _mm512_fmadd_ps(kLoad(x + i), kLoad(y + i), acc[0]);
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += kScalar(x[i]) * kScalar(y[i]);
  return sum;
}

// DotFloat512<float> for R rows x T tokens at once: per (row, token) the
// same 4 accumulators fed in the same order, the same reduction and scalar
// tail, so the same bits; each weight vector loaded feeds T FMAs and each
// activation vector R (one row and token at a time, two loads per FMA).
template <int R, int T>
void DotF32Block(int64_t n, const uint8_t* w, uint64_t row_bytes, const uint8_t* a,
                 uint64_t a_row_bytes, float* y, int64_t ldy) {
  const float* x[R];
  const float* v[T];
  for (int r = 0; r < R; ++r) x[r] = reinterpret_cast<const float*>(w + r * row_bytes);
  for (int t = 0; t < T; ++t) v[t] = reinterpret_cast<const float*>(a + t * a_row_bytes);
  __m512 acc[R][T][4];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 3
    for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) acc[r][t][k] = _mm512_setzero_ps();
    }
  }
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m512 wv[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_ps(x[r] + i + 16 * k);
#pragma GCC unroll 3
      for (int t = 0; t < T; ++t) {
        const __m512 av = _mm512_loadu_ps(v[t] + i + 16 * k);
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) acc[r][t][k] = _mm512_fmadd_ps(wv[r], av, acc[r][t][k]);
      }
    }
  }
  const int64_t i16 = i;
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 3
    for (int t = 0; t < T; ++t) {
      __m512* c = acc[r][t];
      for (i = i16; i + 16 <= n; i += 16) c[0] = _mm512_fmadd_ps(_mm512_loadu_ps(x[r] + i), _mm512_loadu_ps(v[t] + i), c[0]);
      float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(c[0], c[1]), _mm512_add_ps(c[2], c[3])));
      for (; i < n; ++i) sum += ScalarF32(x[r][i]) * ScalarF32(v[t][i]);
      y[t * ldy + r] = sum;
    }
  }
}

using F32BlockFn = void (*)(int64_t, const uint8_t*, uint64_t, const uint8_t*, uint64_t, float*, int64_t);

// VecDotTokensFn of DotFloat512<float>: blocks of 2 rows x 3 tokens (24
// accumulators), the tokens outermost so that a few tokens' rows stay in L1
// while the weight rows stream.
void DotF32Tokens512(int64_t n, const void* w, uint64_t row_bytes, int64_t n_rows, const void* a,
                     uint64_t a_row_bytes, int64_t n_tokens, float* y, int64_t ldy) {
  static constexpr F32BlockFn kBlocks[2][3] = {
      {DotF32Block<1, 1>, DotF32Block<1, 2>, DotF32Block<1, 3>},
      {DotF32Block<2, 1>, DotF32Block<2, 2>, DotF32Block<2, 3>}};
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 3) {
    const int64_t nt = std::min<int64_t>(3, n_tokens - t0);
    for (int64_t r0 = 0; r0 < n_rows; r0 += 2) {
      const int64_t nr = std::min<int64_t>(2, n_rows - r0);
      kBlocks[nr - 1][nt - 1](n, wb + r0 * row_bytes, row_bytes, ab + t0 * a_row_bytes, a_row_bytes,
                              y + t0 * ldy + r0, ldy);
    }
  }
}


// ---- i-quants: 64 elements per step -------------------------------------------
//
// internal/iq_avx512.inc's magnitudes, sign mask and lane scales: the sign
// bits applied to the activation bytes, one vpdpbusd, then the int32 lanes
// times their group's sub-scale. The sums are exact, so the result is the
// canonical order's (internal/unpack.h) to the bit.

#include "common/quant/internal/iq_avx512.inc"

// The int32 totals of two blocks' 16-lane sums, one shuffle tree for both.
__attribute__((always_inline)) inline void IqReducePair(__m512i a, __m512i b, int* ta, int* tb) {
  // 128-bit chunks [a0 + a2, a1 + a3, b0 + b2, b1 + b3], then within.
  __m512i t = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  t = _mm512_add_epi32(t, _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
  t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
  t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_CDAB));
  *ta = _mm_cvtsi128_si32(_mm512_castsi512_si128(t));
  *tb = _mm_cvtsi128_si32(_mm512_extracti32x4_epi32(t, 2));
}

// The blocks' integer sums (block_sum(i): 16 int32 lanes) reduced two at a
// time (IQ1_S dot 10.8 -> 11.8 Gelem/s), then finished in block order.
#define MOESPLIT_IQ_FINISH_BLOCKS(nb, x, y, block_sum)                                   \
  float acc = 0;                                                                         \
  int64_t i = 0;                                                                         \
  for (; i + 1 < (nb); i += 2) {                                                         \
    int ta, tb;                                                                          \
    IqReducePair(block_sum(i), block_sum(i + 1), &ta, &tb);                              \
    acc = FinishSuper(ta, IqD((x)[i]), (y)[i].d, acc);                                   \
    acc = FinishSuper(tb, IqD((x)[i + 1]), (y)[i + 1].d, acc);                           \
  }                                                                                      \
  if (i < (nb)) acc = FinishSuper(_mm512_reduce_add_epi32(block_sum(i)), IqD((x)[i]), (y)[i].d, acc); \
  return acc

template <typename Block>
float DotIq512(int64_t n, const void* vx, const void* vy) {
  const Block* x = static_cast<const Block*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  auto block_sum = [&](int64_t i) __attribute__((always_inline)) {
    __m512i sumi = _mm512_setzero_si512();
    const auto prep = IqStep<Block>::Prepare(x[i]);
    if constexpr (std::is_same_v<Block, BlockIq1S> || std::is_same_v<Block, BlockIq1M>) {
      // IQ1: the codes 8 g + delta plus 9 (0..18) as the unsigned operand,
      // no sign mask; the 9 sum(a) per group this adds comes off once per
      // block from the activations' 16-value sums.
      constexpr int kGroup = IqStep<Block>::kGroup;
#pragma GCC unroll 4
      for (int h = 0; h < 4; ++h) {
        const __m512i g = IqEntries8(kIq1SGrid, [&](int k) { return prep.idx[8 * h + k]; });
        __mmask8 neg_runs;
        if constexpr (kGroup == 32) {
          neg_runs = static_cast<__mmask8>((((prep.neg >> (2 * h)) & 1) ? 0x0F : 0) |
                                           (((prep.neg >> (2 * h + 1)) & 1) ? 0xF0 : 0));
        } else {
          neg_runs = static_cast<__mmask8>(prep.neg >> (8 * h));
        }
        const __m512i g8 = _mm512_and_si512(_mm512_slli_epi64(g, 3), _mm512_set1_epi8(static_cast<char>(0xF8)));
        const __m512i u = _mm512_add_epi8(g8, _mm512_mask_blend_epi64(neg_runs, _mm512_set1_epi8(10), _mm512_set1_epi8(8)));
        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, Load512(y[i].qs + 64 * h)),
                                                         IqStepScale<kGroup>(prep.sc, h)));
      }
      __m512i sc16 = prep.sc;  // the sub-scale of each 16 values
      if constexpr (kGroup == 32) {
        sc16 = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), prep.sc);
      }
      const __m512i corr = _mm512_mullo_epi32(sc16, _mm512_cvtepi16_epi32(Load256(y[i].bsums)));
      return _mm512_sub_epi32(sumi, _mm512_add_epi32(_mm512_slli_epi32(corr, 3), corr));
    }
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      const IqStepOut s = IqStep<Block>::Of(x[i], h, prep);
      const __m512i a = Load512(y[i].qs + 64 * h);
      const __m512i sa = _mm512_mask_sub_epi8(a, s.neg, _mm512_setzero_si512(), a);
      sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), s.w, sa), s.scale));
    }
    return sumi;
  };
  MOESPLIT_IQ_FINISH_BLOCKS(n / 256, x, y, block_sum);
}

#pragma GCC pop_options

// ---- i-quants with AVX-512 VBMI: the grid in registers ------------------------
//
// The grids' bytes take 3 (IQ2_*) or 8 (IQ3_*) values, so an entry is a
// 16-bit code of 2- or 3-bit level numbers and a grid of N entries N / 32
// registers of codes: 32 entries are N / 64 vpermi2w and a tree of blends on
// the index bits above 6, and each step's 64 weight bytes a vpermw, a
// vpmultishiftqb and a vpermb, instead of 8 (16) scalar loads and the
// inserts that place them. The ksigns-coded sign bytes: the 7-bit fields
// by vpmultishiftqb or a shift, their parity by vpopcntb/w (BITALG); a
// step's sign mask is its 8 runs' sign bytes broadcast to their values
// (vpermb) and tested against each value's bit. The same exact integer
// sums as IqStep's, so the same bits (quant_simd_test).

// The codes of a grid of kN entries of 8 bytes (2-bit levels) or 4 bytes
// (3-bit levels), and the 64-byte vpermb table mapping a level number (a
// byte's low 2 or 3 bits) to its value; ok is false if the grid's bytes take
// more values than the level numbers hold.
template <int kN>
struct IqCodeGrid {
  alignas(64) uint16_t code[kN];
  alignas(64) uint8_t level[64];
  bool ok;
};
template <int kN, typename Entry>
IqCodeGrid<kN> MakeCodeGrid(const Entry* grid) {
  constexpr int kBytes = sizeof(Entry), kBits = kBytes == 8 ? 2 : 3;
  IqCodeGrid<kN> g{};
  uint8_t levels[8] = {};
  int n_levels = 0;
  g.ok = true;
  for (int e = 0; e < kN; ++e) {
    for (int b = 0; b < kBytes; ++b) {
      const uint8_t v = static_cast<uint8_t>(grid[e] >> (8 * b));
      int l = 0;
      while (l < n_levels && levels[l] != v) ++l;
      if (l == (1 << kBits)) {
        g.ok = false;
        return g;
      }
      if (l == n_levels) levels[n_levels++] = v;
      g.code[e] = static_cast<uint16_t>(g.code[e] | (l << (kBits * b)));
    }
  }
  for (int i = 0; i < 64; ++i) g.level[i] = levels[i % (1 << kBits)];
  return g;
}
template <typename Block>
const auto& IqCodes() {
  if constexpr (std::is_same_v<Block, BlockIq2Xxs>) {
    static const IqCodeGrid<256> g = MakeCodeGrid<256>(kIq2XxsGrid);
    return g;
  } else if constexpr (std::is_same_v<Block, BlockIq2Xs>) {
    static const IqCodeGrid<512> g = MakeCodeGrid<512>(kIq2XsGrid);
    return g;
  } else if constexpr (std::is_same_v<Block, BlockIq3Xxs>) {
    static const IqCodeGrid<256> g = MakeCodeGrid<256>(kIq3XxsGrid);
    return g;
  } else {
    static const IqCodeGrid<512> g = MakeCodeGrid<512>(kIq3SGrid);
    return g;
  }
}

// For step h and value v, the byte of the block's sign vector holding its
// run's sign byte: run r = 8 h + v / 8 is at byte r, or for IQ2_XXS at
// byte 8 (r / 4) + r % 4. A constant: the kernels run on short rows too.
struct IqSignSelTable {
  alignas(64) uint8_t b[4][64];
};
template <bool kIq2Xxs>
const IqSignSelTable& IqSignSel() {
  static constexpr IqSignSelTable kTable = [] {
    IqSignSelTable t{};
    for (int h = 0; h < 4; ++h) {
      for (int v = 0; v < 64; ++v) {
        const int run = 8 * h + v / 8;
        t.b[h][v] = static_cast<uint8_t>(kIq2Xxs ? 8 * (run / 4) + run % 4 : run);
      }
    }
    return t;
  }();
  return kTable;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bitalg")

// The codes of 32 entries (16-bit indices below kN) from the kN / 32
// registers of t.
template <int kN>
__attribute__((always_inline)) inline __m512i LookupCodes(const __m512i* t, __m512i idx) {
  __m512i c[kN / 64];
#pragma GCC unroll 16
  for (int j = 0; j < kN / 64; ++j) c[j] = _mm512_permutex2var_epi16(t[2 * j], idx, t[2 * j + 1]);
  int n = kN / 64;
#pragma GCC unroll 4
  for (int bit = 64; n > 1; bit *= 2, n /= 2) {
    const __mmask32 m = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(static_cast<short>(bit)));
#pragma GCC unroll 8
    for (int j = 0; j < n / 2; ++j) c[j] = _mm512_mask_blend_epi16(m, c[2 * j], c[2 * j + 1]);
  }
  return c[0];
}

// Sign bytes 7-bit field | parity << 7, from 16-bit lanes (bytes) holding
// the field in their low 7 bits (and zero above).
inline __m512i KsignsWords(__m512i s7) {
  return _mm512_ternarylogic_epi32(s7, _mm512_slli_epi16(_mm512_popcnt_epi16(s7), 7), _mm512_set1_epi16(0x80),
                                   0xF8);  // A | (B & C)
}
inline __m512i KsignsBytes(__m512i s7) {
  return _mm512_ternarylogic_epi32(s7, _mm512_slli_epi16(_mm512_popcnt_epi8(s7), 7),
                                   _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
}

// Per type: the block's grid indices (idx[0], and idx[1] for the IQ3 types'
// 64 entries), its sub-scales (IqStep's lane order) and its sign bytes (run r
// at byte r; for IQ2_XXS at byte 8 (r / 4) + r % 4) or, for IQ3_S, none
// (its sign bits are stored as they are used). Not IQ2_S: its 1024-entry
// grid, 32 registers of codes, spills (dot 13.9 -> 12.3 Gelem/s).
template <typename Block>
struct VbmiBlock;

template <>
struct VbmiBlock<BlockIq2Xxs> {
  static constexpr bool kStoredSigns = false;
  __attribute__((always_inline)) static void Of(const BlockIq2Xxs& b, __m512i* idx, __m512i* sc, __m512i* signs) {
    const __m512i q = _mm512_loadu_si512(b.qs);
    // Group g's index bytes 8 g .. 8 g + 3 of qs to words 4 g + j.
    const __m512i bidx = _mm512_set_epi64(0x003B003A00390038, 0x0033003200310030, 0x002B002A00290028,
                                          0x0023002200210020, 0x001B001A00190018, 0x0013001200110010,
                                          0x000B000A00090008, 0x0003000200010000);
    idx[0] = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, bidx, q);
    *sc = IqOdd(_mm512_srli_epi32(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15), q), 28));
    // Group g's aux word is the high half of qword g: fields to bytes 8 g + l.
    const __m512i s7 = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x00000000352E2720), q),
                                        _mm512_set1_epi8(0x7F));
    *signs = KsignsBytes(s7);
  }
};
template <>
struct VbmiBlock<BlockIq3Xxs> {
  static constexpr bool kStoredSigns = false;
  __attribute__((always_inline)) static void Of(const BlockIq3Xxs& b, __m512i* idx, __m512i* sc, __m512i* signs) {
    idx[0] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)));
    idx[1] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32)));
    const __m512i aux = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 64)));
    *sc = IqOdd(_mm512_srli_epi32(aux, 28));
    // qword q: groups 2 q, 2 q + 1, run r to byte r.
    const __m512i s7 = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x352E2720150E0700), aux),
                                        _mm512_set1_epi8(0x7F));
    *signs = KsignsBytes(s7);
  }
};
template <>
struct VbmiBlock<BlockIq2Xs> {
  static constexpr bool kStoredSigns = false;
  __attribute__((always_inline)) static void Of(const BlockIq2Xs& b, __m512i* idx, __m512i* sc, __m512i* signs) {
    const __m512i q = _mm512_loadu_si512(b.qs);
    idx[0] = _mm512_and_si512(q, _mm512_set1_epi16(511));
    *sc = IqNibbleScales(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales)));
    *signs = _mm512_castsi256_si512(_mm512_cvtepi16_epi8(KsignsWords(_mm512_srli_epi16(q, 9))));
  }
};
template <>
struct VbmiBlock<BlockIq3S> {
  static constexpr bool kStoredSigns = true;
  __attribute__((always_inline)) static void Of(const BlockIq3S& b, __m512i* idx, __m512i* sc, __m512i*) {
    const uint64_t high = IqLe64(b.qh);  // bit k: entry k's ninth index bit
    const __m512i nine = _mm512_set1_epi16(256);
    const __m512i lo0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)));
    const __m512i lo1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32)));
    idx[0] = _mm512_mask_add_epi16(lo0, static_cast<__mmask32>(high), lo0, nine);
    idx[1] = _mm512_mask_add_epi16(lo1, static_cast<__mmask32>(high >> 32), lo1, nine);
    *sc = IqNibbleScales(_mm_cvtsi32_si128(static_cast<int>(IqLe32(b.scales))));
  }
  static uint64_t Signs(const BlockIq3S& b, int h) { return IqLe64(b.signs + 8 * h); }
};

template <typename Block>
float DotIqVbmi512(int64_t n, const void* vx, const void* vy) {
  constexpr bool kIq3 = std::is_same_v<Block, BlockIq3Xxs> || std::is_same_v<Block, BlockIq3S>;
  const Block* x = static_cast<const Block*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  const auto& grid = IqCodes<Block>();
  constexpr int kN = sizeof(grid.code) / 2;
  __m512i t[kN / 32];
#pragma GCC unroll 32
  for (int k = 0; k < kN / 32; ++k) t[k] = _mm512_load_si512(grid.code + 32 * k);
  const __m512i level = _mm512_load_si512(grid.level);
  // IQ2: lane j of step h takes entry 8 h + j (word 4 j), its bytes at bits
  // 2 b; IQ3: entries 16 (h % 2) + 2 j, + 1 (words 4 j, 4 j + 1) of the
  // half's codes, bytes at bits 3 b and 16 + 3 b.
  const __m512i ctrl = kIq3 ? _mm512_set1_epi64(0x1916131009060300) : _mm512_set1_epi64(0x0E0C0A0806040200);
  const __m512i lane = kIq3 ? _mm512_setr_epi64(0x10000, 0x30002, 0x50004, 0x70006, 0x90008, 0xB000A, 0xD000C, 0xF000E)
                            : _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i value_bit = _mm512_set1_epi64(0x8040201008040201);
  // Step h: the sign byte of each value's run (IqSignSel).
  const uint8_t* sel_bytes = IqSignSel<std::is_same_v<Block, BlockIq2Xxs>>().b[0];
  __m512i sel[4];
#pragma GCC unroll 4
  for (int h = 0; h < 4; ++h) sel[h] = _mm512_load_si512(sel_bytes + 64 * h);
  auto block_sum = [&](int64_t i) __attribute__((always_inline)) {
    __m512i idx[2], sc, signs;
    VbmiBlock<Block>::Of(x[i], idx, &sc, &signs);
    __m512i codes[2];
    codes[0] = LookupCodes<kN>(t, idx[0]);
    if constexpr (kIq3) codes[1] = LookupCodes<kN>(t, idx[1]);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      __m512i placed;
      if constexpr (kIq3) {
        placed = _mm512_permutexvar_epi16(_mm512_add_epi64(lane, _mm512_set1_epi64(16 * (h % 2) * 0x10001)),
                                          codes[h / 2]);
      } else {
        placed = _mm512_permutexvar_epi16(_mm512_add_epi64(lane, _mm512_set1_epi64(8 * h)), codes[0]);
      }
      const __m512i w = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(ctrl, placed), level);
      __mmask64 neg;
      if constexpr (VbmiBlock<Block>::kStoredSigns) {
        neg = VbmiBlock<Block>::Signs(x[i], h);
      } else {
        neg = _mm512_test_epi8_mask(_mm512_permutexvar_epi8(sel[h], signs), value_bit);
      }
      const __m512i a = Load512(y[i].qs + 64 * h);
      const __m512i sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
      sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, sa),
                                                       IqStepScale<IqStep<Block>::kGroup>(sc, h)));
    }
    return sumi;
  };
  // One block at a time: two in flight (IqReducePair) spill the grid
  // registers (IQ2_XXS 17.9 -> 16.5 Gelem/s).
  float acc = 0;
  for (int64_t i = 0; i < n / 256; ++i) {
    acc = FinishSuper(_mm512_reduce_add_epi32(block_sum(i)), IqD(x[i]), y[i].d, acc);
  }
  return acc;
}

#pragma GCC pop_options

// The register-grid kernel where the CPU has VBMI and BITALG (Zen 4+, Ice
// Lake+; not Cascade Lake) and the grid fits its level numbers.
template <typename Block>
bool Vbmi() {
  return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bitalg") && IqCodes<Block>().ok;
}

// A table entry: the kernel and its many-rows form.
template <VecDotFn kFn>
SimdKernel Entry(GgmlType type, KernelLevel level) {
  return {type, level, kFn, DotRows<kFn>};
}

}  // namespace

void AppendAvx512Kernels(SimdKernels* out) {
  const KernelLevel l = KernelLevel::kAvx512;
  const SimdKernel kernels[] = {
      {GgmlType::kF32, l, DotFloat512<float, LoadF32x16, ScalarF32>,
       DotRows<DotFloat512<float, LoadF32x16, ScalarF32>>, DotF32Tokens512},
      Entry<DotFloat512<uint16_t, LoadF16x16, ScalarF16>>(GgmlType::kF16, l),
      Entry<DotFloat512<uint16_t, LoadBf16x16, ScalarBf16>>(GgmlType::kBF16, l),
      Entry<DotBlock32<DecQ4_0>>(GgmlType::kQ4_0, l),
      Entry<DotBlock32<DecQ4_1>>(GgmlType::kQ4_1, l),
      Entry<DotBlock32<DecQ5_0>>(GgmlType::kQ5_0, l),
      Entry<DotBlock32<DecQ5_1>>(GgmlType::kQ5_1, l),
      Entry<DotBlock32<DecQ8_0>>(GgmlType::kQ8_0, l),
      Entry<DotBlock32<DecIq4Nl>>(GgmlType::kIQ4_NL, l),
      Entry<DotMxfp4Simd>(GgmlType::kMXFP4, l),
      Entry<DotQ2KSimd>(GgmlType::kQ2_K, l),
      Entry<DotQ3KSimd>(GgmlType::kQ3_K, l),
      Entry<DotQ45KPairs<false, K45Sums512>>(GgmlType::kQ4_K, l),
      Entry<DotQ45KPairs<true, K45Sums512>>(GgmlType::kQ5_K, l),
      Entry<DotQ6K512>(GgmlType::kQ6_K, l),
      Entry<DotIq4XsSimd>(GgmlType::kIQ4_XS, l),
      Entry<DotIq512<BlockIq1S>>(GgmlType::kIQ1_S, l),
      Entry<DotIq512<BlockIq1M>>(GgmlType::kIQ1_M, l),
      Vbmi<BlockIq2Xxs>() ? Entry<DotIqVbmi512<BlockIq2Xxs>>(GgmlType::kIQ2_XXS, l) : Entry<DotIq512<BlockIq2Xxs>>(GgmlType::kIQ2_XXS, l),
      Vbmi<BlockIq2Xs>() ? Entry<DotIqVbmi512<BlockIq2Xs>>(GgmlType::kIQ2_XS, l) : Entry<DotIq512<BlockIq2Xs>>(GgmlType::kIQ2_XS, l),
      Entry<DotIq512<BlockIq2S>>(GgmlType::kIQ2_S, l),
      Vbmi<BlockIq3Xxs>() ? Entry<DotIqVbmi512<BlockIq3Xxs>>(GgmlType::kIQ3_XXS, l) : Entry<DotIq512<BlockIq3Xxs>>(GgmlType::kIQ3_XXS, l),
      Vbmi<BlockIq3S>() ? Entry<DotIqVbmi512<BlockIq3S>>(GgmlType::kIQ3_S, l) : Entry<DotIq512<BlockIq3S>>(GgmlType::kIQ3_S, l),
      Entry<DotIqSimd<GgmlType::kTQ1_0>>(GgmlType::kTQ1_0, l),
      Entry<DotIqSimd<GgmlType::kTQ2_0>>(GgmlType::kTQ2_0, l),
  };
  out->dots.insert(out->dots.end(), std::begin(kernels), std::end(kernels));
}

VecDotFn Avx512IqDotWithoutVbmi(GgmlType type) {
  switch (type) {
    case GgmlType::kIQ1_S: return DotIq512<BlockIq1S>;
    case GgmlType::kIQ1_M: return DotIq512<BlockIq1M>;
    case GgmlType::kIQ2_XXS: return DotIq512<BlockIq2Xxs>;
    case GgmlType::kIQ2_XS: return DotIq512<BlockIq2Xs>;
    case GgmlType::kIQ2_S: return DotIq512<BlockIq2S>;
    case GgmlType::kIQ3_XXS: return DotIq512<BlockIq3Xxs>;
    case GgmlType::kIQ3_S: return DotIq512<BlockIq3S>;
    default: return nullptr;
  }
}

#else

void AppendAvx512Kernels(SimdKernels*) {}
VecDotFn Avx512IqDotWithoutVbmi(GgmlType) { return nullptr; }

#endif

}  // namespace moesplit::quant::internal
