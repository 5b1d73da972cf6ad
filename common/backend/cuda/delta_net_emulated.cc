// The host emulation (raw_emulated.cc's contract) of delta_net.cu: the
// gated-DeltaNet ops and the gated attention's gate, with the kernels'
// orders of summation (one thread per conv channel, taps in order; a warp's
// lane-strided double sums for the L2 norm; 16 lanes per state row for the
// delta rule; RmsNorm's 256-thread double sums). Host expf / logf stand in
// for the device's.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/emulated.h"

namespace moesplit::cuda::raw {
namespace {

constexpr int kIllegalAddress = 700;  // cudaErrorIllegalAddress
constexpr int kInvalidValue = 1;      // cudaErrorInvalidValue

struct Extents {
  bool ok = true;
  Extents& Floats(const void* p, int64_t n) {
    if (ok && n > 0 && !EmulatedOnDevice(p, static_cast<uint64_t>(n) * 4)) ok = false;
    return *this;
  }
};
CallResult Illegal(const char* kernel) { return {kIllegalAddress, kernel}; }

// The xor butterfly's result (every lane holds the same bits): lanes added
// pairwise at offsets n/2, n/4, ..., 1; v is overwritten.
template <typename T>
T LaneSum(T* v, int n) {
  for (int off = n / 2; off > 0; off >>= 1) {
    for (int l = 0; l < off; ++l) v[l] = v[l] + v[l + off];
  }
  return v[0];
}

// The extent of rows of `dim` at stride `stride` (rows x cols of them).
int64_t StridedExtent(int64_t n_rows, int64_t stride, int64_t row_floats) {
  return n_rows <= 0 ? 0 : (n_rows - 1) * stride + row_floats;
}

float Silu(float s) { return s / (1.0f + expf(-s)); }

}  // namespace

CallResult ConvSilu(const ConvParams& p, void* stream) {
  if (p.n_tok <= 0 || p.channels <= 0) return {};
  if (p.kernel < 2 || p.kernel > kMaxConvKernel || p.stride < p.channels) {
    return {kInvalidValue, "ConvSilu: kernel size or stride"};
  }
  const int taps = p.kernel - 1;
  const int64_t extent = StridedExtent(p.n_tok, p.stride, p.channels);
  if (!Extents()
           .Floats(p.x, extent)
           .Floats(p.y, extent)
           .Floats(p.w, p.channels * p.kernel)
           .Floats(p.state_in, p.state_in ? p.channels * taps : 0)
           .Floats(p.state_out, p.channels * taps)
           .ok) {
    return Illegal("ConvSiluKernel<<<>>>");
  }
  float win[kMaxConvKernel];
  for (int64_t c = 0; c < p.channels; ++c) {
    const float* w = p.w + c * p.kernel;
    for (int j = 0; j < taps; ++j) win[j] = p.state_in ? p.state_in[c * taps + j] : 0.0f;
    for (int64_t t = 0; t < p.n_tok; ++t) {
      const float in = p.x[t * p.stride + c];
      float sum = 0.0f;
      for (int j = 0; j < taps; ++j) sum += win[j] * w[j];
      sum += in * w[taps];
      for (int j = 0; j + 1 < taps; ++j) win[j] = win[j + 1];
      win[taps - 1] = in;
      p.y[t * p.stride + c] = Silu(sum);
    }
    for (int j = 0; j < taps; ++j) p.state_out[c * taps + j] = win[j];
  }
  return {};
}

CallResult L2NormHeads(float* x, int64_t n_tok, int64_t n_heads, int64_t dim, int64_t stride,
                       float eps, void* stream) {
  if (n_tok <= 0 || n_heads <= 0 || dim <= 0) return {};
  if (stride < n_heads * dim) return {kInvalidValue, "L2NormHeads: stride"};
  if (!Extents().Floats(x, StridedExtent(n_tok, stride, n_heads * dim)).ok) {
    return Illegal("L2NormHeadsKernel<<<>>>");
  }
  double lanes[32];
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * stride + h * dim;
      for (int l = 0; l < 32; ++l) {
        double s = 0.0;
        for (int64_t i = l; i < dim; i += 32) s += static_cast<double>(v[i] * v[i]);
        lanes[l] = s;
      }
      const double sum = LaneSum(lanes, 32);
      const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
      for (int64_t i = 0; i < dim; ++i) v[i] *= scale;
    }
  }
  return {};
}

CallResult DeltaNetGates(float* beta, float* g, const float* dt_bias, const float* a,
                         int64_t n_tok, int64_t n_heads, void* stream) {
  if (n_tok * n_heads <= 0) return {};
  if (!Extents()
           .Floats(beta, n_tok * n_heads)
           .Floats(g, n_tok * n_heads)
           .Floats(dt_bias, n_heads)
           .Floats(a, n_heads)
           .ok) {
    return Illegal("DeltaNetGatesKernel<<<>>>");
  }
  for (int64_t i = 0; i < n_tok * n_heads; ++i) {
    const int64_t h = i % n_heads;
    beta[i] = 1.0f / (1.0f + expf(-beta[i]));
    const float s = g[i] + dt_bias[h];
    g[i] = (s > 20.0f ? s : logf(1.0f + expf(s))) * a[h];
  }
  return {};
}

