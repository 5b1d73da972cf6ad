// AVX-512 (F/BW/VL/DQ + VNNI) dot kernels for every weight format: the
// 32-element formats run the bodies of internal/x86_dot.inc with VNNI
// vpdpbusd as the byte dot; the K-quants and the float formats have 512-bit
// kernels here. Same canonical order as every other SIMD kernel
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
// Grid entries gathered straight into the 64 weight bytes (8 x 8-byte
// entries, or 16 x 4-byte ones for IQ3), the sign bits applied to the
// activation bytes as a 64-bit mask, one vpdpbusd, then the int32 lanes
// (lane k: elements 4k .. 4k + 3) times their group's sub-scale. The sums are
// exact, so the result is the canonical order's (internal/unpack.h: codes,
// odd sub-scales, d with ggml's power-of-two factor) to the bit.

inline uint32_t Le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t Le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Sign bytes of four 8-value groups from their 7-bit ksigns indices in aux
// (bits 0..27), groups at bytes 0..3 of the result.
inline uint32_t SignsFromAux(uint32_t aux) {
  return kSignsIq2Xs[aux & 127] | (kSignsIq2Xs[(aux >> 7) & 127] << 8) |
         (kSignsIq2Xs[(aux >> 14) & 127] << 16) | (static_cast<uint32_t>(kSignsIq2Xs[(aux >> 21) & 127]) << 24);
}

// int32 lanes 0..7 = a, 8..15 = b (two 32-element groups).
inline __m512i Scales32(int a, int b) {
  return Join(_mm256_set1_epi32(a), _mm256_set1_epi32(b));
}
// int32 lanes 4 g .. 4 g + 3 = s[g] (four 16-element groups).
inline __m512i Scales16(int s0, int s1, int s2, int s3) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi32(s1), _mm_set1_epi32(s0))),
      _mm256_set_m128i(_mm_set1_epi32(s3), _mm_set1_epi32(s2)), 1);
}

// Activation bytes with the weight's signs: -q where bit k of neg is set.
inline __m512i SignedAct(const int8_t* q, uint64_t neg) {
  const __m512i a = Load512(q);
  return _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
}

inline __m512i Gather8x8(const uint64_t* grid, __m256i idx) {
  return _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(grid), 8);
}
inline __m256i Idx8(uint64_t packed_bytes) { return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(packed_bytes))); }

template <typename Block, __m512i (*kStep)(const Block&, const int8_t*, int)>
float DotIq512(int64_t n, const void* vx, const void* vy) {
  const Block* x = static_cast<const Block*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  float acc = 0;
  for (int64_t i = 0; i < n / 256; ++i) {
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) sumi = _mm512_add_epi32(sumi, kStep(x[i], y[i].qs + 64 * h, h));
    float d;
    if constexpr (std::is_same_v<Block, BlockIq1M>) {
      uint16_t sc[4];
      std::memcpy(sc, x[i].scales, 8);
      d = _cvtsh_ss(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                          (sc[3] & 0xf000))) * 0.125f;
    } else if constexpr (std::is_same_v<Block, BlockIq3S>) {
      d = _cvtsh_ss(x[i].d);
    } else if constexpr (std::is_same_v<Block, BlockIq3Xxs>) {
      d = _cvtsh_ss(x[i].d) * 0.25f;
    } else {
      d = _cvtsh_ss(x[i].d) * 0.125f;
    }
    acc = FinishSuper(_mm512_reduce_add_epi32(sumi), d, y[i].d, acc);
  }
  return acc;
}

// 64 elements (step h of 4) of one IQ2_XXS block.
__attribute__((always_inline)) inline __m512i StepIq2Xxs(const BlockIq2Xxs& b, const int8_t* q, int h) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(b.qs) + 16 * h;  // groups 2h, 2h + 1
  const uint32_t aux0 = Le32(p + 4), aux1 = Le32(p + 12);
  const __m512i w = Gather8x8(kIq2XxsGrid, Idx8(Le32(p) | static_cast<uint64_t>(Le32(p + 8)) << 32));
  const uint64_t neg = SignsFromAux(aux0) | static_cast<uint64_t>(SignsFromAux(aux1)) << 32;
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, SignedAct(q, neg));
  return _mm512_mullo_epi32(dot, Scales32(2 * (aux0 >> 28) + 1, 2 * (aux1 >> 28) + 1));
}

