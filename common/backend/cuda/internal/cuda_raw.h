// Plain-C++ surface of cuda_kernels.cu (compiled by nvcc without Abseil);
// cuda_device.cc turns its results into absl::Status.
#pragma once

#include <cstdint>

namespace moesplit::cuda::raw {

struct CallResult {
  int code = 0;            // cudaError_t
  const char* call = "";   // the CUDA call that returned it
};

struct RawDeviceInfo {
  char name[256] = {0};
  int major = 0, minor = 0;
  uint64_t free_bytes = 0, total_bytes = 0;
};

int DeviceCount();
CallResult DeviceProperties(int index, RawDeviceInfo* info);
CallResult Saxpy(float a, const float* x, float* y, int64_t n);
const char* ErrorString(int code);
bool IsOutOfMemory(int code);
bool IsNoDevice(int code);

}  // namespace moesplit::cuda::raw
