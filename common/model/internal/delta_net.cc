#include "common/model/internal/delta_net.h"

#include <algorithm>
#include <cmath>

#include "common/model/internal/ops.h"

// The kernels are written as independent 16-lane loops; each clone below is
// the same arithmetic (no contraction: the library builds with
// -ffp-contract=off) vectorised for its instruction set.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MOESPLIT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MOESPLIT_CLONES
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
  for (int64_t i = 0; i < vectorised; ++i) y[i] = x[i] / (1.0f + GgmlVExpf(0.0f - x[i]));
  for (int64_t i = vectorised; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void ConvSilu(const float* x, int64_t x_stride, int64_t n, int64_t channels, const float* w,
              int64_t kernel, const float* state_in, float* state_out, float* y,
              int64_t y_stride) {
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
      row[c] = sum;
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

float Softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

MOESPLIT_CLONES
void DeltaRule(const DeltaRuleHead& h, int64_t n, int64_t dim, const float* state_in,
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

}  // namespace moesplit::model::internal
