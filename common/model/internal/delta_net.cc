#include "common/model/internal/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/model/internal/ops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace moesplit::model::internal {
namespace {

constexpr int64_t kLanes = 16;

// Sum of a[i] * b[i]: lane l sums i = l, l + 16, ...; the lanes are added
// pairwise; the tail (n % 16) is added in order.
inline float DotLanes(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int64_t w = kLanes / 2; w >= 1; w /= 2) {
    for (int64_t l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  float s = acc[0];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void SiluRow(const float* x, int64_t n, float* y) {
  const int64_t vectorised = n - n % kGgmlVectorWidth;
  SiluVector(x, nullptr, vectorised, y);
  for (int64_t i = vectorised; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void ConvSilu(const float* x, int64_t x_stride, int64_t n, int64_t channels, const float* w,
              int64_t kernel, const float* state_in, float* state_out, float* y,
              int64_t y_stride, const float* bias) {
  const int64_t taps = kernel - 1;
  // in(t, c): the window's j-th input for token t is in(t + j, c).
  auto in = [&](int64_t i, int64_t c) {
    return i < taps ? state_in[c * taps + i] : x[(i - taps) * x_stride + c];
  };
  for (int64_t t = 0; t < n; ++t) {
    float* row = y + t * y_stride;
    for (int64_t c = 0; c < channels; ++c) {
      float sum = 0.0f;  // ggml_compute_forward_ssm_conv_f32: float, taps in order
      for (int64_t j = 0; j < kernel; ++j) sum += in(t + j, c) * w[c * kernel + j];
      row[c] = bias == nullptr ? sum : sum + bias[c];
    }
    SiluRow(row, channels, row);
  }
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t j = 0; j < taps; ++j) state_out[c * taps + j] = in(n + j, c);
  }
}

void L2NormRows(float* x, int64_t rows, int64_t n, int64_t stride, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * stride;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(v[i] * v[i]);
    const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
    for (int64_t i = 0; i < n; ++i) v[i] *= scale;
  }
}

void SsmScan(const SsmScanHead& h, int64_t n, int64_t head_dim, int64_t d_state,
             const float* state_in, float* state_out) {
  const float* src = state_in;
  for (int64_t t = 0; t < n; ++t) {
    const float dt = h.dt[t * h.dt_stride];
    const float da = std::exp(dt * h.a);
    const float* x = h.x + t * h.x_stride;
    const float* b = h.b + t * h.bc_stride;
    const float* c = h.c + t * h.bc_stride;
    float* y = h.y + t * h.y_stride;
    for (int64_t i = 0; i < head_dim; ++i) {
      const float x_dt = x[i] * dt;
      const float* s0 = src + i * d_state;
      float* s = state_out + i * d_state;
      // The new state (ggml_compute_forward_ssm_scan_f32's arithmetic), and
      // state . C summed in DotLanes' fixed order (16 lanes, pairwise, then
      // the tail): one order for every instruction set, which the compiler
      // vectorises (ggml's own order depends on its SIMD width).
      float acc[kLanes] = {};
      int64_t j = 0;
      for (; j + kLanes <= d_state; j += kLanes) {
        for (int64_t l = 0; l < kLanes; ++l) {
          const float v = s0[j + l] * da + b[j + l] * x_dt;
          s[j + l] = v;
          acc[l] += v * c[j + l];
        }
      }
      for (int64_t w = kLanes / 2; w >= 1; w /= 2) {
        for (int64_t l = 0; l < w; ++l) acc[l] += acc[l + w];
      }
      float sum = acc[0];
      for (; j < d_state; ++j) {
        const float v = s0[j] * da + b[j] * x_dt;
        s[j] = v;
        sum += v * c[j];
      }
      y[i] = sum;
    }
    src = state_out;
  }
  if (n == 0) std::copy(state_in, state_in + head_dim * d_state, state_out);
}

float Softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

void DeltaRuleReference(const DeltaRuleHead& h, int64_t n, int64_t dim, const float* state_in,
                        float* state_out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const float* src = state_in;
  for (int64_t t = 0; t < n; ++t) {
    const float* q = h.q + t * h.q_stride;
    const float* k = h.k + t * h.k_stride;
    const float* v = h.v + t * h.v_stride;
    const float decay = std::exp(h.g[t * h.g_stride]);
    const float beta = h.beta[t * h.g_stride];
    float* o = h.out + t * h.out_stride;
    // Rows are independent: each one is decayed, corrected and read in turn
    // (ggml does each step over all rows; the arithmetic is the same).
    for (int64_t j = 0; j < dim; ++j) {
      const float* r_in = src + j * dim;
      float* r = state_out + j * dim;
      for (int64_t i = 0; i < dim; ++i) r[i] = r_in[i] * decay;
      const float delta = (v[j] - DotLanes(r, k, dim)) * beta;
      for (int64_t i = 0; i < dim; ++i) r[i] += k[i] * delta;
      o[j] = DotLanes(r, q, dim) * scale;
    }
    src = state_out;
  }
  if (n == 0) std::copy(state_in, state_in + dim * dim, state_out);
}

#if defined(__x86_64__)
namespace {

constexpr int64_t kRows = 4;  // rows per pass: independent chains hide the adds' latency

// At decode the state (64 KiB a head at dim 128) comes from DRAM and goes
// back: the caches held hundreds of MB of weights since the last token. So
// the SIMD forms (a) keep a row block's decayed rows between their two
// passes in a scratch block (kRows x dim floats, in L1) instead of in
// state_out, (b) write the last token's new state with non-temporal stores
// where state_out is aligned for them (no read of the lines first, no
// eviction of the weights being streamed), with a store fence before
// returning so that the thread that reads it next sees it, and (c) prefetch
// the rows kPrefetchBlocks row blocks ahead (past a head's last row, the
// next head's state: the layer's heads lie in one buffer). The arithmetic is
// unchanged (DeltaNetKernelTest); the decode step measured about twice as
// fast (deltanet_bench), see tests/bench/README.md.
constexpr int64_t kScratchDim = 512;  // the widest state row the scratch block holds
constexpr int64_t kPrefetchBlocks = 2;

// DotLanes' pairwise reduction of 16 lanes: [l] + [l + 8], then + 4, + 2, + 1.
inline float ReduceLanes(float* l) {
  for (int64_t w = kLanes / 2; w >= 1; w /= 2) {
    for (int64_t i = 0; i < w; ++i) l[i] += l[i + w];
  }
  return l[0];
}

__attribute__((target("avx2"))) inline float Reduce8(__m256 lo, __m256 hi) {
  alignas(32) float l[16];
  _mm256_store_ps(l, lo);
  _mm256_store_ps(l + 8, hi);
  return ReduceLanes(l);
}

__attribute__((target("avx512f,avx512dq,avx2"))) inline float Reduce16(__m512 acc) {
  alignas(64) float l[16];
  _mm512_store_ps(l, acc);
  return ReduceLanes(l);
}

// DeltaRuleReference's arithmetic, 16 lanes per register, kRows rows at a time.
// REQUIRES: dim % 16 == 0.
__attribute__((target("avx512f,avx512dq,avx2"))) void DeltaRuleAvx512(const DeltaRuleHead& h, int64_t n,
                                                             int64_t dim, const float* state_in,
                                                             float* state_out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const float* src = state_in;
  alignas(64) float scratch[kRows * kScratchDim];
  const bool use_scratch = dim <= kScratchDim;
  const bool aligned = (reinterpret_cast<uintptr_t>(state_out) & 63) == 0;
  const bool streams = n > 0 && use_scratch && aligned;  // the last token's state
  for (int64_t t = 0; t < n; ++t) {
    const float* q = h.q + t * h.q_stride;
    const float* k = h.k + t * h.k_stride;
    const float* v = h.v + t * h.v_stride;
    const __m512 decay = _mm512_set1_ps(std::exp(h.g[t * h.g_stride]));
    const float beta = h.beta[t * h.g_stride];
    float* o = h.out + t * h.out_stride;
    const bool stream = streams && t == n - 1;
    for (int64_t j = 0; j < dim; j += kRows) {
      // The decayed rows of this block between the passes (row stride dim).
      float* xr = use_scratch ? scratch : state_out + j * dim;
      // (An address past the buffer is harmless to a prefetch; computed as
      // an integer, not as a pointer past the end.)
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(src + j * dim) +
                              kPrefetchBlocks * kRows * dim * sizeof(float);
      for (int64_t c = 0; c < kRows * dim; c += 16) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + c * sizeof(float)), _MM_HINT_T0);
      }
      __m512 acc[kRows];
      for (int64_t r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t i = 0; i < dim; i += 16) {
        const __m512 kk = _mm512_loadu_ps(k + i);
        for (int64_t r = 0; r < kRows; ++r) {
          const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(src + (j + r) * dim + i), decay);
          _mm512_storeu_ps(xr + r * dim + i, x);
          acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(x, kk));
        }
      }
      __m512 delta[kRows];
      for (int64_t r = 0; r < kRows; ++r) {
        delta[r] = _mm512_set1_ps((v[j + r] - Reduce16(acc[r])) * beta);
        acc[r] = _mm512_setzero_ps();
      }
      for (int64_t i = 0; i < dim; i += 16) {
        const __m512 kk = _mm512_loadu_ps(k + i), qq = _mm512_loadu_ps(q + i);
        for (int64_t r = 0; r < kRows; ++r) {
          float* row = state_out + (j + r) * dim + i;
          const __m512 x =
              _mm512_add_ps(_mm512_loadu_ps(xr + r * dim + i), _mm512_mul_ps(kk, delta[r]));
          if (stream) {
            _mm512_stream_ps(row, x);
          } else {
            _mm512_storeu_ps(row, x);
          }
          acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(x, qq));
        }
      }
      for (int64_t r = 0; r < kRows; ++r) o[j + r] = Reduce16(acc[r]) * scale;
    }
    src = state_out;
  }
  if (streams) _mm_sfence();
  if (n == 0) std::copy(state_in, state_in + dim * dim, state_out);
}