CallResult DeltaRule(const DeltaRuleParams& p, void* stream) {
  if (p.n_tok <= 0) return {};
  const int dim = p.dim;
  if (dim < 16 || dim % 16 != 0 || dim > kMaxDeltaDim || p.n_k_heads < 1 || p.n_v_heads < 1) {
    return {kInvalidValue, "DeltaRule: head shape"};
  }
  const int64_t row = static_cast<int64_t>(2 * p.n_k_heads + p.n_v_heads) * dim;
  const int64_t state = static_cast<int64_t>(p.n_v_heads) * dim * dim;
  if (p.stride < row ||
      !Extents()
           .Floats(p.qkv, StridedExtent(p.n_tok, p.stride, row))
           .Floats(p.g, p.n_tok * p.n_v_heads)
           .Floats(p.beta, p.n_tok * p.n_v_heads)
           .Floats(p.out, p.n_tok * p.n_v_heads * dim)
           .Floats(p.state_in, p.state_in ? state : 0)
           .Floats(p.state_out, state)
           .ok) {
    return Illegal("DeltaRuleKernel<<<>>>");
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> r(dim);
  float lanes[16];
  // One row (head, j) at a time, as one 16-lane group of the kernel: the
  // row in registers (here r), the tokens in order.
  for (int h = 0; h < p.n_v_heads; ++h) {
    const int kh = p.grouped_heads ? h / (p.n_v_heads / p.n_k_heads) : h % p.n_k_heads;
    for (int j = 0; j < dim; ++j) {
      const int64_t off = (static_cast<int64_t>(h) * dim + j) * dim;
      for (int i = 0; i < dim; ++i) r[i] = p.state_in ? p.state_in[off + i] : 0.0f;
      for (int64_t t = 0; t < p.n_tok; ++t) {
        const float* base = p.qkv + t * p.stride;
        const float* q = base + static_cast<int64_t>(kh) * dim;
        const float* k = base + static_cast<int64_t>(p.n_k_heads + kh) * dim;
        const float* v = base + static_cast<int64_t>(2 * p.n_k_heads + h) * dim;
        const float decay = expf(p.g[t * p.n_v_heads + h]);
        const float beta = p.beta[t * p.n_v_heads + h];
        for (int l = 0; l < 16; ++l) {
          float acc = 0.0f;
          for (int i = l; i < dim; i += 16) {
            r[i] = r[i] * decay;
            acc += r[i] * k[i];
          }
          lanes[l] = acc;
        }
        const float delta = (v[j] - LaneSum(lanes, 16)) * beta;
        for (int l = 0; l < 16; ++l) {
          float acc = 0.0f;
          for (int i = l; i < dim; i += 16) {
            r[i] += k[i] * delta;
            acc += r[i] * q[i];
          }
          lanes[l] = acc;
        }
        p.out[(t * p.n_v_heads + h) * dim + j] = LaneSum(lanes, 16) * scale;
      }
      for (int i = 0; i < dim; ++i) p.state_out[off + i] = r[i];
    }
  }
  return {};
}

CallResult GatedRmsNorm(const float* x, const float* z, const float* w, int64_t rows, int64_t d,
                        float eps, float* y, void* stream) {
  if (rows <= 0 || d <= 0) return {};
  if (!Extents().Floats(x, rows * d).Floats(z, rows * d).Floats(w, d).Floats(y, rows * d).ok) {
    return Illegal("GatedRmsNormKernel<<<>>>");
  }
  constexpr int kThreads = 256;  // norm.cuh's kNormThreads
  double partial[kThreads];
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    for (int th = 0; th < kThreads; ++th) {
      double sum = 0.0;
      for (int64_t i = th; i < d; i += kThreads) sum += static_cast<double>(xr[i]) * xr[i];
      partial[th] = sum;
    }
    double total = 0.0;
    for (int wp = 0; wp < kThreads / 32; ++wp) total += LaneSum(partial + 32 * wp, 32);
    const float mean = static_cast<float>(total / static_cast<double>(d));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < d; ++i) {
      const float zi = z[r * d + i];
      y[r * d + i] = ((xr[i] * scale) * w[i]) * Silu(zi);
    }
  }
  return {};
}

CallResult SplitQueryGate(const float* qg, int64_t n_tok, int64_t n_head, int64_t hd, float* q,
                          void* stream) {
  const int64_t rows = n_tok * n_head;
  if (rows <= 0 || hd <= 0) return {};
  if (!Extents().Floats(qg, rows * 2 * hd).Floats(q, rows * hd).ok) {
    return Illegal("SplitQueryGateKernel<<<>>>");
  }
  for (int64_t r = 0; r < rows; ++r) std::copy(qg + r * 2 * hd, qg + r * 2 * hd + hd, q + r * hd);
  return {};
}

CallResult ApplyHeadGate(float* attn, const float* qg, int64_t rows, int64_t hd, void* stream) {
  if (rows <= 0 || hd <= 0) return {};
  if (!Extents().Floats(attn, rows * hd).Floats(qg, rows * 2 * hd).ok) {
    return Illegal("ApplyHeadGateKernel<<<>>>");
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hd; ++i) {
      attn[r * hd + i] *= 1.0f / (1.0f + expf(-qg[r * 2 * hd + hd + i]));
    }
  }
  return {};
}

}  // namespace moesplit::cuda::raw
