// AVX-512 VNNI product over the packed strip layout (packed.h): per 16-row
// strip and 256-column superblock, the codes of each 32-column span are
// decoded once into 8 registers of 64 codes (16 rows x 4 columns), then for
// each token vpdpbusd against the broadcast 4-byte activation quads gives
// the 16 rows' group sums lane-wise; sub-scales multiply lane-wise
// (vpmulld), mins go through vpmaddwd, and the float steps of the canonical
// order run on 16 rows at once. Compiled with `#pragma GCC target`; only
// called when CpuHasAvx512Vnni().

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/internal/packed_impl.h"

namespace moesplit::quant::internal {

#if defined(__x86_64__)
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

inline __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m128i Load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i Bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Bytes prefetched ahead of the superblock being read in each strip, in the
// order the kernels read them: the weights stream from DRAM at decode. The
// K-quant kernels (one strip, 2-3 KiB superblocks) prefetch 8 KiB ahead; the
// 32-column kernels (two strips side by side, 272-544 byte blocks) 4 KiB in
// each strip: measured best (2, 3, 6, 8 and 16 KiB were slower for the
// 32-column kernels; the K-quants gained nothing from 4), see
// tests/bench/README.md, "packed_avx512.cc: prefetch distance". They
// prefetch into L2 only where PackedPrefetchLevel() says so.
constexpr uint64_t kPrefetchAhead = 8192;
constexpr uint64_t kPrefetchAhead32 = 4096;

// Prefetches `bytes` from `ahead` past offset `pos` of strip k of a
// pass over S consecutive strips (strip0 the first), within [.., end). A
// pass over S > 1 strips (the 32-column kernels' two) reads them side by
// side, so past its strip's end the distance goes on in strip k of the next
// pass (S strips on), not in strip k + 1, which this pass is reading already:
// prefetching straight ahead left the second strip of every pass to the
// hardware, and this order measured faster, see tests/bench/README.md.
template <int S, uint64_t ahead = kPrefetchAhead>
__attribute__((always_inline)) inline void PrefetchAhead(const uint8_t* strip0, uint64_t strip_bytes, int k,
                                                         uint64_t pos, uint64_t bytes, const uint8_t* end,
                                                         bool to_l2 = false) {
  uint64_t off = pos + ahead;
  if constexpr (S > 1) {  // one strip: straight ahead, no division on the hot path
    if (off >= strip_bytes) off = off / strip_bytes * S * strip_bytes + off % strip_bytes;
  }
  const uint8_t* p = strip0 + k * strip_bytes + off;
  const uint8_t* e = p + bytes < end ? p + bytes : end;
  if (to_l2) {
    for (; p < e; p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  } else {
    for (; p < e; p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  }
}

// The 8 code registers of span g (columns 32 g .. 32 g + 31) of a Q4_K
// packed superblock: quad z (columns 4 z .. 4 z + 3 of the span) in c[z].
__attribute__((always_inline)) inline void CodesQ4K(const uint8_t* sb, int g, __m512i c[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i q = Load512(sb + 256 * g + 64 * k);
    c[k] = _mm512_and_si512(q, m4);
    c[k + 4] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
  }
}

// Q5_K: Q4_K's codes plus the fifth bit, bit z of the span's 64-byte word.
__attribute__((always_inline)) inline void CodesQ5K(const uint8_t* sb, int g, __m512i c[8]) {
  CodesQ4K(sb, g, c);
  const __m512i m10 = _mm512_set1_epi8(0x10);
  const __m512i h = Load512(sb + kQ5KHigh + 64 * g);
  c[0] = _mm512_or_si512(c[0], _mm512_and_si512(_mm512_slli_epi16(h, 4), m10));
  c[1] = _mm512_or_si512(c[1], _mm512_and_si512(_mm512_slli_epi16(h, 3), m10));
  c[2] = _mm512_or_si512(c[2], _mm512_and_si512(_mm512_slli_epi16(h, 2), m10));
  c[3] = _mm512_or_si512(c[3], _mm512_and_si512(_mm512_slli_epi16(h, 1), m10));
  c[4] = _mm512_or_si512(c[4], _mm512_and_si512(h, m10));
  c[5] = _mm512_or_si512(c[5], _mm512_and_si512(_mm512_srli_epi16(h, 1), m10));
  c[6] = _mm512_or_si512(c[6], _mm512_and_si512(_mm512_srli_epi16(h, 2), m10));
  c[7] = _mm512_or_si512(c[7], _mm512_and_si512(_mm512_srli_epi16(h, 3), m10));
}

__attribute__((always_inline)) inline void CodesQ6K(const uint8_t* sb, int g, __m512i c[8]) {
  CodesQ4K(sb, g, c);
  const __m512i m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
  for (int w = 0; w < 2; ++w) {
    const __m512i h = Load512(sb + kQ6KHigh + 128 * g + 64 * w);
    c[4 * w + 0] = _mm512_or_si512(c[4 * w + 0], _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
    c[4 * w + 1] = _mm512_or_si512(c[4 * w + 1], _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
    c[4 * w + 2] = _mm512_or_si512(c[4 * w + 2], _mm512_and_si512(h, m30));
    c[4 * w + 3] = _mm512_or_si512(c[4 * w + 3], _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
  }
}

// Sums of codes c[z0 .. z0 + 3] times the activation quads at q + 4 z.
__attribute__((always_inline)) inline __m512i Dot4(const __m512i c[8], int z0, const int8_t* q) {
  __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[z0], Bcast(q + 4 * z0));
  d = _mm512_dpbusd_epi32(d, c[z0 + 1], Bcast(q + 4 * z0 + 4));
  d = _mm512_dpbusd_epi32(d, c[z0 + 2], Bcast(q + 4 * z0 + 8));
  return _mm512_dpbusd_epi32(d, c[z0 + 3], Bcast(q + 4 * z0 + 12));
}

// T tokens x one strip (16 rows) over nsb superblocks; Q4_K or (kFive)
// Q5_K. One strip at a time also at decode: reading two strips side by side
// (as the 32-column kernels do) measured slower from DRAM, see
// tests/bench/README.md.
template <int T, bool kFive = false>
void StripsQ4K(const uint8_t* strip, uint64_t strip_bytes, int64_t nsb, const BlockQ8_K* const* a,
               const uint8_t* end, float* y, int64_t ldy) {
  constexpr uint64_t kSB = kFive ? kQ5KSuperBytes : kQ4KSuperBytes;
  const bool to_l2 = PackedPrefetchLevel() == PrefetchLevel::kL2;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(INT32_MIN));
  for (int64_t i = 0; i < nsb; ++i) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    PrefetchAhead<1>(strip, strip_bytes, 0, i * kSB, kSB, end, to_l2);
    const uint8_t* sb = strip + i * kSB;
    for (int g = 0; g < 8; ++g) {
      __m512i c[8];
      if constexpr (kFive) {
        CodesQ5K(sb, g, c);
      } else {
        CodesQ4K(sb, g, c);
      }
      const __m512i sub = _mm512_cvtepu8_epi32(Load128(sb + kQ4KSub + 16 * g));
      // Four tokens or more: each token's 8 quads in one chain, the chains of
      // the tokens interleaved quad by quad (the same exact integer sums):
      // measured a little faster than two chains of 4 per token one after
      // the other, see tests/bench/README.md.
      if constexpr (T >= 4) {
        __m512i dot[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) dot[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int z = 0; z < 8; ++z) {
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) dot[t] = _mm512_dpbusd_epi32(dot[t], c[z], Bcast(a[t][i].qs + 32 * g + 4 * z));
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sub));
      } else {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const int8_t* q = a[t][i].qs + 32 * g;
          const __m512i dot = _mm512_add_epi32(Dot4(c, 0, q), Dot4(c, 4, q));
          isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot, sub));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(Load256(sb + kQ4KD));
    const __m512 dm = _mm512_cvtph_ps(Load256(sb + kQ4KDmin));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& blk = a[t][i];
      alignas(16) int32_t qp[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(qp), _mm_hadd_epi16(Load128(blk.bsums), Load128(blk.bsums + 8)));
      const __m512 da = _mm512_set1_ps(blk.d);
      __m512i imin = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        imin = _mm512_add_epi32(imin, _mm512_madd_epi16(_mm512_cvtepu8_epi16(Load256(sb + kQ4KMins + 32 * p)),
                                                        _mm512_set1_epi32(qp[p])));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, da), acc[t]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_xor_ps(_mm512_mul_ps(dm, da), sign), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

// Q6_K, T tokens x one strip, as StripsQ4K.
template <int T>
void StripsQ6K(const uint8_t* strip, uint64_t strip_bytes, int64_t nsb, const BlockQ8_K* const* a,
               const uint8_t* end, float* y, int64_t ldy) {
  const bool to_l2 = PackedPrefetchLevel() == PrefetchLevel::kL2;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    PrefetchAhead<1>(strip, strip_bytes, 0, i * kQ6KSuperBytes, kQ6KSuperBytes, end, to_l2);
    const uint8_t* sb = strip + i * kQ6KSuperBytes;
    for (int g = 0; g < 8; ++g) {
      __m512i c[8];
      CodesQ6K(sb, g, c);
      const __m512i sc0 = _mm512_cvtepi8_epi32(Load128(sb + kQ6KScales + 16 * (2 * g)));
      const __m512i sc1 = _mm512_cvtepi8_epi32(Load128(sb + kQ6KScales + 16 * (2 * g + 1)));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const BlockQ8_K& blk = a[t][i];
        const int8_t* q = blk.qs + 32 * g;
        // sum (c - 32) q = sum c q - 32 * bsum, per group of 16 columns.
        const __m512i d0 = _mm512_add_epi32(Dot4(c, 0, q), _mm512_set1_epi32(-32 * blk.bsums[2 * g]));
        const __m512i d1 = _mm512_add_epi32(Dot4(c, 4, q), _mm512_set1_epi32(-32 * blk.bsums[2 * g + 1]));
        isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(d0, sc0), _mm512_mullo_epi32(d1, sc1)));
      }
    }
    const __m512 d = _mm512_cvtph_ps(Load256(sb + kQ6KD));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, _mm512_set1_ps(a[t][i].d)), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

