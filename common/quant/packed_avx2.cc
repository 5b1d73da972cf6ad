// AVX2 product over the packed strip layout (packed.h) for every packed type. A strip's 64-byte code chunks are two 32-byte halves of 8 rows each
// (rows 0..7, 8..15); per half and 32-column span the codes are decoded once
// into 8 registers of 32 codes (8 rows x 4 columns), then for each token
// vpmaddubsw against the broadcast 4-byte activation quads gives int16 pair
// sums per row, which add up exactly in int16 (the bounds below) before one
// vpmaddwd widens them to the rows' group sums, lane-wise. Sub-scales
// multiply lane-wise (vpmulld), mins go through vpmaddwd, and the float steps
// of the canonical order run on 8 rows at once: no horizontal reduction and
// no per-group scale broadcast, the work the GGUF-row kernels cannot avoid.
// Compiled with `#pragma GCC target`; only called when CpuHasAvx2().

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

#include "common/quant/internal/blocks.h"
#include "common/quant/internal/packed_impl.h"

namespace moesplit::quant::internal {

#if defined(__x86_64__)
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

inline __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i Load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m128i Load64(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }
inline __m256i Bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Bytes prefetched ahead of the span being read: the weights stream from
// DRAM at decode. The prefetches are spread over the superblock's spans (an
// eighth of it before each), not issued as one burst per superblock: a burst
// of ~40 lines overruns the core's outstanding-miss slots (spread 8 KiB
// ahead measured best, see tests/bench/README.md, "packed_avx2.cc").
constexpr uint64_t kPrefetchAhead = 8192;

__attribute__((always_inline)) inline void PrefetchAhead(const uint8_t* sb, uint64_t bytes, const uint8_t* end) {
  const uint8_t* p = sb + kPrefetchAhead;
  const uint8_t* e = p + bytes < end ? p + bytes : end;
  for (; p < e; p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// The 8 code registers of span g (columns 32 g .. 32 g + 31), half h (rows
// 8 h .. 8 h + 7) of a packed superblock: quad z (columns 4 z .. 4 z + 3 of
// the span) in c[z], as packed_avx512.cc's, per half.
__attribute__((always_inline)) inline void CodesQ4K(const uint8_t* sb, int g, int h, __m256i c[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m256i q = Load256(sb + 256 * g + 64 * k + 32 * h);
    c[k] = _mm256_and_si256(q, m4);
    c[k + 4] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  }
}

// Q5_K: bit z of the span's fifth-bit word is code bit 4 of quad z.
__attribute__((always_inline)) inline void CodesQ5K(const uint8_t* sb, int g, int h, __m256i c[8]) {
  CodesQ4K(sb, g, h, c);
  const __m256i m10 = _mm256_set1_epi8(0x10);
  const __m256i x = Load256(sb + kQ5KHigh + 64 * g + 32 * h);
  c[0] = _mm256_or_si256(c[0], _mm256_and_si256(_mm256_slli_epi16(x, 4), m10));
  c[1] = _mm256_or_si256(c[1], _mm256_and_si256(_mm256_slli_epi16(x, 3), m10));
  c[2] = _mm256_or_si256(c[2], _mm256_and_si256(_mm256_slli_epi16(x, 2), m10));
  c[3] = _mm256_or_si256(c[3], _mm256_and_si256(_mm256_slli_epi16(x, 1), m10));
  c[4] = _mm256_or_si256(c[4], _mm256_and_si256(x, m10));
  c[5] = _mm256_or_si256(c[5], _mm256_and_si256(_mm256_srli_epi16(x, 1), m10));
  c[6] = _mm256_or_si256(c[6], _mm256_and_si256(_mm256_srli_epi16(x, 2), m10));
  c[7] = _mm256_or_si256(c[7], _mm256_and_si256(_mm256_srli_epi16(x, 3), m10));
}

// Q6_K: bits 2 j, 2 j + 1 of word w are code bits 4, 5 of quad 4 w + j.
__attribute__((always_inline)) inline void CodesQ6K(const uint8_t* sb, int g, int h, __m256i c[8]) {
  CodesQ4K(sb, g, h, c);
  const __m256i m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
  for (int w = 0; w < 2; ++w) {
    const __m256i x = Load256(sb + kQ6KHigh + 128 * g + 64 * w + 32 * h);
    c[4 * w + 0] = _mm256_or_si256(c[4 * w + 0], _mm256_and_si256(_mm256_slli_epi16(x, 4), m30));
    c[4 * w + 1] = _mm256_or_si256(c[4 * w + 1], _mm256_and_si256(_mm256_slli_epi16(x, 2), m30));
    c[4 * w + 2] = _mm256_or_si256(c[4 * w + 2], _mm256_and_si256(x, m30));
    c[4 * w + 3] = _mm256_or_si256(c[4 * w + 3], _mm256_and_si256(_mm256_srli_epi16(x, 2), m30));
  }
}

// Σ over quads z0 .. z0 + kN - 1 of codes times the activation quads at
// q + 4 z, per row (int32 lanes). Each vpmaddubsw gives a row two products
// of at most cmax * 128 each (|Q8_K code| <= 128); kN of them add up in int16
// without overflow when 2 kN cmax 128 <= 32767: Q4_K (cmax 15) kN 8, Q5_K
// (31) 4, Q6_K (63) 2.
template <int kN>
__attribute__((always_inline)) inline __m256i DotQuads(const __m256i c[8], int z0, const int8_t* q) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s = _mm256_maddubs_epi16(c[z0], Bcast(q + 4 * z0));
#pragma GCC unroll 8
  for (int z = z0 + 1; z < z0 + kN; ++z) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(c[z], Bcast(q + 4 * z)));
  return _mm256_madd_epi16(s, ones);
}

// T tokens x the 16 rows of one strip over nsb superblocks; Q4_K or (kFive)
// Q5_K. y[t * ldy + r] for r < 16.
template <int T, bool kFive>
void StripQ45K(const uint8_t* strip, int64_t nsb, const BlockQ8_K* const* a, const uint8_t* end, float* y,
               int64_t ldy) {
  constexpr uint64_t kSB = kFive ? kQ5KSuperBytes : kQ4KSuperBytes;
  __m256 acc[T][2];
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* sb = strip + i * kSB;
    // Per token, the group sums of q: [g0 .. g3 | g4 .. g7] as int16 pairs
    // (2 p, 2 p + 1), for both halves.
    alignas(16) int32_t qp[T][4];
    for (int t = 0; t < T; ++t) {
      _mm_store_si128(reinterpret_cast<__m128i*>(qp[t]),
                      _mm_hadd_epi16(Load128(a[t][i].bsums), Load128(a[t][i].bsums + 8)));
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i isum[T];
      for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        if (h == 0) PrefetchAhead(sb + g * (kSB / 8), kSB / 8 + 64, end);
        __m256i c[8];
        if constexpr (kFive) {
          CodesQ5K(sb, g, h, c);
        } else {
          CodesQ4K(sb, g, h, c);
        }
        const __m256i sub = _mm256_cvtepu8_epi32(Load64(sb + kQ4KSub + 16 * g + 8 * h));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* q = a[t][i].qs + 32 * g;
          __m256i dot;
          if constexpr (kFive) {
            dot = _mm256_add_epi32(DotQuads<4>(c, 0, q), DotQuads<4>(c, 4, q));
          } else {
            dot = DotQuads<8>(c, 0, q);
          }
          isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dot, sub));
        }
      }
      const __m256 d = _mm256_cvtph_ps(Load128(sb + kQ4KD + 16 * h));
      const __m256 dm = _mm256_cvtph_ps(Load128(sb + kQ4KDmin + 16 * h));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const BlockQ8_K& blk = a[t][i];
        __m256i imin = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          imin = _mm256_add_epi32(imin, _mm256_madd_epi16(_mm256_cvtepu8_epi16(Load128(sb + kQ4KMins + 32 * p + 16 * h)),
                                                          _mm256_set1_epi32(qp[t][p])));
        }
        const __m256 da = _mm256_set1_ps(blk.d);
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, da), acc[t][h]);
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_xor_ps(_mm256_mul_ps(dm, da), sign), acc[t][h]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm256_storeu_ps(y + t * ldy, acc[t][0]);
    _mm256_storeu_ps(y + t * ldy + 8, acc[t][1]);
  }
}

