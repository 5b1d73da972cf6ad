#include "common/model/internal/ops.h"

#include "common/base/fp16.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <numeric>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace moesplit::model::internal {

namespace {

// y = x / sqrt(mean + eps) * w from the row's sum of squares.
void ScaleRow(const float* x, const float* w, int64_t n, float eps, double sum, float* y) {
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w == nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MOESPLIT_HAVE_X86_ROWS 1

// GCC 12 warns about the undefined pass-through operand of unmasked AVX-512
// intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Sums of squares of 16 rows (x + r * stride), lane r of sums[r / 8]
// accumulating row r in order: fma(x, x, s) equals s + double(x) * x
// because the double product of two floats is exact.
__attribute__((target("avx512f,avx2"))) void SumSquares16(const float* x, int64_t stride,
                                                          int64_t n, double* out) {
  const int32_t s = static_cast<int32_t>(stride);
  const __m256i lo = _mm256_setr_epi32(0, s, 2 * s, 3 * s, 4 * s, 5 * s, 6 * s, 7 * s);
  const float* x8 = x + 8 * stride;
  __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; ++i) {
    const __m512d va = _mm512_cvtps_pd(_mm256_i32gather_ps(x + i, lo, 4));
    const __m512d vb = _mm512_cvtps_pd(_mm256_i32gather_ps(x8 + i, lo, 4));
    a = _mm512_fmadd_pd(va, va, a);
    b = _mm512_fmadd_pd(vb, vb, b);
  }
  _mm512_storeu_pd(out, a);
  _mm512_storeu_pd(out + 8, b);
}

// ScaleRow's products, 16 lanes at a time (the same two roundings).
__attribute__((target("avx512f"))) void ScaleRow16(const float* x, const float* w, int64_t n,
                                                   float scale, float* y) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  if (w == nullptr) {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), s));
    for (; i < n; ++i) y[i] = x[i] * scale;
  } else {
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), s),
                                            _mm512_loadu_ps(w + i)));
    }
    for (; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  }
}

#pragma GCC diagnostic pop

bool HaveAvx512() {
  static const bool kHave =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2");
  return kHave;
}
#endif

double SumSquares(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

}  // namespace

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  ScaleRow(x, w, n, eps, SumSquares(x, n), y);
}

void RmsNormRows(const float* x, int64_t x_stride, const float* w, int64_t rows, int64_t n,
                 float eps, float* y, int64_t y_stride) {
  int64_t r = 0;
#ifdef MOESPLIT_HAVE_X86_ROWS
  // Gather offsets are int32 element counts.
  if (HaveAvx512() && x_stride > 0 && x_stride <= INT32_MAX / 8) {
    double sums[16];
    for (; r + 16 <= rows; r += 16) {
      SumSquares16(x + r * x_stride, x_stride, n, sums);
      for (int i = 0; i < 16; ++i) {
        const float mean = static_cast<float>(sums[i] / static_cast<double>(n));
        ScaleRow16(x + (r + i) * x_stride, w, n, 1.0f / std::sqrt(mean + eps),
                   y + (r + i) * y_stride);
      }
    }
  }
#endif
  for (; r < rows; ++r) RmsNorm(x + r * x_stride, w, n, eps, y + r * y_stride);
}

namespace {

// SiLU kernels (SiluVector): ggml_v_expf on 16 or 8 lanes.
#if defined(__x86_64__)
// GCC 12 warns about the undefined pass-through operand of the unmasked
// AVX-512 intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <bool kUp>
__attribute__((target("avx512f,avx512dq,fma"))) void Silu16Avx512(const float* g, const float* u,
                                                                   int64_t n, float* out) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    const __m512 x = _mm512_sub_ps(_mm512_setzero_ps(), gv);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 nn = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(nn, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(nn, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(nn), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 uu = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)),
                        uu, _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        uu, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    __m512 e = _mm512_scalef_ps(j, nn);
    if (d != 0) {
      const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(nn, _mm512_setzero_ps(), _CMP_LE_OQ),
                                              _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
      e = _mm512_mask_blend_ps(d, e, alt);
    }
    const __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_storeu_ps(out + i, kUp ? _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)) : silu);
  }
}
#pragma GCC diagnostic pop

