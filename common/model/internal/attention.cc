#include "common/model/internal/attention.h"

#include <cmath>

#include "common/base/fp16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MOESPLIT_HAVE_X86_F16C 1
#include <immintrin.h>
#endif

namespace moesplit::model::internal {
namespace {

constexpr int64_t kStep = 64;  // ggml's GGML_F16_STEP for AVX-512
constexpr int kLanes = 16;     // GGML_F16_EPR for AVX-512

// The reduction of the 4 x 16 accumulators, as GGML_F32Cx16_REDUCE with
// GCC's _mm512_reduce_add_ps.
float Reduce(const float acc[4][kLanes]) {
  float v[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const float a02 = acc[0][l] + acc[2][l];
    const float a13 = acc[1][l] + acc[3][l];
    v[l] = a02 + a13;
  }
  float t8[8], t4[4];
  for (int l = 0; l < 8; ++l) t8[l] = v[l + 8] + v[l];
  for (int l = 0; l < 4; ++l) t4[l] = t8[l + 4] + t8[l];
  const float r0 = t4[0] + t4[2];
  const float r1 = t4[1] + t4[3];
  return r0 + r1;
}

float DotTail(int64_t begin, int64_t n, const uint16_t* x, const uint16_t* y, double sum) {
  for (int64_t i = begin; i < n; ++i) {
    sum += static_cast<double>(Fp16ToFp32(x[i]) * Fp16ToFp32(y[i]));
  }
  return static_cast<float>(sum);
}

float DotScalar(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~(kStep - 1);
  float acc[4][kLanes] = {};
  for (int64_t i = 0; i < np; i += kStep) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t e = i + j * kLanes + l;
        acc[j][l] = std::fma(Fp16ToFp32(x[e]), Fp16ToFp32(y[e]), acc[j][l]);
      }
    }
  }
  return DotTail(np, n, x, y, np > 0 ? Reduce(acc) : 0.0);
}

void MadScalar(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = Fp32ToFp16(std::fma(Fp16ToFp32(x[i]), v, Fp16ToFp32(y[i])));
  }
}

void ScaleScalar(int64_t n, uint16_t* y, float v) {
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToFp16(Fp16ToFp32(y[i]) * v);
}

#ifdef MOESPLIT_HAVE_X86_F16C

#define MOESPLIT_TARGET __attribute__((target("avx2,fma,f16c")))

MOESPLIT_TARGET inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
MOESPLIT_TARGET inline void Store8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

// 16-lane accumulators as (lower, upper) pairs of 8 lanes.
MOESPLIT_TARGET float DotVector(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~(kStep - 1);
  if (np == 0) return DotTail(0, n, x, y, 0.0);
  __m256 lo[4], hi[4];
  for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < np; i += kStep) {
    for (int j = 0; j < 4; ++j) {
      const int64_t e = i + j * kLanes;
      lo[j] = _mm256_fmadd_ps(Load8(x + e), Load8(y + e), lo[j]);
      hi[j] = _mm256_fmadd_ps(Load8(x + e + 8), Load8(y + e + 8), hi[j]);
    }
  }
  const __m256 vlo = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
  const __m256 vhi = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
  const __m256 t8 = _mm256_add_ps(vhi, vlo);
  const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
  float t[4];
  _mm_storeu_ps(t, t4);
  const float r0 = t[0] + t[2];
  const float r1 = t[1] + t[3];
  return DotTail(np, n, x, y, r0 + r1);
}

MOESPLIT_TARGET void MadVector(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(y + i, _mm256_fmadd_ps(Load8(x + i), vv, Load8(y + i)));
  MadScalar(n - i, y + i, x + i, v);
}

MOESPLIT_TARGET void ScaleVector(int64_t n, uint16_t* y, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(y + i, _mm256_mul_ps(Load8(y + i), vv));
  ScaleScalar(n - i, y + i, v);
}

// The same operations with 16-lane registers: one accumulator per ggml
// accumulator, the reduction as above.
#define MOESPLIT_TARGET512 __attribute__((target("avx512f,avx512dq,avx2,fma,f16c")))
// GCC 12 warns about the undefined pass-through operand of unmasked AVX-512
// intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

MOESPLIT_TARGET512 inline __m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
MOESPLIT_TARGET512 inline void Store16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

