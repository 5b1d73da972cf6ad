// AVX2 (+FMA, F16C) dot kernels for every weight format: the bodies of
// internal/x86_dot.inc with maddubs/madd as the byte dot. Compiled with
// `#pragma GCC target` inside an anonymous namespace (internal linkage, so
// no AVX2 copy of an inline function can leak to other translation units);
// only called when CpuHasAvx2().

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
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
      Entry<DotIqSimd<GgmlType::kIQ1_S>>(GgmlType::kIQ1_S, l),
      Entry<DotIqSimd<GgmlType::kIQ1_M>>(GgmlType::kIQ1_M, l),
      Entry<DotIqSimd<GgmlType::kIQ2_XXS>>(GgmlType::kIQ2_XXS, l),
      Entry<DotIqSimd<GgmlType::kIQ2_XS>>(GgmlType::kIQ2_XS, l),
      Entry<DotIqSimd<GgmlType::kIQ2_S>>(GgmlType::kIQ2_S, l),
      Entry<DotIqSimd<GgmlType::kIQ3_XXS>>(GgmlType::kIQ3_XXS, l),
      Entry<DotIqSimd<GgmlType::kIQ3_S>>(GgmlType::kIQ3_S, l),
      Entry<DotIqSimd<GgmlType::kTQ1_0>>(GgmlType::kTQ1_0, l),
      Entry<DotIqSimd<GgmlType::kTQ2_0>>(GgmlType::kTQ2_0, l),
  };
  out->dots.insert(out->dots.end(), std::begin(kernels), std::end(kernels));
}

#else

void AppendAvx2Kernels(SimdKernels*) {}

#endif

}  // namespace moesplit::quant::internal
