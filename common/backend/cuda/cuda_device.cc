#include "common/backend/cuda/cuda_device.h"

#include "absl/strings/str_cat.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda {

std::vector<DeviceInfo> ListDevices() {
  std::vector<DeviceInfo> out;
  const int n = raw::DeviceCount();
  for (int i = 0; i < n; ++i) {
    raw::RawDeviceInfo r;
    if (!ToStatus(raw::DeviceProperties(i, &r)).ok()) continue;
    out.push_back({i, r.name, r.major, r.minor, r.free_bytes, r.total_bytes});
  }
  return out;
}

absl::Status Saxpy(float a, const float* x, float* y, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("Saxpy: n = ", n));
  if (raw::DeviceCount() == 0) return absl::UnavailableError("no CUDA device");
  if (n == 0) return absl::OkStatus();
  return ToStatus(raw::Saxpy(a, x, y, n));
}

}  // namespace moesplit::cuda