template <int T>
void StripQ6K(const uint8_t* strip, int64_t nsb, const BlockQ8_K* const* a, const uint8_t* end, float* y,
              int64_t ldy) {
  __m256 acc[T][2];
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* sb = strip + i * kQ6KSuperBytes;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i isum[T];
      for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        if (h == 0) PrefetchAhead(sb + g * (kQ6KSuperBytes / 8), kQ6KSuperBytes / 8 + 64, end);
        __m256i c[8];
        CodesQ6K(sb, g, h, c);
        const __m256i sc0 = _mm256_cvtepi8_epi32(Load64(sb + kQ6KScales + 16 * (2 * g) + 8 * h));
        const __m256i sc1 = _mm256_cvtepi8_epi32(Load64(sb + kQ6KScales + 16 * (2 * g + 1) + 8 * h));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const BlockQ8_K& blk = a[t][i];
          const int8_t* q = blk.qs + 32 * g;
          // sum (c - 32) q = sum c q - 32 * bsum, per group of 16 columns.
          const __m256i d0 = _mm256_add_epi32(_mm256_add_epi32(DotQuads<2>(c, 0, q), DotQuads<2>(c, 2, q)),
                                              _mm256_set1_epi32(-32 * blk.bsums[2 * g]));
          const __m256i d1 = _mm256_add_epi32(_mm256_add_epi32(DotQuads<2>(c, 4, q), DotQuads<2>(c, 6, q)),
                                              _mm256_set1_epi32(-32 * blk.bsums[2 * g + 1]));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_mullo_epi32(d0, sc0),
                                                               _mm256_mullo_epi32(d1, sc1)));
        }
      }
      const __m256 d = _mm256_cvtph_ps(Load128(sb + kQ6KD + 16 * h));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, _mm256_set1_ps(a[t][i].d)),
                                    acc[t][h]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm256_storeu_ps(y + t * ldy, acc[t][0]);
    _mm256_storeu_ps(y + t * ldy + 8, acc[t][1]);
  }
}