// ---- 32-column blocks (Q8_0, MXFP4, Q5_0) against Q8_0 activations ------

enum class Kind32 { kQ8_0, kMxfp4, kQ5_0 };

template <Kind32 K>
constexpr uint64_t SuperBytes32() {
  return K == Kind32::kQ8_0 ? kQ8_0SuperBytes : K == Kind32::kMxfp4 ? kMxfp4SuperBytes : kQ5_0SuperBytes;
}

// 16 lanes of E8m0ToFp32Half (blocks.h): 2^(e - 128), denormal for e < 2.
__attribute__((always_inline)) inline __m512 E8m0Half16(const uint8_t* e8) {
  const __m512i e = _mm512_cvtepu8_epi32(Load128(e8));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 is_small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_small, normal, small));
}

// The 16 rows' scales of a packed 32-column block.
template <Kind32 K>
__attribute__((always_inline)) inline __m512 Scales32(const uint8_t* sb) {
  if constexpr (K == Kind32::kMxfp4) {
    return E8m0Half16(sb + kMxfp4E);
  } else {
    return _mm512_cvtph_ps(Load256(sb + (K == Kind32::kQ8_0 ? kQ8_0D : kQ5_0D)));
  }
}

// Bit k of each byte of h moved to bit 4 (the other bits of the byte are
// cleared by the caller's mask; a 16-bit shift moves no bit into bit 4 of
// the neighbouring byte).
template <int k>
__attribute__((always_inline)) inline __m512i BitToFour(__m512i h) {
  if constexpr (k < 4) {
    return _mm512_slli_epi16(h, 4 - k);
  } else if constexpr (k == 4) {
    return h;
  } else {
    return _mm512_srli_epi16(h, k - 4);
  }
}