// The same with 8 lanes; ldexp(j, n) as (j * 2^(n/2)) * 2^(n - n/2), which is
// exact whenever exp(-g) is normal or overflows, and otherwise (exp(-g) <
// 2^-126) does not change 1 + exp(-g).
template <bool kUp>
__attribute__((target("avx2,fma"))) void Silu8Avx2(const float* g, const float* u, int64_t n, float* out) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 x = _mm256_sub_ps(_mm256_setzero_ps(), gv);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 nn = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(nn, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(nn, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(sign, nn), _mm256_set1_ps(192), _CMP_GT_OQ);
    const __m256 uu = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)),
                        uu, _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        uu, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvttps_epi32(_mm256_blendv_ps(nn, _mm256_setzero_ps(), big));
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
    const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                        _mm256_cmp_ps(nn, _mm256_setzero_ps(), _CMP_LE_OQ));
    e = _mm256_blendv_ps(e, alt, big);
    e = _mm256_blendv_ps(e, j, _mm256_cmp_ps(nn, nn, _CMP_UNORD_Q));  // NaN stays NaN
    const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(out + i, kUp ? _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)) : silu);
  }
}
#endif

enum class SiluPath { kScalar, kAvx2, kAvx512 };

SiluPath DetectSiluPath() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) return SiluPath::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SiluPath::kAvx2;
#endif
  return SiluPath::kScalar;
}


}  // namespace

float GgmlVExpf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  const float u = b * b;
  const float j = std::fma(
      std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
               std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
      u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  return std::ldexp(j, static_cast<int>(n));
}

void SiluVector(const float* x, const float* u, int64_t n, float* y) {
  static const SiluPath path = DetectSiluPath();
  SiluVectorLanes(path == SiluPath::kAvx512 ? 16 : path == SiluPath::kAvx2 ? 8 : 1, x, u, n, y);
}

void SiluVectorLanes(int lanes, const float* x, const float* u, int64_t n, float* y) {
#if defined(__x86_64__)
  if (lanes == 16) {
    u != nullptr ? Silu16Avx512<true>(x, u, n, y) : Silu16Avx512<false>(x, u, n, y);
    return;
  }
  if (lanes == 8) {
    u != nullptr ? Silu8Avx2<true>(x, u, n, y) : Silu8Avx2<false>(x, u, n, y);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float s = x[i] / (1.0f + GgmlVExpf(0.0f - x[i]));
    y[i] = u != nullptr ? s * u[i] : s;
  }
}

void SwiGlu(const float* gate, const float* up, int64_t rows, int64_t cols, float* out) {
  const int64_t vectorised = cols - cols % kGgmlVectorWidth;
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * cols;
    const float* u = up + r * cols;
    float* o = out + r * cols;
    SiluVector(g, u, vectorised, o);
    for (int64_t i = vectorised; i < cols; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

namespace {

// _mm512_reduce_add_ps as GCC expands it: halves added pairwise down to 4
// lanes, then (l0 + l2) + (l1 + l3).
float ReduceAdd16(const float* v) {
  float t8[8], t4[4];
  for (int l = 0; l < 8; ++l) t8[l] = v[l + 8] + v[l];
  for (int l = 0; l < 4; ++l) t4[l] = t8[l + 4] + t8[l];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

}  // namespace

void Softmax(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  int64_t i = 0;
  for (; i + kGgmlVectorWidth <= n; i += kGgmlVectorWidth) {
    for (int64_t l = 0; l < kGgmlVectorWidth; ++l) x[i + l] = GgmlVExpf(x[i + l] - max);
    sum += ReduceAdd16(x + i);
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < n; ++k) x[k] *= inv;
}

void SelectExperts(float* logits, int n_expert, int k, bool normalize, int32_t* ids,
                   float* weights) {
  Softmax(logits, n_expert);
  // Partial selection: k passes of an argmax that prefers the lower id on
  // ties; n_expert is small (<= a few hundred) and k smaller still.
  std::vector<int32_t> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [logits](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    ids[i] = order[i];
    weights[i] = logits[order[i]];
    sum += weights[i];
  }
  if (normalize) {
    for (int i = 0; i < k; ++i) weights[i] /= sum;
  }
}

float GeluF16Table(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  // ggml_gelu_f32 of the f16 value, stored in the table as f16.
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  const float h = Fp16ToFp32(Fp32ToFp16(x));
  const float g = 0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + kCoefA * h * h)));
  return Fp16ToFp32(Fp32ToFp16(g));
}

void GeGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = GeluF16Table(gate[i]) * up[i];
  }
}

