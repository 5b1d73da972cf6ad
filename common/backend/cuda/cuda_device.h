// The CUDA side of the backend interface, as far as it goes today: device
// discovery and one checked kernel launch, so the CUDA toolchain, the
// architecture list and the run-time skip are exercised from the start.
//
// Built only when nvcc exists (MOESPLIT_HAVE_CUDA); without a GPU or driver
// every function answers cleanly (no devices / UNAVAILABLE), never aborts.
// Thread-safe: CUDA runtime calls only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moesplit::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  uint64_t free_bytes = 0, total_bytes = 0;
};

// The visible devices; empty when there is no GPU or no driver.
std::vector<DeviceInfo> ListDevices();

// y = a * x + y on device 0 (host buffers of n floats). UNAVAILABLE without a
// device; RESOURCE_EXHAUSTED when device memory runs out; INTERNAL for other
// CUDA errors, naming the call.
absl::Status Saxpy(float a, const float* x, float* y, int64_t n);

}  // namespace moesplit::cuda
