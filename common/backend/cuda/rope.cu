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

}  // namespace

CallResult RopeNeox(float* x, int64_t n_tok, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const float* cos_sin, void* stream) {
  if (n_tok <= 0 || n_heads <= 0 || n_rot < 2) return {};
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_tok));
  RopeNeoxKernel<<<grid, 64, 0, static_cast<cudaStream_t>(stream)>>>(x, n_heads, head_dim,
                                                                     n_rot / 2, cos_sin);
  return {cudaGetLastError(), "RopeNeoxKernel<<<>>>"};
}

}  // namespace moesplit::cuda::raw