MOESPLIT_TARGET512 float DotVector512(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~(kStep - 1);
  if (np == 0) return DotTail(0, n, x, y, 0.0);
  __m512 acc[4];
  for (int j = 0; j < 4; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < np; i += kStep) {
    for (int j = 0; j < 4; ++j) {
      const int64_t e = i + j * kLanes;
      acc[j] = _mm512_fmadd_ps(Load16(x + e), Load16(y + e), acc[j]);
    }
  }
  const __m512 v = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
  const __m256 t8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
  const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
  float t[4];
  _mm_storeu_ps(t, t4);
  const float r0 = t[0] + t[2];
  const float r1 = t[1] + t[3];
  return DotTail(np, n, x, y, r0 + r1);
}

MOESPLIT_TARGET512 void MadVector512(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(y + i, _mm512_fmadd_ps(Load16(x + i), vv, Load16(y + i)));
  MadVector(n - i, y + i, x + i, v);
}

MOESPLIT_TARGET512 void ScaleVector512(int64_t n, uint16_t* y, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(y + i, _mm512_mul_ps(Load16(y + i), vv));
  ScaleVector(n - i, y + i, v);
}

enum class Level { kScalar, kAvx2, kAvx512 };

Level Pick(F16Kernels k) {
  static const bool kAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                            __builtin_cpu_supports("f16c");
  // _mm512_extractf32x8_ps needs AVX512DQ.
  static const bool kAvx512 = kAvx2 && __builtin_cpu_supports("avx512f") &&
                              __builtin_cpu_supports("avx512dq");
  if (k == F16Kernels::kScalar || !kAvx2) return Level::kScalar;
  if (k == F16Kernels::kAvx2 || !kAvx512) return Level::kAvx2;
  return Level::kAvx512;
}

#else

enum class Level { kScalar, kAvx2, kAvx512 };
Level Pick(F16Kernels) { return Level::kScalar; }
float DotVector(int64_t n, const uint16_t* x, const uint16_t* y) { return DotScalar(n, x, y); }
void MadVector(int64_t n, uint16_t* y, const uint16_t* x, float v) { MadScalar(n, y, x, v); }
void ScaleVector(int64_t n, uint16_t* y, float v) { ScaleScalar(n, y, v); }
float DotVector512(int64_t n, const uint16_t* x, const uint16_t* y) { return DotScalar(n, x, y); }
void MadVector512(int64_t n, uint16_t* y, const uint16_t* x, float v) { MadScalar(n, y, x, v); }
void ScaleVector512(int64_t n, uint16_t* y, float v) { ScaleScalar(n, y, v); }

#endif

}  // namespace

float DotF16(int64_t n, const uint16_t* x, const uint16_t* y, F16Kernels k) {
  switch (Pick(k)) {
    case Level::kAvx512: return DotVector512(n, x, y);
    case Level::kAvx2: return DotVector(n, x, y);
    case Level::kScalar: break;
  }
  return DotScalar(n, x, y);
}

void MadF16(int64_t n, uint16_t* y, const uint16_t* x, float v, F16Kernels k) {
  switch (Pick(k)) {
    case Level::kAvx512: return MadVector512(n, y, x, v);
    case Level::kAvx2: return MadVector(n, y, x, v);
    case Level::kScalar: break;
  }
  MadScalar(n, y, x, v);
}

void ScaleF16(int64_t n, uint16_t* y, float v, F16Kernels k) {
  switch (Pick(k)) {
    case Level::kAvx512: return ScaleVector512(n, y, v);
    case Level::kAvx2: return ScaleVector(n, y, v);
    case Level::kScalar: break;
  }
  ScaleScalar(n, y, v);
}

void ToF16(int64_t n, const float* src, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
}

void AttendHead(const HeadAttention& a, uint16_t* acc16, float* out, F16Kernels k) {
  for (int64_t c = 0; c < a.dv; ++c) acc16[c] = 0;
  float m = -INFINITY;
  float sum = 0.0f;
  for (int64_t j = 0; j < a.n_kv; ++j) {
    const float s = DotF16(a.dk, a.k + j * a.k_stride, a.q16, k) * a.scale;
    float ms = 1.0f;
    float vs = 1.0f;
    if (s > m) {
      ms = std::exp(m - s);
      m = s;
      ScaleF16(a.dv, acc16, ms, k);
    } else {
      vs = std::exp(s - m);
    }
    MadF16(a.dv, acc16, a.v + j * a.v_stride, vs, k);
    sum = std::fma(sum, ms, vs);
  }
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int64_t c = 0; c < a.dv; ++c) out[c] = Fp16ToFp32(acc16[c]) * inv;
}

}  // namespace moesplit::model::internal
