// Element-wise ops of the forward pass: bias, residual add, SwiGLU, the
// shared expert's sigmoid gate.
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

#define MS_GRID_LOOP(i, n)                                                           \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void AddBiasKernel(float* y, const float* b, int64_t rows, int64_t cols) {
  MS_GRID_LOOP(i, rows * cols) y[i] += b[i % cols];
}
__global__ void AddKernel(float* x, const float* y, int64_t n) {
  MS_GRID_LOOP(i, n) x[i] += y[i];
}
__global__ void SwiGluKernel(const float* gate, const float* up, int64_t n, float* out) {
  MS_GRID_LOOP(i, n) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}
__global__ void SwiGluOaiKernel(const float* gate, const float* up, int64_t n, float alpha,
                                float limit, float* out) {
  MS_GRID_LOOP(i, n) {
    const float x = fminf(gate[i], limit);
    const float y = fminf(fmaxf(up[i], -limit), limit);
    out[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
  }
}
__global__ void ScaleRowsBySigmoidKernel(float* y, const float* g, int64_t rows, int64_t cols) {
  MS_GRID_LOOP(i, rows * cols) y[i] *= 1.0f / (1.0f + expf(-g[i / cols]));
}

__global__ void GatherRowsKernel(const float* src, const int32_t* rows, int64_t n, int64_t d,
                                 float* dst) {
  MS_GRID_LOOP(i, n * d) dst[i] = src[static_cast<int64_t>(rows[i / d]) * d + i % d];
}
__global__ void ScatterAddScaledKernel(float* dst, const float* src, const int32_t* rows,
                                       const float* w, int64_t n, int64_t d) {
  MS_GRID_LOOP(i, n * d) dst[static_cast<int64_t>(rows[i / d]) * d + i % d] += w[i / d] * src[i];
}

__global__ void CopyRowsKernel(const float* src, int64_t src_stride, float* dst,
                               int64_t dst_stride, int64_t rows, int64_t cols) {
  MS_GRID_LOOP(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

CallResult Launched(const char* name) { return {cudaGetLastError(), name}; }

}  // namespace

CallResult AddBias(float* y, const float* b, int64_t rows, int64_t cols, void* stream) {
  if (rows * cols <= 0) return {};
  AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      y, b, rows, cols);
  return Launched("AddBiasKernel<<<>>>");
}
CallResult Add(float* x, const float* y, int64_t n, void* stream) {
  if (n <= 0) return {};
  AddKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
  return Launched("AddKernel<<<>>>");
}
CallResult SwiGlu(const float* gate, const float* up, int64_t n, float* out, void* stream) {
  if (n <= 0) return {};
  SwiGluKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, n, out);
  return Launched("SwiGluKernel<<<>>>");
}
CallResult SwiGluOai(const float* gate, const float* up, int64_t n, float alpha, float limit,
                     float* out, void* stream) {
  if (n <= 0) return {};
  SwiGluOaiKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, n, alpha,
                                                                               limit, out);
  return Launched("SwiGluOaiKernel<<<>>>");
}
CallResult ScaleRowsBySigmoid(float* y, const float* g, int64_t rows, int64_t cols,
                              void* stream) {
  if (rows * cols <= 0) return {};
  ScaleRowsBySigmoidKernel<<<Blocks(rows * cols), kThreads, 0,
                             static_cast<cudaStream_t>(stream)>>>(y, g, rows, cols);
  return Launched("ScaleRowsBySigmoidKernel<<<>>>");
}

CallResult GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t d, float* dst,
                      void* stream) {
  if (n * d <= 0) return {};
  GatherRowsKernel<<<Blocks(n * d), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      src, rows, n, d, dst);
  return Launched("GatherRowsKernel<<<>>>");
}
CallResult ScatterAddScaled(float* dst, const float* src, const int32_t* rows, const float* w,
                            int64_t n, int64_t d, void* stream) {
  if (n * d <= 0) return {};
  ScatterAddScaledKernel<<<Blocks(n * d), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      dst, src, rows, w, n, d);
  return Launched("ScatterAddScaledKernel<<<>>>");
}

CallResult CopyRows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                    int64_t rows, int64_t cols, void* stream) {
  if (rows * cols <= 0) return {};
  CopyRowsKernel<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      src, src_stride, dst, dst_stride, rows, cols);
  return Launched("CopyRowsKernel<<<>>>");
}

}  // namespace moesplit::cuda::raw
