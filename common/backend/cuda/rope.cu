// NEOX and NORM rotary position embedding with a host-computed angle table.
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/norm.cuh"

namespace moesplit::cuda::raw {
namespace {

// Block (h, t): pairs (2i, 2i + 1) of head h of token t, threads striding
// over i.
__global__ void RopeNormKernel(float* x, int64_t tok_stride, int64_t head_stride, int64_t half,
                               const float* cos_sin) {
  const int64_t t = blockIdx.y;
  float* v = x + t * tok_stride + blockIdx.x * head_stride;
  const float* cs = cos_sin + t * half * 2;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x0 * s + x1 * c;
  }
}

__global__ void RopeNeoxKernel(float* x, int64_t n_heads, int64_t head_dim, int64_t half,
                               const float* cos_sin) {
  const int64_t t = blockIdx.y;
  const int64_t h = blockIdx.x;
  dev::RotateNeox(x + (t * n_heads + h) * head_dim, cos_sin + t * half * 2, half);
}

// Block (h, t): row h of token t among the n_head query heads then the
// n_head_kv key heads: RmsNorm with the side's weight (skipped when null;
// as RmsNormKernel), then NEOX RoPE as RopeNeoxKernel.
__global__ void QkNormRopeKernel(float* q, const float* qw, int64_t n_head, float* k,
                                 const float* kw, int64_t n_head_kv, int64_t hd, float eps,
                                 int64_t half, const float* cos_sin) {
  const int64_t t = blockIdx.y;
  const int64_t h = blockIdx.x;
  const bool is_q = h < n_head;
  float* v = is_q ? q + (t * n_head + h) * hd : k + (t * n_head_kv + (h - n_head)) * hd;
  const float* w = is_q ? qw : kw;
  if (w != nullptr) {  // uniform across the block
    const float scale = dev::RmsScale(v, hd, eps);
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) v[i] = v[i] * scale * w[i];
    __syncthreads();  // RoPE reads elements other threads wrote
  }
  dev::RotateNeox(v, cos_sin + t * half * 2, half);
}

}  // namespace

CallResult QkNormRope(float* q, const float* q_norm, int64_t n_head, float* k,
                      const float* k_norm, int64_t n_head_kv, int64_t n_tok, int64_t head_dim,
                      float eps, int64_t n_rot, const float* cos_sin, void* stream) {
  if (n_tok <= 0) return {};
  const dim3 grid(static_cast<unsigned>(n_head + n_head_kv), static_cast<unsigned>(n_tok));
  QkNormRopeKernel<<<grid, dev::kNormThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      q, q_norm, n_head, k, k_norm, n_head_kv, head_dim, eps, n_rot / 2, cos_sin);
  return {cudaGetLastError(), "QkNormRopeKernel<<<>>>"};
}

CallResult RopeNeox(float* x, int64_t n_tok, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const float* cos_sin, void* stream) {
  if (n_tok <= 0 || n_heads <= 0 || n_rot < 2) return {};
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_tok));
  RopeNeoxKernel<<<grid, 64, 0, static_cast<cudaStream_t>(stream)>>>(x, n_heads, head_dim,
                                                                     n_rot / 2, cos_sin);
  return {cudaGetLastError(), "RopeNeoxKernel<<<>>>"};
}

CallResult RopeNorm(float* x, int64_t n_tok, int64_t tok_stride, int64_t n_heads,
                    int64_t head_stride, int64_t n_rot, const float* cos_sin, void* stream) {
  if (n_tok <= 0 || n_heads <= 0 || n_rot < 2) return {};
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_tok));
  RopeNormKernel<<<grid, 64, 0, static_cast<cudaStream_t>(stream)>>>(x, tok_stride, head_stride,
                                                                     n_rot / 2, cos_sin);
  return {cudaGetLastError(), "RopeNormKernel<<<>>>"};
}

}  // namespace moesplit::cuda::raw
