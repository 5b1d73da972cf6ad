// x86 SIMD dot kernels, compiled per function with
// __attribute__((target(...))) and chosen at run time, so the library itself
// needs no -m flags and still runs on any x86-64 CPU.
//
// AVX2 (+FMA, F16C) kernels for Q8_0 x Q8_0, Q4_K x Q8_K and Q6_K x Q8_K, in
// ggml's x86 scheme (maddubs on unsigned x signed bytes, madd by scales).
// They sum in a different order than the scalar kernels, so results agree to
// float rounding, not bit for bit. The AVX-512 level uses them too (the
// registry falls back to the highest registered level).
// REQUIRES (as ggml's SIMD kernels): no int8 code is -128 (ggml's quantisers
// never produce it; FillRandomBlocks avoids it).

#include <vector>

#include "common/quant/internal/blocks.h"
#include "common/quant/internal/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace moesplit::quant::internal {

#if defined(__x86_64__)
namespace {

#define MOESPLIT_AVX2 __attribute__((target("avx2,fma,f16c")))

MOESPLIT_AVX2 inline float HsumPs(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

MOESPLIT_AVX2 inline int HsumEpi32(__m256i x) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(r);
}

MOESPLIT_AVX2 inline float Half(uint16_t h) { return _cvtsh_ss(h); }

MOESPLIT_AVX2 inline __m256i Load(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

MOESPLIT_AVX2 float DotQ8_0Avx2(int64_t n, const void* vx, const void* vy) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(Half(x[i].d) * Half(y[i].d));
    const __m256i qx = Load(x[i].qs);
    const __m256i qy = Load(y[i].qs);
    // |x| * (y * sign(x)) = x * y, as unsigned x signed bytes.
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
    const __m256i p32 = _mm256_madd_epi16(p16, ones);
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p32), acc);
  }
  return HsumPs(acc);
}

MOESPLIT_AVX2 float DotQ4_KAvx2(int64_t n, const void* vx, const void* vy) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) GetScaleMinK4(j, x[i].scales, &sc[j], &mn[j]);
    int summ = 0;
    for (int j = 0; j < 8; ++j) summ += (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]) * mn[j];
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i q4 = Load(x[i].qs + 32 * j);
      const __m256i lo = _mm256_and_si256(q4, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
      const __m256i pl = _mm256_maddubs_epi16(lo, Load(y[i].qs + 64 * j));
      const __m256i ph = _mm256_maddubs_epi16(hi, Load(y[i].qs + 64 * j + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(pl, _mm256_set1_epi16(sc[2 * j])));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(ph, _mm256_set1_epi16(sc[2 * j + 1])));
    }
    const float d = y[i].d * Half(x[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    acc_min += y[i].d * Half(x[i].dmin) * summ;
  }
  return HsumPs(acc) - acc_min;
}

// 32 six-bit codes (0..63) from 4 low bits and 2 high bits at `shift`.
MOESPLIT_AVX2 inline __m256i Q6Codes(__m256i ql, int ql_shift, __m256i qh, int qh_shift) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
  const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(ql, ql_shift), m4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, qh_shift), m3);
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

MOESPLIT_AVX2 float DotQ6_KAvx2(int64_t n, const void* vx, const void* vy) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    // sum q8 * (q6 - 32) = sum q8 * q6 - 32 * bsum, per group of 16.
    int corr = 0;
    for (int g = 0; g < 16; ++g) corr += x[i].scales[g] * y[i].bsums[g];
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const int8_t* q8 = y[i].qs + 128 * h;
      const int8_t* sc = x[i].scales + 8 * h;
      const __m256i ql0 = Load(ql), ql1 = Load(ql + 32), qh = Load(x[i].qh + 32 * h);
      const __m256i q[4] = {Q6Codes(ql0, 0, qh, 0), Q6Codes(ql1, 0, qh, 2),
                            Q6Codes(ql0, 4, qh, 4), Q6Codes(ql1, 4, qh, 6)};
      for (int k = 0; k < 4; ++k) {
        const __m256i p16 = _mm256_maddubs_epi16(q[k], Load(q8 + 32 * k));
        const __m256i scales =
            _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scales));
      }
    }
    const int isum = HsumEpi32(sumi) - 32 * corr;
    sumf += y[i].d * Half(x[i].d) * isum;
  }
  return sumf;
}

#undef MOESPLIT_AVX2

}  // namespace

bool CpuHasAvx2() {
  static const bool have = [] {
    __builtin_cpu_init();
    unsigned eax, ebx, ecx, edx;
    // F16C is CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports lacks it).
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return have;
}

bool CpuHasAvx512Vnni() {
  static const bool have = CpuHasAvx2() && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512vnni");
  return have;
}

KernelLevel DetectX86Kernels(std::vector<SimdKernel>* out) {
  if (CpuHasAvx2()) {
    out->push_back({GgmlType::kQ8_0, KernelLevel::kAvx2, DotQ8_0Avx2});
    out->push_back({GgmlType::kQ4_K, KernelLevel::kAvx2, DotQ4_KAvx2});
    out->push_back({GgmlType::kQ6_K, KernelLevel::kAvx2, DotQ6_KAvx2});
  }
  if (CpuHasAvx512Vnni()) return KernelLevel::kAvx512;
  if (CpuHasAvx2()) return KernelLevel::kAvx2;
  return KernelLevel::kScalar;
}

#else

bool CpuHasAvx2() { return false; }
bool CpuHasAvx512Vnni() { return false; }

KernelLevel DetectX86Kernels(std::vector<SimdKernel>* out) {
  (void)out;
  return KernelLevel::kScalar;
}

#endif

}  // namespace moesplit::quant::internal
