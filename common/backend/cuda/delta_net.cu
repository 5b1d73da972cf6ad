// The gated-DeltaNet ops (causal conv + SiLU, L2 norm, gates, the delta rule,
// the gated RMSNorm) and the gated attention's query/gate split and output
// gate. Shapes, math and summation orders: internal/cuda_raw.h.
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/norm.cuh"

namespace moesplit::cuda::raw {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n, int per_block = kThreads) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

#define MS_GRID_LOOP(i, n)                                                           \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ float Silu(float s) { return s / (1.0f + expf(-s)); }

// One thread per channel; the window of the last taps inputs in registers.
__global__ void ConvSiluKernel(ConvParams p) {
  const int taps = p.kernel - 1;
  MS_GRID_LOOP(c, p.channels) {
    float win[kMaxConvKernel], w[kMaxConvKernel];
#pragma unroll
    for (int j = 0; j < kMaxConvKernel; ++j) {
      w[j] = j < p.kernel ? p.w[c * p.kernel + j] : 0.0f;
      win[j] = j < taps && p.state_in != nullptr ? p.state_in[c * taps + j] : 0.0f;
    }
    for (int64_t t = 0; t < p.n_tok; ++t) {
      const float in = p.x[t * p.stride + c];
      float sum = 0.0f;
      float last = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxConvKernel; ++j) {
        if (j < taps) sum += win[j] * w[j];
        if (j == taps) last = w[j];
      }
      sum += in * last;
#pragma unroll
      for (int j = 0; j + 1 < kMaxConvKernel; ++j) {
        if (j + 1 < taps) win[j] = win[j + 1];
      }
#pragma unroll
      for (int j = 0; j < kMaxConvKernel; ++j) {
        if (j == taps - 1) win[j] = in;
      }
      p.y[t * p.stride + c] = Silu(sum);
    }
#pragma unroll
    for (int j = 0; j < kMaxConvKernel; ++j) {
      if (j < taps) p.state_out[c * taps + j] = win[j];
    }
  }
}

// One warp per row (4 rows per block of 128 threads).
__global__ void L2NormHeadsKernel(float* x, int64_t n_tok, int64_t n_heads, int64_t dim,
                                  int64_t stride, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  if (row >= n_tok * n_heads) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  float* v = x + (row / n_heads) * stride + (row % n_heads) * dim;
  double s = 0.0;
  for (int64_t i = lane; i < dim; i += 32) s += static_cast<double>(v[i] * v[i]);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
  const float scale = 1.0f / fmaxf(sqrtf(static_cast<float>(s)), eps);
  for (int64_t i = lane; i < dim; i += 32) v[i] *= scale;
}

__global__ void DeltaNetGatesKernel(float* beta, float* g, const float* dt_bias, const float* a,
                                    int64_t n, int64_t n_heads) {
  MS_GRID_LOOP(i, n) {
    const int64_t h = i % n_heads;
    beta[i] = 1.0f / (1.0f + expf(-beta[i]));
    const float s = g[i] + dt_bias[h];
    g[i] = (s > 20.0f ? s : logf(1.0f + expf(s))) * a[h];
  }
}

// Block (head, group of 8 rows); 16 lanes per state row j, lane l holding
// the row's elements l, l + 16, ... (NPL of them) in registers over all the
// tokens. The butterfly over offsets 8, 4, 2, 1 stays inside each half-warp.
constexpr int kRowsPerBlock = 8;
template <int NPL>
__global__ void DeltaRuleKernel(DeltaRuleParams p) {
  const int h = blockIdx.x;
  const int j = blockIdx.y * kRowsPerBlock + threadIdx.x / 16;
  const int lane = threadIdx.x & 15;
  const int dim = p.dim, n_v = p.n_v_heads;
  const int kh = p.grouped_heads ? h / (p.n_v_heads / p.n_k_heads) : h % p.n_k_heads;
  const int npl = dim / 16;
  const float scale = 1.0f / sqrtf(static_cast<float>(dim));
  const int64_t off = (static_cast<int64_t>(h) * dim + j) * dim;
  float r[NPL], kk[NPL], qq[NPL];
#pragma unroll
  for (int u = 0; u < NPL; ++u) {
    r[u] = u < npl && p.state_in != nullptr ? p.state_in[off + lane + 16 * u] : 0.0f;
  }
  for (int64_t t = 0; t < p.n_tok; ++t) {
    const float* base = p.qkv + t * p.stride;
    const float* q = base + static_cast<int64_t>(kh) * dim;
    const float* k = base + static_cast<int64_t>(p.n_k_heads + kh) * dim;
    const float v = base[static_cast<int64_t>(2 * p.n_k_heads + h) * dim + j];
    const float decay = expf(p.g[t * n_v + h]);
    const float beta = p.beta[t * n_v + h];
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < NPL; ++u) {
      if (u < npl) {
        kk[u] = k[lane + 16 * u];
        qq[u] = q[lane + 16 * u];
        r[u] = r[u] * decay;
        acc += r[u] * kk[u];
      }
    }
    for (int o = 8; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    const float delta = (v - acc) * beta;
    float acc2 = 0.0f;
#pragma unroll
    for (int u = 0; u < NPL; ++u) {
      if (u < npl) {
        r[u] += kk[u] * delta;
        acc2 += r[u] * qq[u];
      }
    }
    for (int o = 8; o > 0; o >>= 1) acc2 += __shfl_xor_sync(0xFFFFFFFFu, acc2, o);
    if (lane == 0) p.out[(t * n_v + h) * dim + j] = acc2 * scale;
  }
  // Every lane has read its part of state_in (before the loop): in-place
  // is safe, each row belongs to one group.
#pragma unroll
  for (int u = 0; u < NPL; ++u) {
    if (u < npl) p.state_out[off + lane + 16 * u] = r[u];
  }
}