// ---- MXFP4, Q5_0 and Q8_0 (32-column blocks) against Q8_0 activations ----

// 8 lanes of E8m0ToFp32Half (blocks.h): 2^(e - 128), denormal for e < 2.
__attribute__((always_inline)) inline __m256 E8m0Half8(const uint8_t* e8) {
  const __m256i e = _mm256_cvtepu8_epi32(Load64(e8));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, small, is_small));
}

// Bit k of each byte of x moved to bit 4 (as packed_avx512.cc's BitToFour).
template <int k>
__attribute__((always_inline)) inline __m256i BitToFour(__m256i x) {
  if constexpr (k < 4) {
    return _mm256_slli_epi16(x, 4 - k);
  } else if constexpr (k == 4) {
    return x;
  } else {
    return _mm256_srli_epi16(x, k - 4);
  }
}

// The 5-bit codes of chunks k and k + 4 of half h of a packed Q5_0 block
// (nibbles | fifth bit << 4, 0..31) into c[k], c[k + 4].
template <int k>
__attribute__((always_inline)) inline void CodesQ5_0(const uint8_t* sb, int h, __m256i high, __m256i c[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  const __m256i q = Load256(sb + 64 * k + 32 * h);
  c[k] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(BitToFour<k>(high), m10));
  c[k + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                             _mm256_and_si256(BitToFour<k + 4>(high), m10));
}