// The biased codes of chunk k < 8 (columns ChunkCol(k) .. + 3 of the block)
// of a packed 32-column block.
template <Kind32 K, int k>
__attribute__((always_inline)) inline __m512i Codes32(const uint8_t* sb, __m512i table) {
  if constexpr (K == Kind32::kQ8_0) {
    return Load512(sb + 64 * k);
  } else {
    const __m512i q = Load512(sb + 64 * (k % 4));
    const __m512i nibble = _mm512_and_si512(k < 4 ? q : _mm512_srli_epi16(q, 4), _mm512_set1_epi8(0x0F));
    if constexpr (K == Kind32::kMxfp4) {
      return _mm512_shuffle_epi8(table, nibble);
    } else {
      const __m512i fifth = _mm512_and_si512(BitToFour<k>(Load512(sb + kQ5_0High)), _mm512_set1_epi8(0x10));
      return _mm512_or_si512(nibble, fifth);
    }
  }
}

// First column of chunk k: Q8_0's chunks are in column order; MXFP4's and
// Q5_0's low nibbles are columns 0..15, their high nibbles 16..31.
template <Kind32 K>
constexpr int ChunkCol(int k) {
  return K != Kind32::kQ8_0 ? (k < 4 ? 4 * k : 16 + 4 * (k - 4)) : 4 * k;
}