void SelectExpertsSoftmaxOfTopK(const float* logits, int n_expert, int k, int32_t* ids,
                                float* weights) {
  std::vector<int32_t> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [logits](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  for (int i = 0; i < k; ++i) {
    ids[i] = order[i];
    weights[i] = logits[order[i]];
  }
  Softmax(weights, k);
}

void RopeYarnCorrDims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast,
                      float beta_slow, float dims[2]) {
  auto corr_dim = [&](float n_rotations) {
    return static_cast<float>(n_rot) *
           std::log(static_cast<float>(n_ctx_orig) / (n_rotations * 2 * static_cast<float>(M_PI))) /
           (2 * std::log(freq_base));
  };
  const float start = std::floor(corr_dim(beta_fast));
  const float end = std::ceil(corr_dim(beta_slow));
  dims[0] = std::max(0.0f, start);
  dims[1] = std::min(static_cast<float>(n_rot - 1), end);
}

bool MultiSectionPairRotates(const std::array<int, 4>& sec, int64_t pair) {
  const int sect_dims = sec[0] + sec[1] + sec[2] + sec[3];
  if (sect_dims <= 0) return true;
  const int64_t s = pair % sect_dims;
  // ggml_mrope_cache_init, is_imrope: time, height and width positions
  // interleaved by s % 3 while each section lasts, the extra one after.
  return (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2]) ||
         (s % 3 == 0 && s < 3 * sec[0]);
}

void ReluSq(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = x[i] > 0.0f ? x[i] : 0.0f;
    y[i] = r * r;
  }
}

void ComputeRopeAngles(const RopeParams& p, int64_t pos, RopeAngles* out) {
  const int64_t half = p.n_rot / 2;
  out->cos.resize(half);
  out->sin.resize(half);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float corr[2] = {0, 0};
  if (p.ext_factor != 0.0f) {
    RopeYarnCorrDims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr);
  }
  const bool ff = !p.freq_factors.empty();
  float theta_base = static_cast<float>(pos);
  for (int64_t i = 0; i < half; ++i) {
    // ggml_rope_cache_init: theta / freq_factors[i].
    const float theta_extrap = ff ? theta_base / p.freq_factors[i] : theta_base;
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      // ggml's rope_yarn_ramp, evaluated at i0 / 2 = i.
      const float y = (static_cast<float>(i) - corr[0]) / std::max(0.001f, corr[1] - corr[0]);
      const float ramp = 1.0f - std::min(1.0f, std::max(0.0f, y));
      const float mix = ramp * p.ext_factor;
      theta = theta_interp * (1 - mix) + theta_extrap * mix;
      mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    if (p.multi_section && !MultiSectionPairRotates(p.sections, i)) {
      // ggml_mrope_cache_init: the extra position is 0 for text tokens,
      // so theta = 0 whatever the scaling.
      theta = 0.0f;
    }
    out->cos[i] = std::cos(theta) * mscale;
    out->sin[i] = std::sin(theta) * mscale;
    theta_base *= theta_scale;
  }
}

void ApplyRopeNeox(const RopeAngles& a, int64_t n_rot, float* x) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float x0 = x[i];
    const float x1 = x[i + half];
    x[i] = x0 * a.cos[i] - x1 * a.sin[i];
    x[i + half] = x0 * a.sin[i] + x1 * a.cos[i];
  }
}

void ApplyRopeNorm(const RopeAngles& a, int64_t n_rot, float* x) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float x0 = x[2 * i];
    const float x1 = x[2 * i + 1];
    x[2 * i] = x0 * a.cos[i] - x1 * a.sin[i];
    x[2 * i + 1] = x0 * a.sin[i] + x1 * a.cos[i];
  }
}

