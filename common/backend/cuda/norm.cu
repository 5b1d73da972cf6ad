// RMSNorm over rows (also the per-head QK-norm: rows = tokens x heads).
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

constexpr int kNormThreads = 256;

__global__ void RmsNormKernel(const float* x, const float* w, int64_t d, float eps, float* y) {
  __shared__ double partial[kNormThreads / 32];
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sum += static_cast<double>(xr[i]) * xr[i];
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < kNormThreads / 32; ++i) total += partial[i];
  const float mean = static_cast<float>(total / static_cast<double>(d));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = xr[i] * scale;
    yr[i] = w != nullptr ? v * w[i] : v;
  }
}

}  // namespace

CallResult RmsNorm(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y,
                   void* stream) {
  if (rows <= 0) return {};
  // In-place use: every thread reads its elements before the barrier and
  // writes only its own elements after it.
  RmsNormKernel<<<static_cast<unsigned>(rows), kNormThreads, 0,
                  static_cast<cudaStream_t>(stream)>>>(x, w, d, eps, y);
  return {cudaGetLastError(), "RmsNormKernel<<<>>>"};
}

}  // namespace moesplit::cuda::raw
