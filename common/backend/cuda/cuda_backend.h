// The CUDA implementation of the backend interface (common/backend/backend.h):
// device memory through cudaMalloc (counted against an optional budget),
// non-blocking streams, timing-free events. Every raw handle is owned by an
// RAII object; every CUDA call is checked (cuda_status.h).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "common/backend/backend.h"

namespace moesplit::cuda {

// Device `index` (0-based). UNAVAILABLE when there is no such device or no
// driver. The device is made current on the calling thread.
absl::StatusOr<std::unique_ptr<backend::Device>> CreateCudaDevice(int index = 0);

// Page-locked host memory (for fast, truly asynchronous copies).
class PinnedHostBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> Create(uint64_t bytes);
  ~PinnedHostBuffer();
  void* data() const { return p_; }
  uint64_t size() const { return n_; }

 private:
  PinnedHostBuffer(void* p, uint64_t n) : p_(p), n_(n) {}
  void* p_;
  uint64_t n_;
};

// Existing host memory page-locked for the device (cudaHostRegister) while
// the object lives: copies from it run at full speed and asynchronously.
class HostRegistration {
 public:
  // [p, p + bytes) widened to whole pages; read_only allows read-only
  // mappings (a GGUF file's). UNAVAILABLE when the system refuses (e.g. the
  // locked-memory limit); nothing is registered then.
  static absl::StatusOr<std::unique_ptr<HostRegistration>> Create(const void* p, uint64_t bytes,
                                                                  bool read_only);
  ~HostRegistration();
  uint64_t size() const { return n_; }

 private:
  HostRegistration(void* p, uint64_t n) : p_(p), n_(n) {}
  void* p_;
  uint64_t n_;
};

}  // namespace moesplit::cuda
