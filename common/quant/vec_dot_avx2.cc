// AVX2 (+FMA, F16C) dot kernels for every weight format: the bodies of
// internal/x86_dot.inc with maddubs/madd as the byte dot, and the i-quants'
// own 32-values-per-step kernels (TQ1_0/TQ2_0: x86_dot.inc's generic one over
// UnpackBlock). Compiled with
// `#pragma GCC target` inside an anonymous namespace (internal linkage, so
// no AVX2 copy of an inline function can leak to other translation units);
// only called when CpuHasAvx2().

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <cstdint>
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
#pragma GCC target("avx2,fma,f16c")

inline __m256i DotAcc(__m256i acc, __m256i u8, __m256i s8) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1)));
}

// ggml's bytes_from_bits_32.
inline __m256i BitsToBytes(uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101,
                                         0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

#include "common/quant/internal/x86_dot.inc"

// ---- i-quants: 32 values (one group of 32, or two of 16) per step ----------
//
// Grid entries loaded straight into the weight bytes, the sign bits turned
// into a byte mask and applied to the activation bytes, maddubs (|w| <= 62,
// so no pair saturates) and madd with the group's sub-scale; exact integer
// sums, so the canonical order (internal/unpack.h) to the bit.

inline uint32_t Le32At(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint32_t SignsFromAux2(uint32_t aux) {
  return kSignsIq2Xs[aux & 127] | (kSignsIq2Xs[(aux >> 7) & 127] << 8) |
         (kSignsIq2Xs[(aux >> 14) & 127] << 16) | (static_cast<uint32_t>(kSignsIq2Xs[(aux >> 21) & 127]) << 24);
}
inline __m256i Entries4(const uint64_t* grid, int i0, int i1, int i2, int i3) {
  return _mm256_set_epi64x(static_cast<long long>(grid[i3]), static_cast<long long>(grid[i2]),
                           static_cast<long long>(grid[i1]), static_cast<long long>(grid[i0]));
}
// int16 lanes 0..7 (values 0..15) = a, 8..15 (values 16..31) = b.
inline __m256i Scale16Pair(int a, int b) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(b)), _mm_set1_epi16(static_cast<int16_t>(a)));
}

// One step: magnitudes w, the sign bits (bit k: value k negative) or, for
// IQ1, signed codes (kSignedCodes), and the int16 sub-scales.
struct Iq32 {
  __m256i w;
  uint32_t neg;
  __m256i scale;
};

__attribute__((always_inline)) inline Iq32 Iq32Of(const BlockIq2Xxs& b, int c) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(b.qs) + 8 * c;
  const uint32_t aux = Le32At(p + 4);
  const int ls = 2 * static_cast<int>(aux >> 28) + 1;
  return {Entries4(kIq2XxsGrid, p[0], p[1], p[2], p[3]), SignsFromAux2(aux), Scale16Pair(ls, ls)};
}
__attribute__((always_inline)) inline Iq32 Iq32Of(const BlockIq2Xs& b, int c) {
  const uint16_t* q = b.qs + 4 * c;
  const uint32_t neg = kSignsIq2Xs[q[0] >> 9] | (kSignsIq2Xs[q[1] >> 9] << 8) | (kSignsIq2Xs[q[2] >> 9] << 16) |
                       (static_cast<uint32_t>(kSignsIq2Xs[q[3] >> 9]) << 24);
  return {Entries4(kIq2XsGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511), neg,
          Scale16Pair(2 * (b.scales[c] & 15) + 1, 2 * (b.scales[c] >> 4) + 1)};
}
__attribute__((always_inline)) inline Iq32 Iq32Of(const BlockIq2S& b, int c) {
  const uint8_t* lo = b.qs + 4 * c;
  const int hi = b.qh[c];
  return {Entries4(kIq2SGrid, lo[0] | ((hi & 3) << 8), lo[1] | (((hi >> 2) & 3) << 8), lo[2] | (((hi >> 4) & 3) << 8),
                   lo[3] | (((hi >> 6) & 3) << 8)),
          Le32At(b.qs + 32 + 4 * c), Scale16Pair(2 * (b.scales[c] & 15) + 1, 2 * (b.scales[c] >> 4) + 1)};
}
__attribute__((always_inline)) inline Iq32 Iq32Of(const BlockIq3Xxs& b, int c) {
  const uint8_t* q = b.qs + 8 * c;
  const uint32_t aux = Le32At(b.qs + 64 + 4 * c);
  const int ls = 2 * static_cast<int>(aux >> 28) + 1;
  const __m256i w = _mm256_set_epi32(static_cast<int>(kIq3XxsGrid[q[7]]), static_cast<int>(kIq3XxsGrid[q[6]]),
                                     static_cast<int>(kIq3XxsGrid[q[5]]), static_cast<int>(kIq3XxsGrid[q[4]]),
                                     static_cast<int>(kIq3XxsGrid[q[3]]), static_cast<int>(kIq3XxsGrid[q[2]]),
                                     static_cast<int>(kIq3XxsGrid[q[1]]), static_cast<int>(kIq3XxsGrid[q[0]]));
  return {w, SignsFromAux2(aux), Scale16Pair(ls, ls)};
}
__attribute__((always_inline)) inline Iq32 Iq32Of(const BlockIq3S& b, int c) {
  const uint8_t* q = b.qs + 8 * c;
  const int qh = b.qh[c];
  auto e = [&](int k) { return static_cast<int>(kIq3SGrid[q[k] | (((qh >> k) & 1) << 8)]); };
  const int ls = 2 * ((b.scales[c / 2] >> (4 * (c % 2))) & 15) + 1;
  return {_mm256_set_epi32(e(7), e(6), e(5), e(4), e(3), e(2), e(1), e(0)), Le32At(b.signs + 4 * c),
          Scale16Pair(ls, ls)};
}

