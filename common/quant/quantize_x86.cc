// AVX2 activation quantisers (F16, BF16, Q8_0, Q8_1, Q8_K), byte-identical
// to the reference quantisers of quantize.cc for finite inputs (NaN inputs
// too for F16/BF16): the same divisions and products in f32, roundf()
// emulated exactly (truncate, then step away from zero when the exact
// remainder is >= 0.5), ggml's nearest_int through the same 1.5 * 2^23 trick.
// Registered at the AVX2 level (they serve AVX-512 and AMX as well).

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/kernels.h"

namespace moesplit::quant::internal {

#if defined(__x86_64__)
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

inline float HmaxPs(__m256 x) {
  __m128 r = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  r = _mm_max_ps(r, _mm_movehl_ps(r, r));
  r = _mm_max_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline __m256 AbsPs(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

// roundf (half away from zero), exact.
inline __m256i RoundAway(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_sub_ps(v, t);
  const __m256 step = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
  const __m256 big = _mm256_cmp_ps(AbsPs(frac), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  return _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(big, step)));
}

// ggml nearest_int.
inline __m256i NearestInt(__m256 v) {
  const __m256i bits = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
  return _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                          _mm256_set1_epi32(0x00400000));
}

// 32 int32 values (in [-128, 127]) to 32 int8 in order.
inline __m256i PackI8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline int HsumI32(__m256i x) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(r);
}

// One 32-block of Q8_0 / Q8_1: codes into qs, returns d; *sum = Σ codes.
inline float Q8Block32(const float* x, int8_t* qs, int* sum) {
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, AbsPs(v[k]));
  }
  const float d = HmaxPs(amax) / ((1 << 7) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = RoundAway(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), PackI8(q[0], q[1], q[2], q[3]));
  if (sum != nullptr) {
    *sum = HsumI32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  }
  return d;
}

void QuantQ8_0Avx2(const float* x, void* dst, int64_t n) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / 32; ++i) y[i].d = Fp32ToFp16(Q8Block32(x + 32 * i, y[i].qs, nullptr));
}

void QuantQ8_1Avx2(const float* x, void* dst, int64_t n) {
  BlockQ8_1* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / 32; ++i) {
    int sum = 0;
    const float d = Q8Block32(x + 32 * i, y[i].qs, &sum);
    y[i].d = Fp32ToFp16(d);
    y[i].s = Fp32ToFp16(sum * d);
  }
}

void QuantQ8_KAvx2(const float* x, void* dst, int64_t n) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / 256; ++i, x += 256) {
    __m256 amax_v = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) amax_v = _mm256_max_ps(amax_v, AbsPs(_mm256_loadu_ps(x + 8 * k)));
    const float amax = HmaxPs(amax_v);
    if (!amax) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The first element whose |x| is the maximum gives the signed max.
    float max = 0;
    const __m256 target = _mm256_set1_ps(amax);
    for (int k = 0; k < 32; ++k) {
      const int mask = _mm256_movemask_ps(_mm256_cmp_ps(AbsPs(_mm256_loadu_ps(x + 8 * k)), target, _CMP_EQ_OQ));
      if (mask != 0) {
        max = x[8 * k + __builtin_ctz(mask)];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 s = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int k = 0; k < 32; k += 4) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        q[j] = _mm256_min_epi32(cap, NearestInt(_mm256_mul_ps(s, _mm256_loadu_ps(x + 8 * (k + j)))));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 8 * k), PackI8(q[0], q[1], q[2], q[3]));
      y[i].bsums[k / 2] = static_cast<int16_t>(HsumI32(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[k / 2 + 1] = static_cast<int16_t>(HsumI32(_mm256_add_epi32(q[2], q[3])));
    }
    y[i].d = 1 / iscale;
  }
}

// f32 -> f16 (round to nearest even; NaN -> sign | 0x7E00 as Fp32ToFp16).
void QuantF16Avx2(const float* x, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (!_mm256_testz_ps(nan, nan)) {
      const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(INT32_MIN)), 16);
      const __m256i q = _mm256_or_si256(sign, _mm256_set1_epi32(0x7E00));
      const __m128i qn = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const __m256i m = _mm256_castps_si256(nan);
      const __m128i mn = _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
      h = _mm_blendv_epi8(h, qn, mn);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = Fp32ToFp16(x[i]);
}

// f32 -> bf16 (round to nearest even; NaN -> quiet, as Fp32ToBf16).
void QuantBf16Avx2(const float* x, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    const __m256i absu = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
  for (; i < n; ++i) y[i] = Fp32ToBf16(x[i]);
}

#pragma GCC pop_options

}  // namespace

void AppendSimdQuantizers(SimdKernels* out) {
  const KernelLevel l = KernelLevel::kAvx2;
  const SimdQuantizer q[] = {
      {GgmlType::kF16, l, QuantF16Avx2},   {GgmlType::kBF16, l, QuantBf16Avx2},
      {GgmlType::kQ8_0, l, QuantQ8_0Avx2}, {GgmlType::kQ8_1, l, QuantQ8_1Avx2},
      {GgmlType::kQ8_K, l, QuantQ8_KAvx2},
  };
  out->quantizers.insert(out->quantizers.end(), std::begin(q), std::end(q));
}

#else

void AppendSimdQuantizers(SimdKernels*) {}

#endif

}  // namespace moesplit::quant::internal