__global__ void GatedRmsNormKernel(const float* x, const float* z, const float* w, int64_t d,
                                   float eps, float* y) {
  const float* xr = x + blockIdx.x * d;
  const float* zr = z + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  const float scale = dev::RmsScale(xr, d, eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    yr[i] = ((xr[i] * scale) * w[i]) * Silu(zr[i]);
  }
}

__global__ void SplitQueryGateKernel(const float* qg, int64_t rows, int64_t hd, float* q) {
  MS_GRID_LOOP(i, rows * hd) q[i] = qg[(i / hd) * 2 * hd + i % hd];
}

__global__ void ApplyHeadGateKernel(float* attn, const float* qg, int64_t rows, int64_t hd) {
  MS_GRID_LOOP(i, rows * hd) {
    attn[i] *= 1.0f / (1.0f + expf(-qg[(i / hd) * 2 * hd + hd + i % hd]));
  }
}

CallResult Launched(const char* name) { return {cudaGetLastError(), name}; }

}  // namespace

CallResult ConvSilu(const ConvParams& p, void* stream) {
  if (p.n_tok <= 0 || p.channels <= 0) return {};
  if (p.kernel < 2 || p.kernel > kMaxConvKernel || p.stride < p.channels) {
    return {cudaErrorInvalidValue, "ConvSilu: kernel size or stride"};
  }
  ConvSiluKernel<<<Blocks(p.channels, 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return Launched("ConvSiluKernel<<<>>>");
}

CallResult L2NormHeads(float* x, int64_t n_tok, int64_t n_heads, int64_t dim, int64_t stride,
                       float eps, void* stream) {
  if (n_tok <= 0 || n_heads <= 0 || dim <= 0) return {};
  if (stride < n_heads * dim) return {cudaErrorInvalidValue, "L2NormHeads: stride"};
  const int64_t rows = n_tok * n_heads;
  L2NormHeadsKernel<<<static_cast<unsigned>((rows + 3) / 4), 128, 0,
                      static_cast<cudaStream_t>(stream)>>>(x, n_tok, n_heads, dim, stride, eps);
  return Launched("L2NormHeadsKernel<<<>>>");
}

CallResult DeltaNetGates(float* beta, float* g, const float* dt_bias, const float* a,
                         int64_t n_tok, int64_t n_heads, void* stream) {
  const int64_t n = n_tok * n_heads;
  if (n <= 0) return {};
  DeltaNetGatesKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      beta, g, dt_bias, a, n, n_heads);
  return Launched("DeltaNetGatesKernel<<<>>>");
}

CallResult DeltaRule(const DeltaRuleParams& p, void* stream) {
  if (p.n_tok <= 0) return {};
  if (p.dim < 16 || p.dim % 16 != 0 || p.dim > kMaxDeltaDim || p.n_k_heads < 1 ||
      p.n_v_heads < 1) {
    return {cudaErrorInvalidValue, "DeltaRule: head shape"};
  }
  const dim3 grid(static_cast<unsigned>(p.n_v_heads), static_cast<unsigned>(p.dim / kRowsPerBlock));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int npl = p.dim / 16;
  if (npl <= 2) {
    DeltaRuleKernel<2><<<grid, 16 * kRowsPerBlock, 0, s>>>(p);
  } else if (npl <= 4) {
    DeltaRuleKernel<4><<<grid, 16 * kRowsPerBlock, 0, s>>>(p);
  } else if (npl <= 8) {
    DeltaRuleKernel<8><<<grid, 16 * kRowsPerBlock, 0, s>>>(p);
  } else {
    DeltaRuleKernel<16><<<grid, 16 * kRowsPerBlock, 0, s>>>(p);
  }
  return Launched("DeltaRuleKernel<<<>>>");
}

CallResult GatedRmsNorm(const float* x, const float* z, const float* w, int64_t rows, int64_t d,
                        float eps, float* y, void* stream) {
  if (rows <= 0 || d <= 0) return {};
  GatedRmsNormKernel<<<static_cast<unsigned>(rows), dev::kNormThreads, 0,
                       static_cast<cudaStream_t>(stream)>>>(x, z, w, d, eps, y);
  return Launched("GatedRmsNormKernel<<<>>>");
}

CallResult SplitQueryGate(const float* qg, int64_t n_tok, int64_t n_head, int64_t hd, float* q,
                          void* stream) {
  const int64_t rows = n_tok * n_head;
  if (rows <= 0 || hd <= 0) return {};
  SplitQueryGateKernel<<<Blocks(rows * hd), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      qg, rows, hd, q);
  return Launched("SplitQueryGateKernel<<<>>>");
}

CallResult ApplyHeadGate(float* attn, const float* qg, int64_t rows, int64_t hd, void* stream) {
  if (rows <= 0 || hd <= 0) return {};
  ApplyHeadGateKernel<<<Blocks(rows * hd), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      attn, qg, rows, hd);
  return Launched("ApplyHeadGateKernel<<<>>>");
}

}  // namespace moesplit::cuda::raw