// IQ1: signed codes 8 g + delta (delta = +-1 per 8-value run, all-ones bytes
// where -1 in neg_runs) as the weight bytes.
inline __m256i Iq1Codes(__m256i g, __m256i neg_runs) {
  const __m256i g8 = _mm256_and_si256(_mm256_slli_epi64(g, 3), _mm256_set1_epi8(static_cast<char>(0xF8)));
  return _mm256_add_epi8(g8, _mm256_or_si256(neg_runs, _mm256_set1_epi8(1)));  // +1, or -1 where all ones
}
__attribute__((always_inline)) inline Iq32 Iq32Of(const BlockIq1S& b, int c) {
  const uint8_t* lo = b.qs + 4 * c;
  const int qh = b.qh[c];
  const __m256i g = Entries4(kIq1SGrid, lo[0] | ((qh & 7) << 8), lo[1] | (((qh >> 3) & 7) << 8),
                             lo[2] | (((qh >> 6) & 7) << 8), lo[3] | (((qh >> 9) & 7) << 8));
  const __m256i neg = _mm256_set1_epi8(static_cast<char>((qh & 0x8000) ? 0xFF : 0));
  const int ls = 2 * ((qh >> 12) & 7) + 1;
  return {Iq1Codes(g, neg), 0, Scale16Pair(ls, ls)};
}
__attribute__((always_inline)) inline Iq32 Iq32Of(const BlockIq1M& b, int c) {
  const uint8_t* lo = b.qs + 4 * c;
  const int nibs = b.qh[2 * c] | (b.qh[2 * c + 1] << 8);  // run k: nibble k
  auto n = [&](int k) { return (nibs >> (4 * k)) & 0xF; };
  const __m256i g = Entries4(kIq1SGrid, lo[0] | ((n(0) & 7) << 8), lo[1] | ((n(1) & 7) << 8),
                             lo[2] | ((n(2) & 7) << 8), lo[3] | ((n(3) & 7) << 8));
  auto run = [&](int k) { return static_cast<long long>((n(k) & 8) ? -1 : 0); };
  const __m256i neg = _mm256_set_epi64x(run(3), run(2), run(1), run(0));
  uint16_t sc;
  std::memcpy(&sc, b.scales + 2 * (c / 2), 2);
  const int s = sc >> (6 * (c % 2));
  return {Iq1Codes(g, neg), 0, Scale16Pair(2 * (s & 7) + 1, 2 * ((s >> 3) & 7) + 1)};
}

template <typename Block>
float IqDOf(const Block& b) {
  if constexpr (std::is_same_v<Block, BlockIq1M>) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    return _cvtsh_ss(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                           (sc[3] & 0xf000))) * 0.125f;
  } else if constexpr (std::is_same_v<Block, BlockIq3S>) {
    return _cvtsh_ss(b.d);
  } else if constexpr (std::is_same_v<Block, BlockIq3Xxs>) {
    return _cvtsh_ss(b.d) * 0.25f;
  } else {
    return _cvtsh_ss(b.d) * 0.125f;
  }
}