// isum[t][s] += chunk k's codes of the S strips times token t's quad, for
// every k < 8 (templates: the chunk index is a shift count).
template <Kind32 K, int T, int S, int k = 0>
__attribute__((always_inline)) inline void Chunks32(const uint8_t* sb0, uint64_t strip_bytes, const BlockQ8_0* const* a,
                                                    int64_t i, __m512i table, __m512i isum[T][S]) {
  if constexpr (k < 8) {
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const __m512i c = Codes32<K, k>(sb0 + s * strip_bytes, table);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[t][s] = _mm512_dpbusd_epi32(isum[t][s], c, Bcast(a[t][i].qs + ChunkCol<K>(k)));
    }
    Chunks32<K, T, S, k + 1>(sb0, strip_bytes, a, i, table, isum);
  }
}

// T tokens x S consecutive strips over nb 32-column blocks; terms[t * nb + i]
// for token t, block i.
template <int T, int S, Kind32 K>
void Strips32(const uint8_t* strip, uint64_t strip_bytes, int64_t nb, const BlockQ8_0* const* a,
              const BlockTerm* terms, const uint8_t* end, float* y, int64_t ldy) {
  constexpr uint64_t kSB = SuperBytes32<K>();
  const bool to_l2 = PackedPrefetchLevel() == PrefetchLevel::kL2;
  alignas(64) static constexpr int8_t kTable[64] = {
      12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,  //
      12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,  //
      12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,  //
      12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
  const __m512i table = Load512(kTable);
  __m512 acc[2][T][S];
  for (int p = 0; p < 2; ++p) {
    for (int t = 0; t < T; ++t) {
      for (int s = 0; s < S; ++s) acc[p][t][s] = _mm512_setzero_ps();
    }
  }
  auto block = [&](int64_t i, int p) __attribute__((always_inline)) {
    __m512i isum[T][S];
    for (int t = 0; t < T; ++t) {
      for (int s = 0; s < S; ++s) isum[t][s] = _mm512_set1_epi32(terms[t * nb + i].neg_corr);
    }
    for (int s = 0; s < S; ++s) PrefetchAhead<S, kPrefetchAhead32>(strip, strip_bytes, s, i * kSB, kSB, end, to_l2);
    Chunks32<K, T, S>(strip + i * kSB, strip_bytes, a, i, table, isum);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const __m512 scale = Scales32<K>(strip + s * strip_bytes + i * kSB);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512 da = _mm512_set1_ps(terms[t * nb + i].da);
        acc[p][t][s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t][s]), _mm512_mul_ps(scale, da), acc[p][t][s]);
      }
    }
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    block(i, 0);
    block(i + 1, 1);
  }
  if (i < nb) block(i, 0);
  for (int t = 0; t < T; ++t) {
    for (int s = 0; s < S; ++s) _mm512_storeu_ps(y + t * ldy + 16 * s, _mm512_add_ps(acc[0][t][s], acc[1][t][s]));
  }
}

#pragma GCC pop_options

using StripFn = void (*)(const uint8_t*, uint64_t, int64_t, const BlockQ8_K* const*, const uint8_t*, float*,
                         int64_t);
using Strip32Fn = void (*)(const uint8_t*, uint64_t, int64_t, const BlockQ8_0* const*, const BlockTerm*,
                           const uint8_t*, float*, int64_t);

template <int T>
StripFn Q4KFn() { return StripsQ4K<T>; }
template <int T>
StripFn Q5KFn() { return StripsQ4K<T, true>; }
template <int T>
StripFn Q6KFn() { return StripsQ6K<T>; }

constexpr int kMaxTokens = 8;

// Strips32 of kind K: one strip for 1..kMaxTokens tokens, two strips for
// 1..4.
template <Kind32 K, int... T>
constexpr std::array<Strip32Fn, sizeof...(T) + 1> OneStrip(std::integer_sequence<int, T...>) {
  return {nullptr, Strips32<T + 1, 1, K>...};
}
template <Kind32 K, int... T>
constexpr std::array<Strip32Fn, sizeof...(T) + 1> TwoStrips(std::integer_sequence<int, T...>) {
  return {nullptr, Strips32<T + 1, 2, K>...};
}

