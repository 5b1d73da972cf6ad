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

CallResult SetDevice(int index) { return {cudaSetDevice(index), "cudaSetDevice"}; }
CallResult MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  size_t f = 0, t = 0;
  cudaError_t e = cudaMemGetInfo(&f, &t);
  *free_bytes = f;
  *total_bytes = t;
  return {e, "cudaMemGetInfo"};
}
CallResult Malloc(void** p, size_t bytes) {
  *p = nullptr;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    *p = nullptr;
    cudaGetLastError();  // clear the sticky-free error state of the runtime
  }
  return {e, "cudaMalloc"};
}
void Free(void* p) {
  if (p != nullptr) cudaFree(p);
}
CallResult HostRegister(void* p, size_t bytes, bool read_only) {
  unsigned flags = cudaHostRegisterPortable;
  if (read_only) flags |= cudaHostRegisterReadOnly;
  cudaError_t e = cudaHostRegister(p, bytes, flags);
  if (e != cudaSuccess) cudaGetLastError();  // not sticky: clear it
  return {e, "cudaHostRegister"};
}
CallResult HostUnregister(void* p) { return {cudaHostUnregister(p), "cudaHostUnregister"}; }
CallResult MallocHost(void** p, size_t bytes) {
  *p = nullptr;
  cudaError_t e = cudaMallocHost(p, bytes);
  if (e != cudaSuccess) {
    *p = nullptr;
    cudaGetLastError();
  }
  return {e, "cudaMallocHost"};
}
void FreeHost(void* p) {
  if (p != nullptr) cudaFreeHost(p);
}
CallResult Memset(void* p, int value, size_t bytes, void* stream) {
  return {cudaMemsetAsync(p, value, bytes, static_cast<cudaStream_t>(stream)), "cudaMemsetAsync"};
}
CallResult MemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  const cudaMemcpyKind k = kind == 0   ? cudaMemcpyHostToDevice
                           : kind == 1 ? cudaMemcpyDeviceToHost
                                       : cudaMemcpyDeviceToDevice;
  if (bytes == 0) return {};
  return {cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream)),
          "cudaMemcpyAsync"};
}
CallResult StreamCreate(void** stream) {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *stream = s;
  return {e, "cudaStreamCreateWithFlags"};
}
void StreamDestroy(void* stream) {
  if (stream != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}
CallResult StreamSynchronize(void* stream) {
  return {cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize"};
}
CallResult StreamWaitEvent(void* stream, void* event) {
  return {cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                              static_cast<cudaEvent_t>(event), 0),
          "cudaStreamWaitEvent"};
}
CallResult EventCreate(void** event) {
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  *event = ev;
  return {e, "cudaEventCreateWithFlags"};
}
void EventDestroy(void* event) {
  if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}
CallResult EventRecord(void* event, void* stream) {
  return {cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
          "cudaEventRecord"};
}
CallResult EventSynchronize(void* event) {
  return {cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize"};
}
CallResult EventQuery(void* event, bool* done) {
  cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  *done = e == cudaSuccess;
  if (e == cudaErrorNotReady) e = cudaSuccess;
  return {e, "cudaEventQuery"};
}

const char* ErrorString(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }
bool IsOutOfMemory(int code) { return code == cudaErrorMemoryAllocation; }
bool IsNoDevice(int code) {
  return code == cudaErrorNoDevice || code == cudaErrorInsufficientDriver;
}

}  // namespace moesplit::cuda::raw