template <typename Block>
float DotIqAvx2(int64_t n, const void* vx, const void* vy) {
  constexpr bool kIq1 = std::is_same_v<Block, BlockIq1S> || std::is_same_v<Block, BlockIq1M>;
  const Block* x = static_cast<const Block*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  float acc = 0;
  for (int64_t i = 0; i < n / 256; ++i) {
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const Iq32 s = Iq32Of(x[i], c);
      const __m256i a = Load256(y[i].qs + 32 * c);
      __m256i p;
      if constexpr (kIq1) {
        p = _mm256_maddubs_epi16(_mm256_sign_epi8(s.w, s.w), _mm256_sign_epi8(a, s.w));
      } else {
        const __m256i m = BitsToBytes(s.neg);
        p = _mm256_maddubs_epi16(s.w, _mm256_sub_epi8(_mm256_xor_si256(a, m), m));
      }
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s.scale));
    }
    acc = FinishSuper(HsumI32(sumi), IqDOf(x[i]), y[i].d, acc);
  }
  return acc;
}

#pragma GCC pop_options

// A table entry: the kernel and its many-rows form.
template <VecDotFn kFn>
SimdKernel Entry(GgmlType type, KernelLevel level) {
  return {type, level, kFn, DotRows<kFn>};
}
// The same with a two-row many-rows form.
template <VecDotFn kFn, void (*kDot2)(int64_t, const void*, const void*, const void*, float*)>
SimdKernel PairEntry(GgmlType type, KernelLevel level) {
  return {type, level, kFn, DotRowPairs<kDot2>};
}

}  // namespace

void AppendAvx2Kernels(SimdKernels* out) {
  const KernelLevel l = KernelLevel::kAvx2;
  const SimdKernel kernels[] = {
      Entry<DotFloat256<float, LoadF32x8, ScalarF32>>(GgmlType::kF32, l),
      Entry<DotFloat256<uint16_t, LoadF16x8, ScalarF16>>(GgmlType::kF16, l),
      Entry<DotFloat256<uint16_t, LoadBf16x8, ScalarBf16>>(GgmlType::kBF16, l),
      Entry<DotBlock32<DecQ4_0>>(GgmlType::kQ4_0, l),
      Entry<DotBlock32<DecQ4_1>>(GgmlType::kQ4_1, l),
      Entry<DotBlock32<DecQ5_0>>(GgmlType::kQ5_0, l),
      Entry<DotBlock32<DecQ5_1>>(GgmlType::kQ5_1, l),
      Entry<DotBlock32<DecQ8_0>>(GgmlType::kQ8_0, l),
      Entry<DotBlock32<DecIq4Nl>>(GgmlType::kIQ4_NL, l),
      Entry<DotMxfp4Simd>(GgmlType::kMXFP4, l),
      Entry<DotQ2KSimd>(GgmlType::kQ2_K, l),
      Entry<DotQ3KSimd>(GgmlType::kQ3_K, l),
      PairEntry<DotQ45KPairs<false, K45Sums256>, DotQ45KRowPair<false>>(GgmlType::kQ4_K, l),
      PairEntry<DotQ45KPairs<true, K45Sums256>, DotQ45KRowPair<true>>(GgmlType::kQ5_K, l),
      PairEntry<DotQ6KPairs, DotQ6KRowPair>(GgmlType::kQ6_K, l),
      Entry<DotIq4XsSimd>(GgmlType::kIQ4_XS, l),
      Entry<DotIqAvx2<BlockIq1S>>(GgmlType::kIQ1_S, l),
      Entry<DotIqAvx2<BlockIq1M>>(GgmlType::kIQ1_M, l),
      Entry<DotIqAvx2<BlockIq2Xxs>>(GgmlType::kIQ2_XXS, l),
      Entry<DotIqAvx2<BlockIq2Xs>>(GgmlType::kIQ2_XS, l),
      Entry<DotIqAvx2<BlockIq2S>>(GgmlType::kIQ2_S, l),
      Entry<DotIqAvx2<BlockIq3Xxs>>(GgmlType::kIQ3_XXS, l),
      Entry<DotIqAvx2<BlockIq3S>>(GgmlType::kIQ3_S, l),
      Entry<DotIqSimd<GgmlType::kTQ1_0>>(GgmlType::kTQ1_0, l),
      Entry<DotIqSimd<GgmlType::kTQ2_0>>(GgmlType::kTQ2_0, l),
  };
  out->dots.insert(out->dots.end(), std::begin(kernels), std::end(kernels));
}

#else

void AppendAvx2Kernels(SimdKernels*) {}

#endif

}  // namespace moesplit::quant::internal
