// RMSNorm over rows (also the per-head QK-norm: rows = tokens x heads).
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/norm.cuh"

namespace moesplit::cuda::raw {
namespace {

using dev::kNormThreads;

__global__ void RmsNormKernel(const float* x, int64_t x_stride, const float* w, int64_t d,
                              float eps, float* y, int64_t y_stride) {
  const float* xr = x + blockIdx.x * x_stride;
  float* yr = y + blockIdx.x * y_stride;
  const float scale = dev::RmsScale(xr, d, eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = xr[i] * scale;
    yr[i] = w != nullptr ? v * w[i] : v;
  }
}

}  // namespace

CallResult RmsNormStrided(const float* x, int64_t x_stride, const float* w, int64_t rows,
                          int64_t d, float eps, float* y, int64_t y_stride, void* stream) {
  if (rows <= 0) return {};
  // In-place use: every thread reads its elements before the barrier and
  // writes only its own elements after it.
  RmsNormKernel<<<static_cast<unsigned>(rows), kNormThreads, 0,
                  static_cast<cudaStream_t>(stream)>>>(x, x_stride, w, d, eps, y, y_stride);
  return {cudaGetLastError(), "RmsNormKernel<<<>>>"};
}

CallResult RmsNorm(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y,
                   void* stream) {
  return RmsNormStrided(x, d, w, rows, d, eps, y, d, stream);
}

}  // namespace moesplit::cuda::raw