// The same with lanes 0-7 and 8-15 in two AVX2 registers.
__attribute__((target("avx2"))) void DeltaRuleAvx2(const DeltaRuleHead& h, int64_t n,
                                                   int64_t dim, const float* state_in,
                                                   float* state_out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const float* src = state_in;
  alignas(64) float scratch[kRows * kScratchDim];
  const bool use_scratch = dim <= kScratchDim;
  const bool aligned = (reinterpret_cast<uintptr_t>(state_out) & 31) == 0;
  const bool streams = n > 0 && use_scratch && aligned;  // the last token's state
  for (int64_t t = 0; t < n; ++t) {
    const float* q = h.q + t * h.q_stride;
    const float* k = h.k + t * h.k_stride;
    const float* v = h.v + t * h.v_stride;
    const __m256 decay = _mm256_set1_ps(std::exp(h.g[t * h.g_stride]));
    const float beta = h.beta[t * h.g_stride];
    float* o = h.out + t * h.out_stride;
    const bool stream = streams && t == n - 1;
    for (int64_t j = 0; j < dim; j += kRows) {
      float* xr = use_scratch ? scratch : state_out + j * dim;
      // (An address past the buffer is harmless to a prefetch; computed as
      // an integer, not as a pointer past the end.)
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(src + j * dim) +
                              kPrefetchBlocks * kRows * dim * sizeof(float);
      for (int64_t c = 0; c < kRows * dim; c += 16) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + c * sizeof(float)), _MM_HINT_T0);
      }
      __m256 lo[kRows], hi[kRows];
      for (int64_t r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
      for (int64_t i = 0; i < dim; i += 16) {
        const __m256 k0 = _mm256_loadu_ps(k + i), k1 = _mm256_loadu_ps(k + i + 8);
        for (int64_t r = 0; r < kRows; ++r) {
          const float* in = src + (j + r) * dim + i;
          float* out = xr + r * dim + i;
          const __m256 x0 = _mm256_mul_ps(_mm256_loadu_ps(in), decay);
          const __m256 x1 = _mm256_mul_ps(_mm256_loadu_ps(in + 8), decay);
          _mm256_storeu_ps(out, x0);
          _mm256_storeu_ps(out + 8, x1);
          lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(x0, k0));
          hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(x1, k1));
        }
      }
      __m256 delta[kRows];
      for (int64_t r = 0; r < kRows; ++r) {
        delta[r] = _mm256_set1_ps((v[j + r] - Reduce8(lo[r], hi[r])) * beta);
        lo[r] = hi[r] = _mm256_setzero_ps();
      }
      for (int64_t i = 0; i < dim; i += 16) {
        const __m256 k0 = _mm256_loadu_ps(k + i), k1 = _mm256_loadu_ps(k + i + 8);
        const __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
        for (int64_t r = 0; r < kRows; ++r) {
          const float* x = xr + r * dim + i;
          float* row = state_out + (j + r) * dim + i;
          const __m256 x0 = _mm256_add_ps(_mm256_loadu_ps(x), _mm256_mul_ps(k0, delta[r]));
          const __m256 x1 = _mm256_add_ps(_mm256_loadu_ps(x + 8), _mm256_mul_ps(k1, delta[r]));
          if (stream) {
            _mm256_stream_ps(row, x0);
            _mm256_stream_ps(row + 8, x1);
          } else {
            _mm256_storeu_ps(row, x0);
            _mm256_storeu_ps(row + 8, x1);
          }
          lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(x0, q0));
          hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(x1, q1));
        }
      }
      for (int64_t r = 0; r < kRows; ++r) {
        o[j + r] = Reduce8(lo[r], hi[r]) * scale;
      }
    }
    src = state_out;
  }
  if (streams) _mm_sfence();
  if (n == 0) std::copy(state_in, state_in + dim * dim, state_out);
}

}  // namespace
#endif

void DeltaRule(const DeltaRuleHead& h, int64_t n, int64_t dim, const float* state_in,
               float* state_out, DeltaRuleForm form) {
#if defined(__x86_64__)
  static const bool kAvx2 = __builtin_cpu_supports("avx2");
  static const bool kAvx512 =
      kAvx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  if (dim % 16 == 0 && dim > 0) {
    if (kAvx512 && form == DeltaRuleForm::kAuto) {
      return DeltaRuleAvx512(h, n, dim, state_in, state_out);
    }
    if (kAvx2) return DeltaRuleAvx2(h, n, dim, state_in, state_out);
  }
#endif
  DeltaRuleReference(h, n, dim, state_in, state_out);
}

}  // namespace moesplit::model::internal