void SelectExpertsGeneral(const RouterChoice& rc, float* logits, int32_t* ids, float* weights) {
  const int n = rc.n_expert, k = rc.k;
  using S = RouterSpec::Scoring;
  if (rc.scoring == S::kSoftmax) {
    Softmax(logits, n);
  } else if (rc.scoring == S::kSigmoid) {
    for (int i = 0; i < n; ++i) logits[i] = Sigmoid(logits[i]);
  }
  std::vector<float> sel(logits, logits + n);
  if (rc.bias != nullptr) {
    for (int i = 0; i < n; ++i) sel[i] += rc.bias[i];
  }
  auto desc = [&sel](int32_t a, int32_t b) {
    return sel[a] > sel[b] || (sel[a] == sel[b] && a < b);
  };
  if (rc.n_groups > 1) {
    const int per = n / rc.n_groups;
    std::vector<float> group_score(rc.n_groups);
    std::vector<int32_t> members(per);
    for (int g = 0; g < rc.n_groups; ++g) {
      std::iota(members.begin(), members.end(), g * per);
      std::partial_sort(members.begin(), members.begin() + 2, members.end(), desc);
      group_score[g] = static_cast<float>(static_cast<double>(sel[members[0]]) +
                                          static_cast<double>(sel[members[1]]));
    }
    std::vector<int32_t> groups(rc.n_groups);
    std::iota(groups.begin(), groups.end(), 0);
    std::partial_sort(groups.begin(), groups.begin() + rc.n_group_used, groups.end(),
                      [&](int32_t a, int32_t b) {
                        return group_score[a] > group_score[b] ||
                               (group_score[a] == group_score[b] && a < b);
                      });
    std::vector<bool> used(rc.n_groups, false);
    for (int i = 0; i < rc.n_group_used; ++i) used[groups[i]] = true;
    for (int i = 0; i < n; ++i) {
      if (!used[i / per]) sel[i] = -INFINITY;
    }
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), desc);
  for (int i = 0; i < k; ++i) {
    ids[i] = order[i];
    weights[i] = logits[order[i]];
  }
  if (rc.scoring == S::kSoftmaxSelected) Softmax(weights, k);
  if (rc.normalize) {
    double sum = 0.0;
    for (int i = 0; i < k; ++i) sum += weights[i];
    const float s = static_cast<float>(sum);
    for (int i = 0; i < k; ++i) weights[i] /= s;
  }
  if (rc.scale != 0.0f && rc.scale != 1.0f) {
    for (int i = 0; i < k; ++i) weights[i] *= rc.scale;
  }
}

bool UsesGeneralRouter(const HyperParams& hp, bool selection_bias) {
  return hp.router_scoring == RouterSpec::Scoring::kSigmoid || selection_bias ||
         hp.n_expert_groups > 1 || hp.expert_weights_scale != 1.0f ||
         (hp.norm_topk && hp.router_scoring != RouterSpec::Scoring::kSoftmax);
}

namespace {

// The definition: the first index whose value no later value exceeds
// (NaNs never win; a NaN at 0 stays the answer).
int64_t ArgmaxScalar(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

#ifdef MOESPLIT_HAVE_X86_ROWS
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// ArgmaxScalar over 16 lanes: lane l scans indices l, l + 16, ... keeping
// its largest value and the first index of it (strictly greater replaces);
// the answer is the smallest index among the lanes holding the overall
// largest. Measured over twice as fast as the scalar loop (whose compares
// chain through best), see tests/bench/README.md.
__attribute__((target("avx512f"))) int64_t Argmax16(const float* x, int64_t n) {
  __m512 m = _mm512_loadu_ps(x);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i at = idx;
  const __m512i step = _mm512_set1_epi32(16);
  int64_t i = 16;
  for (; i + 16 <= n; i += 16) {
    idx = _mm512_add_epi32(idx, step);
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 gt = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ);
    m = _mm512_mask_mov_ps(m, gt, v);
    at = _mm512_mask_mov_epi32(at, gt, idx);
  }
  alignas(64) float mv[16];
  alignas(64) int32_t av[16];
  _mm512_store_ps(mv, m);
  _mm512_store_epi32(av, at);
  // Lanes whose first value is a NaN never took another: the scalar scan
  // passes over a NaN at a position other than 0, so such a lane is redone.
  int64_t best = -1;
  for (int l = 0; l < 16; ++l) {
    int64_t li = av[l];
    float lv = mv[l];
    if (lv != lv) {
      if (l == 0) return 0;  // x[0] is NaN
      li = -1;
      for (int64_t j = l; j < i; j += 16) {
        if (x[j] == x[j] && (li < 0 || x[j] > lv)) li = j, lv = x[j];
      }
      if (li < 0) continue;
    }
    if (best < 0 || lv > x[best] || (lv == x[best] && li < best)) best = li;
  }
  for (; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}
#pragma GCC diagnostic pop
#endif

}  // namespace

int64_t Argmax(const float* x, int64_t n) {
#ifdef MOESPLIT_HAVE_X86_ROWS
  if (n >= 16 && n <= INT32_MAX && HaveAvx512()) return Argmax16(x, n);
#endif
  return ArgmaxScalar(x, n);
}

}  // namespace moesplit::model::internal