template <Kind32 K>
void PackedGemm32(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                  int64_t n_tokens, float* y, int64_t ldy) {
  static constexpr auto kOne = OneStrip<K>(std::make_integer_sequence<int, kMaxTokens>());
  static constexpr auto kPair = TwoStrips<K>(std::make_integer_sequence<int, 4>());
  const int64_t nb = w.n_cols / 32;
  const uint64_t strip_bytes = static_cast<uint64_t>(nb) * PackedSuperBytes(w.type);
  const auto* const* a = reinterpret_cast<const BlockQ8_0* const*>(act);
  const BlockTerm* terms = BlockTerms(a, n_tokens, nb, PackedCodeBias(w.type));
  const int64_t s_begin = row0 / 16, s_end = (row0 + n_rows) / 16;
  const uint8_t* end = w.data + s_end * strip_bytes;
  int64_t s = s_begin;
  // Two strips at a time, up to 4 tokens per pass.
  for (; s + 2 <= s_end; s += 2) {
    const uint8_t* strip = w.data + s * strip_bytes;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
      const int nt = static_cast<int>(n_tokens - t0 < 4 ? n_tokens - t0 : 4);
      kPair[nt](strip, strip_bytes, nb, a + t0, terms + t0 * nb, end, y + t0 * ldy + (s - s_begin) * 16, ldy);
    }
  }
  for (; s < s_end; ++s) {
    const uint8_t* strip = w.data + s * strip_bytes;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxTokens) {
      const int nt = static_cast<int>(n_tokens - t0 < kMaxTokens ? n_tokens - t0 : kMaxTokens);
      kOne[nt](strip, strip_bytes, nb, a + t0, terms + t0 * nb, end, y + t0 * ldy + (s - s_begin) * 16, ldy);
    }
  }
}

}  // namespace

bool PackedGemmAvx512(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                      int64_t n_tokens, float* y, int64_t ldy) {
  switch (w.type) {
    case GgmlType::kQ8_0: PackedGemm32<Kind32::kQ8_0>(w, row0, n_rows, act, n_tokens, y, ldy); return true;
    case GgmlType::kMXFP4: PackedGemm32<Kind32::kMxfp4>(w, row0, n_rows, act, n_tokens, y, ldy); return true;
    case GgmlType::kQ5_0: PackedGemm32<Kind32::kQ5_0>(w, row0, n_rows, act, n_tokens, y, ldy); return true;
    default: break;
  }
  const bool q4 = w.type == GgmlType::kQ4_K, q5 = w.type == GgmlType::kQ5_K;
  if (!q4 && !q5 && w.type != GgmlType::kQ6_K) return false;
  static const StripFn kQ4[kMaxTokens + 1] = {nullptr,    Q4KFn<1>(), Q4KFn<2>(), Q4KFn<3>(), Q4KFn<4>(),
                                              Q4KFn<5>(), Q4KFn<6>(), Q4KFn<7>(), Q4KFn<8>()};
  static const StripFn kQ5[kMaxTokens + 1] = {nullptr,    Q5KFn<1>(), Q5KFn<2>(), Q5KFn<3>(), Q5KFn<4>(),
                                              Q5KFn<5>(), Q5KFn<6>(), Q5KFn<7>(), Q5KFn<8>()};
  static const StripFn kQ6[kMaxTokens + 1] = {nullptr,    Q6KFn<1>(), Q6KFn<2>(), Q6KFn<3>(), Q6KFn<4>(),
                                              Q6KFn<5>(), Q6KFn<6>(), Q6KFn<7>(), Q6KFn<8>()};
  const int64_t nsb = w.n_cols / 256;
  const uint64_t strip_bytes = static_cast<uint64_t>(nsb) * PackedSuperBytes(w.type);
  const auto* const* a = reinterpret_cast<const BlockQ8_K* const*>(act);
  const int64_t s_begin = row0 / 16, s_end = (row0 + n_rows) / 16;
  const uint8_t* end = w.data + s_end * strip_bytes;
  for (int64_t s = s_begin; s < s_end; ++s) {
    const uint8_t* strip = w.data + s * strip_bytes;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxTokens) {
      const int nt = static_cast<int>(n_tokens - t0 < kMaxTokens ? n_tokens - t0 : kMaxTokens);
      (q4 ? kQ4 : q5 ? kQ5 : kQ6)[nt](strip, strip_bytes, nsb, a + t0, end, y + t0 * ldy + (s - s_begin) * 16, ldy);
    }
  }
  return true;
}

#else

bool PackedGemmAvx512(const PackedView&, int64_t, int64_t, const uint8_t* const*, int64_t, float*, int64_t) {
  return false;
}

#endif

}  // namespace moesplit::quant::internal