// T tokens x the 16 rows of one MXFP4 or (kQ5) Q5_0 strip over nb blocks:
// per block and half the codes (MXFP4: looked up as table value + 12, 0..24,
// kMxfp4Bias; Q5_0: the 5-bit code, value + 16, kQ5_0Bias), then per token
// two int16 sums of four vpmaddubsw each (<= 4 * 2 * 31 * 128 = 31744)
// widened by vpmaddwd; the integer sum starts at the block's -bias * sum(q)
// (BlockTerm), and the float steps alternate between the even and the odd
// block chains, summed at the end, as the canonical order of the 32-column
// types.
template <int T, bool kQ5>
void StripNibbles(const uint8_t* strip, int64_t nb, const BlockQ8_0* const* a, const BlockTerm* terms,
                  const uint8_t* end, float* y, int64_t ldy) {
  constexpr uint64_t kSB = kQ5 ? kQ5_0SuperBytes : kMxfp4SuperBytes;
  alignas(16) static constexpr int8_t kTable[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
  const __m256i table = _mm256_broadcastsi128_si256(Load128(kTable));
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[2][T][2];
  for (int p = 0; p < 2; ++p) {
    for (int t = 0; t < T; ++t) acc[p][t][0] = acc[p][t][1] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* sb = strip + i * kSB;
    PrefetchAhead(sb, kSB, end);
    const int p = static_cast<int>(i & 1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      // c[k]: columns 4 k .. 4 k + 3 (k < 4, low nibbles) or 16 + 4 (k - 4) .. (high).
      __m256i c[8];
      __m256 scale;
      if constexpr (kQ5) {
        const __m256i high = Load256(sb + kQ5_0High + 32 * h);
        CodesQ5_0<0>(sb, h, high, c);
        CodesQ5_0<1>(sb, h, high, c);
        CodesQ5_0<2>(sb, h, high, c);
        CodesQ5_0<3>(sb, h, high, c);
        scale = _mm256_cvtph_ps(Load128(sb + kQ5_0D + 16 * h));
      } else {
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m256i q = Load256(sb + 64 * k + 32 * h);
          c[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
          c[k + 4] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        }
        scale = E8m0Half8(sb + kMxfp4E + 8 * h);
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* q8 = a[t][i].qs;
        __m256i lo = _mm256_maddubs_epi16(c[0], Bcast(q8));
        __m256i hi = _mm256_maddubs_epi16(c[4], Bcast(q8 + 16));
#pragma GCC unroll 3
        for (int k = 1; k < 4; ++k) {
          lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(c[k], Bcast(q8 + 4 * k)));
          hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(c[k + 4], Bcast(q8 + 16 + 4 * k)));
        }
        const BlockTerm& term = terms[t * nb + i];
        const __m256i isum = _mm256_add_epi32(_mm256_set1_epi32(term.neg_corr),
                                              _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones)));
        acc[p][t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(scale, _mm256_set1_ps(term.da)),
                                       acc[p][t][h]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm256_storeu_ps(y + t * ldy, _mm256_add_ps(acc[0][t][0], acc[1][t][0]));
    _mm256_storeu_ps(y + t * ldy + 8, _mm256_add_ps(acc[0][t][1], acc[1][t][1]));
  }
}

// T tokens x the 16 rows of one Q8_0 strip over nb blocks: the biased codes
// flipped back to int8 (code ^ 0x80), then per chunk vpmaddubsw of |code|
// and the activation quad with the code's sign (each pair sum <= 2 * 128 *
// 127, so every chunk is widened by its own vpmaddwd); the float steps as
// StripNibbles'.
template <int T>
void StripQ8_0(const uint8_t* strip, int64_t nb, const BlockQ8_0* const* a, const uint8_t* end, float* y,
               int64_t ldy) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  __m256 acc[2][T][2];
  for (int p = 0; p < 2; ++p) {
    for (int t = 0; t < T; ++t) acc[p][t][0] = acc[p][t][1] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* sb = strip + i * kQ8_0SuperBytes;
    PrefetchAhead(sb, kQ8_0SuperBytes, end);
    const int p = static_cast<int>(i & 1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i c[8], m[8];  // signed codes of chunk k (columns 4 k .. 4 k + 3), |codes|
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        c[k] = _mm256_xor_si256(Load256(sb + 64 * k + 32 * h), flip);
        m[k] = _mm256_sign_epi8(c[k], c[k]);
      }
      const __m256 scale = _mm256_cvtph_ps(Load128(sb + kQ8_0D + 16 * h));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* q8 = a[t][i].qs;
        __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const __m256i pr = _mm256_maddubs_epi16(m[k], _mm256_sign_epi8(Bcast(q8 + 4 * k), c[k]));
          isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pr, ones));
        }
        const __m256 da = _mm256_set1_ps(_cvtsh_ss(a[t][i].d));
        acc[p][t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(scale, da), acc[p][t][h]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm256_storeu_ps(y + t * ldy, _mm256_add_ps(acc[0][t][0], acc[1][t][0]));
    _mm256_storeu_ps(y + t * ldy + 8, _mm256_add_ps(acc[0][t][1], acc[1][t][1]));
  }
}

#pragma GCC pop_options

