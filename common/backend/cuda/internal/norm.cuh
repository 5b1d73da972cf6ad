// Device helpers shared by the norm and RoPE kernels (nvcc only).
#pragma once

#include <cstdint>

namespace moesplit::cuda::raw::dev {

constexpr int kNormThreads = 256;

// 1 / sqrt(mean(x^2) + eps) of the d values at x: a block of kNormThreads
// threads, squares summed in double (thread-strided, then the warp, then the
// warps in order), as the CPU reference. Ends with a barrier; every thread
// gets the same value.
__device__ __forceinline__ float RmsScale(const float* x, int64_t d, float eps) {
  __shared__ double partial[kNormThreads / 32];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sum += static_cast<double>(x[i]) * x[i];
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < kNormThreads / 32; ++i) total += partial[i];
  const float mean = static_cast<float>(total / static_cast<double>(d));
  return 1.0f / sqrtf(mean + eps);
}

// NEOX RoPE of one head in place: pairs (i, i + half) rotated by
// cs[i] = {cos, sin}, the block's threads striding over i.
__device__ __forceinline__ void RotateNeox(float* v, const float* cs, int64_t half) {
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c - x1 * s;
    v[i + half] = x0 * s + x1 * c;
  }
}

}  // namespace moesplit::cuda::raw::dev