// 64 elements (step h of 4) of one IQ2_XS block.
__attribute__((always_inline)) inline __m512i StepIq2Xs(const BlockIq2Xs& b, const int8_t* q, int h) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 8 * h));
  const __m256i idx = _mm256_and_si256(_mm256_cvtepu16_epi32(raw), _mm256_set1_epi32(511));
  const __m512i w = Gather8x8(kIq2XsGrid, idx);
  uint64_t neg = 0;
  for (int k = 0; k < 8; ++k) neg |= static_cast<uint64_t>(kSignsIq2Xs[b.qs[8 * h + k] >> 9]) << (8 * k);
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, SignedAct(q, neg));
  const uint8_t s0 = b.scales[2 * h], s1 = b.scales[2 * h + 1];
  return _mm512_mullo_epi32(dot, Scales16(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1));
}

// 64 elements (step h of 4) of one IQ2_S block.
__attribute__((always_inline)) inline __m512i StepIq2S(const BlockIq2S& b, const int8_t* q, int h) {
  const uint32_t hi = b.qh[2 * h] | (static_cast<uint32_t>(b.qh[2 * h + 1]) << 8);  // 2 bits per entry
  const __m256i lo = Idx8(Le64(b.qs + 8 * h));
  const __m256i shifts = _mm256_setr_epi32(8, 6, 4, 2, 0, -2, -4, -6);
  // Entry k's high bits are bits 2k, 2k + 1 of hi: (hi << 8 >> 2k) & 0x300.
  const __m256i hv = _mm256_set1_epi32(static_cast<int>(hi));
  const __m256i left = _mm256_sllv_epi32(hv, _mm256_max_epi32(shifts, _mm256_setzero_si256()));
  const __m256i right = _mm256_srlv_epi32(left, _mm256_max_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), shifts),
                                                                   _mm256_setzero_si256()));
  const __m256i idx = _mm256_or_si256(lo, _mm256_and_si256(right, _mm256_set1_epi32(0x300)));
  const __m512i w = Gather8x8(kIq2SGrid, idx);
  const uint64_t neg = Le64(b.qs + 32 + 8 * h);
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, SignedAct(q, neg));
  const uint8_t s0 = b.scales[2 * h], s1 = b.scales[2 * h + 1];
  return _mm512_mullo_epi32(dot, Scales16(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1));
}

// 64 elements (step h of 4) of one IQ3_XXS block.
__attribute__((always_inline)) inline __m512i StepIq3Xxs(const BlockIq3Xxs& b, const int8_t* q, int h) {
  const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * h)));
  const __m512i w = _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(kIq3XxsGrid), 4);
  const uint32_t aux0 = Le32(b.qs + 64 + 8 * h), aux1 = Le32(b.qs + 68 + 8 * h);
  const uint64_t neg = SignsFromAux(aux0) | static_cast<uint64_t>(SignsFromAux(aux1)) << 32;
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, SignedAct(q, neg));
  return _mm512_mullo_epi32(dot, Scales32(2 * (aux0 >> 28) + 1, 2 * (aux1 >> 28) + 1));
}

// 64 elements (step h of 4) of one IQ3_S block.
__attribute__((always_inline)) inline __m512i StepIq3S(const BlockIq3S& b, const int8_t* q, int h) {
  const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * h)));
  const __mmask16 high = static_cast<__mmask16>(b.qh[2 * h] | (b.qh[2 * h + 1] << 8));  // bit k: entry k
  const __m512i idx = _mm512_mask_or_epi32(lo, high, lo, _mm512_set1_epi32(256));
  const __m512i w = _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(kIq3SGrid), 4);
  const uint64_t neg = Le64(b.signs + 8 * h);
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, SignedAct(q, neg));
  return _mm512_mullo_epi32(dot, Scales32(2 * (b.scales[h] & 15) + 1, 2 * (b.scales[h] >> 4) + 1));
}

