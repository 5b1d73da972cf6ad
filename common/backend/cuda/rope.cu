// NEOX rotary position embedding with a host-computed angle table.
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

__global__ void RopeNeoxKernel(float* x, int64_t n_heads, int64_t head_dim, int64_t half,
                               const float* cos_sin) {
  const int64_t t = blockIdx.y;
  const int64_t h = blockIdx.x;
  float* v = x + (t * n_heads + h) * head_dim;
  const float* cs = cos_sin + t * half * 2;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c - x1 * s;
    v[i + half] = x0 * s + x1 * c;
  }
}

constexpr int kNormRopeThreads = 256;

// Block (h, t): row h of token t among the n_head query heads then the
// n_head_kv key heads: RmsNorm with the side's weight (skipped when null;
// the arithmetic of RmsNormKernel in norm.cu), then NEOX RoPE as
// RopeNeoxKernel.
__global__ void QkNormRopeKernel(float* q, const float* qw, int64_t n_head, float* k,
                                 const float* kw, int64_t n_head_kv, int64_t hd, float eps,
                                 int64_t half, const float* cos_sin) {
  __shared__ double partial[kNormRopeThreads / 32];
  const int64_t t = blockIdx.y;
  const int64_t h = blockIdx.x;
  const bool is_q = h < n_head;
  float* v = is_q ? q + (t * n_head + h) * hd : k + (t * n_head_kv + (h - n_head)) * hd;
  const float* w = is_q ? qw : kw;
  if (w != nullptr) {  // uniform across the block
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) sum += static_cast<double>(v[i]) * v[i];
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
    __syncthreads();
    double total = 0.0;
    for (int i = 0; i < kNormRopeThreads / 32; ++i) total += partial[i];
    const float mean = static_cast<float>(total / static_cast<double>(hd));
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) v[i] = v[i] * scale * w[i];
    __syncthreads();  // RoPE reads elements other threads wrote
  }
  const float* cs = cos_sin + t * half * 2;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c - x1 * s;
    v[i + half] = x0 * s + x1 * c;
  }
}

}  // namespace

CallResult QkNormRope(float* q, const float* q_norm, int64_t n_head, float* k,
                      const float* k_norm, int64_t n_head_kv, int64_t n_tok, int64_t head_dim,
                      float eps, int64_t n_rot, const float* cos_sin, void* stream) {
  if (n_tok <= 0) return {};
  const dim3 grid(static_cast<unsigned>(n_head + n_head_kv), static_cast<unsigned>(n_tok));
  QkNormRopeKernel<<<grid, kNormRopeThreads, 0, static_cast<cudaStream_t>(stream)>>>(
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

}  // namespace moesplit::cuda::raw
