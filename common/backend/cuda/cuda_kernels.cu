// Kernels and raw CUDA calls; no Abseil here (nvcc sees only this file).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

__global__ void SaxpyKernel(float a, const float* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

CallResult DeviceProperties(int index, RawDeviceInfo* info) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, index);
  if (e != cudaSuccess) return {e, "cudaGetDeviceProperties"};
  for (int i = 0; i < 255 && p.name[i]; ++i) info->name[i] = p.name[i];
  info->major = p.major;
  info->minor = p.minor;
  size_t free_b = 0, total_b = 0;
  e = cudaSetDevice(index);
  if (e == cudaSuccess) e = cudaMemGetInfo(&free_b, &total_b);
  info->free_bytes = free_b;
  info->total_bytes = total_b;
  return {e, "cudaMemGetInfo"};
}

CallResult Saxpy(float a, const float* x, float* y, int64_t n) {
  float *dx = nullptr, *dy = nullptr;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  CallResult r{cudaMalloc(&dx, bytes), "cudaMalloc"};
  if (r.code == cudaSuccess) r = {cudaMalloc(&dy, bytes), "cudaMalloc"};
  if (r.code == cudaSuccess) r = {cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice), "cudaMemcpy"};
  if (r.code == cudaSuccess) r = {cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice), "cudaMemcpy"};
  if (r.code == cudaSuccess) {
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    SaxpyKernel<<<static_cast<unsigned>(blocks), threads>>>(a, dx, dy, n);
    r = {cudaGetLastError(), "SaxpyKernel<<<>>>"};
  }
  if (r.code == cudaSuccess) r = {cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy"};
  cudaFree(dx);
  cudaFree(dy);
  return r;
}

const char* ErrorString(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }
bool IsOutOfMemory(int code) { return code == cudaErrorMemoryAllocation; }
bool IsNoDevice(int code) {
  return code == cudaErrorNoDevice || code == cudaErrorInsufficientDriver;
}

}  // namespace moesplit::cuda::raw