// IQ1: codes 8 g + delta (g in {-1, 0, 1} from the grid, delta = +-1 per
// 8-value run: bit k of neg_runs for the run in 64-bit lane k), as |code|
// against the activation with the code's sign.
inline __m512i Iq1Dot(__m512i g, __mmask8 neg_runs, const int8_t* q) {
  const __m512i g8 = _mm512_and_si512(_mm512_slli_epi64(g, 3), _mm512_set1_epi8(static_cast<char>(0xF8)));
  const __m512i delta = _mm512_mask_blend_epi64(neg_runs, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
  const __m512i code = _mm512_add_epi8(g8, delta);
  const __m512i a = Load512(q);
  const __m512i sa = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(code), _mm512_setzero_si512(), a);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(code), sa);
}

// 64 elements (step h of 4) of one IQ1_S block: runs 0..3 of group 2h, 4..7
// of group 2h + 1; run l's index is qs | 3 high bits from bits 3l of qh.
__attribute__((always_inline)) inline __m512i StepIq1S(const BlockIq1S& b, const int8_t* q, int h) {
  const uint16_t qh0 = b.qh[2 * h], qh1 = b.qh[2 * h + 1];
  const __m256i qh = _mm256_setr_epi32(qh0, qh0, qh0, qh0, qh1, qh1, qh1, qh1);
  const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9)),
                                        _mm256_set1_epi32(7));
  const __m256i idx = _mm256_or_si256(Idx8(Le64(b.qs + 8 * h)), _mm256_slli_epi32(high, 8));
  const __m512i g = Gather8x8(kIq1SGrid, idx);
  const __mmask8 neg = static_cast<__mmask8>(((qh0 >> 15) ? 0x0F : 0) | ((qh1 >> 15) ? 0xF0 : 0));
  return _mm512_mullo_epi32(Iq1Dot(g, neg, q), Scales32(2 * ((qh0 >> 12) & 7) + 1, 2 * ((qh1 >> 12) & 7) + 1));
}

// 64 elements (step h of 4) of one IQ1_M block: run k's nibble (3 high index
// bits, delta sign) is nibble k of the 32-bit word at qh + 4h.
__attribute__((always_inline)) inline __m512i StepIq1M(const BlockIq1M& b, const int8_t* q, int h) {
  const __m256i nib = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(Le32(b.qh + 4 * h))),
                        _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
      _mm256_set1_epi32(0xF));
  const __m256i high = _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(7)), 8);
  const __m512i g = Gather8x8(kIq1SGrid, _mm256_or_si256(Idx8(Le64(b.qs + 8 * h)), high));
  const __mmask8 neg = _mm256_test_epi32_mask(nib, _mm256_set1_epi32(8));
  uint16_t sc;
  std::memcpy(&sc, b.scales + 2 * h, 2);  // groups 2h (bits 0..5), 2h + 1 (bits 6..11)
  return _mm512_mullo_epi32(Iq1Dot(g, neg, q), Scales16(2 * (sc & 7) + 1, 2 * ((sc >> 3) & 7) + 1,
                                                         2 * ((sc >> 6) & 7) + 1, 2 * ((sc >> 9) & 7) + 1));
}

#pragma GCC pop_options

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
      Entry<DotIq512<BlockIq1S, StepIq1S>>(GgmlType::kIQ1_S, l),
      Entry<DotIq512<BlockIq1M, StepIq1M>>(GgmlType::kIQ1_M, l),
      Entry<DotIq512<BlockIq2Xxs, StepIq2Xxs>>(GgmlType::kIQ2_XXS, l),
      Entry<DotIq512<BlockIq2Xs, StepIq2Xs>>(GgmlType::kIQ2_XS, l),
      Entry<DotIq512<BlockIq2S, StepIq2S>>(GgmlType::kIQ2_S, l),
      Entry<DotIq512<BlockIq3Xxs, StepIq3Xxs>>(GgmlType::kIQ3_XXS, l),
      Entry<DotIq512<BlockIq3S, StepIq3S>>(GgmlType::kIQ3_S, l),
      Entry<DotIqSimd<GgmlType::kTQ1_0>>(GgmlType::kTQ1_0, l),
      Entry<DotIqSimd<GgmlType::kTQ2_0>>(GgmlType::kTQ2_0, l),
  };
  out->dots.insert(out->dots.end(), std::begin(kernels), std::end(kernels));
}

#else

void AppendAvx512Kernels(SimdKernels*) {}

#endif

}  // namespace moesplit::quant::internal