using Strip8Fn = void (*)(const uint8_t*, int64_t, const BlockQ8_0* const*, const uint8_t*, float*, int64_t);
using Strip32Fn = void (*)(const uint8_t*, int64_t, const BlockQ8_0* const*, const BlockTerm*, const uint8_t*,
                           float*, int64_t);

using StripFn = void (*)(const uint8_t*, int64_t, const BlockQ8_K* const*, const uint8_t*, float*, int64_t);

constexpr int kMaxTokens = 4;

}  // namespace

bool PackedGemmAvx2(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                    int64_t n_tokens, float* y, int64_t ldy) {
  if (!PackedLayoutExists(w.type)) return false;
  const int64_t nb = w.n_cols / PackedColumns(w.type);  // packed superblocks per strip
  const uint64_t strip_bytes = static_cast<uint64_t>(nb) * PackedSuperBytes(w.type);
  const int64_t s_begin = row0 / 16, s_end = (row0 + n_rows) / 16;
  const uint8_t* end = w.data + s_end * strip_bytes;
  // fn(strip, first token, tokens, output) per strip and run of at most
  // kMaxTokens tokens.
  auto for_strips = [&](auto fn) {
    for (int64_t s = s_begin; s < s_end; ++s) {
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxTokens) {
        const int nt = static_cast<int>(n_tokens - t0 < kMaxTokens ? n_tokens - t0 : kMaxTokens);
        fn(w.data + s * strip_bytes, t0, nt, y + t0 * ldy + (s - s_begin) * 16);
      }
    }
  };
  if (PackedColumns(w.type) == 32) {
    static const Strip8Fn kQ8[kMaxTokens + 1] = {nullptr, StripQ8_0<1>, StripQ8_0<2>, StripQ8_0<3>,
                                                 StripQ8_0<4>};
    static const Strip32Fn kMx[kMaxTokens + 1] = {nullptr, StripNibbles<1, false>, StripNibbles<2, false>,
                                                  StripNibbles<3, false>, StripNibbles<4, false>};
    static const Strip32Fn kQ5[kMaxTokens + 1] = {nullptr, StripNibbles<1, true>, StripNibbles<2, true>,
                                                  StripNibbles<3, true>, StripNibbles<4, true>};
    const auto* const* a = reinterpret_cast<const BlockQ8_0* const*>(act);
    if (w.type == GgmlType::kQ8_0) {
      for_strips([&](const uint8_t* strip, int64_t t0, int nt, float* ys) { kQ8[nt](strip, nb, a + t0, end, ys, ldy); });
    } else {
      const BlockTerm* terms = BlockTerms(a, n_tokens, nb, PackedCodeBias(w.type));
      const Strip32Fn* fns = w.type == GgmlType::kQ5_0 ? kQ5 : kMx;
      for_strips([&](const uint8_t* strip, int64_t t0, int nt, float* ys) {
        fns[nt](strip, nb, a + t0, terms + t0 * nb, end, ys, ldy);
      });
    }
    return true;
  }
  static const StripFn kQ4[kMaxTokens + 1] = {nullptr, StripQ45K<1, false>, StripQ45K<2, false>,
                                              StripQ45K<3, false>, StripQ45K<4, false>};
  static const StripFn kQ5[kMaxTokens + 1] = {nullptr, StripQ45K<1, true>, StripQ45K<2, true>, StripQ45K<3, true>,
                                              StripQ45K<4, true>};
  static const StripFn kQ6[kMaxTokens + 1] = {nullptr, StripQ6K<1>, StripQ6K<2>, StripQ6K<3>, StripQ6K<4>};
  const StripFn* fns = w.type == GgmlType::kQ4_K ? kQ4 : w.type == GgmlType::kQ5_K ? kQ5 : kQ6;
  const auto* const* a = reinterpret_cast<const BlockQ8_K* const*>(act);
  for_strips([&](const uint8_t* strip, int64_t t0, int nt, float* ys) { fns[nt](strip, nb, a + t0, end, ys, ldy); });
  return true;
}

#else

bool PackedGemmAvx2(const PackedView&, int64_t, int64_t, const uint8_t* const*, int64_t, float*, int64_t) {
  return false;
}

#endif

}  // namespace moesplit::quant::internal
