// The compute-backend interface, after ggml's backend split
// (ggml-backend.h): a Device (properties, free/total memory, allocation),
// Buffers of device memory it owns, Streams that order copies and kernels,
// and Events that mark a point in a stream. The CPU backend (always built,
// the reference) and the CUDA backend (common/backend/cuda, built when nvcc
// exists) implement it.
//
// Ownership: a Device outlives every Buffer, Stream and Event it created;
// each of those owns its raw handle (RAII) and frees it in its destructor.
// Budgets: a Device may be given a byte budget (--gpu-memory); Allocate
// fails with RESOURCE_EXHAUSTED, allocating nothing, when the bytes allocated
// through it would exceed the budget, or when the device itself is out of
// memory. Errors never abort.
//
// Thread-safety: Device methods are thread-safe (allocation counters are
// atomic). A Stream is used by one thread at a time. Buffers and Events may
// be shared once created.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moesplit::backend {

enum class DeviceKind { kCpu, kCuda };

struct MemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

class Device;

// A block of device memory. data() is a device pointer for CUDA (not
// dereferenceable on the host) and host memory for the CPU.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() const = 0;
  virtual uint64_t size() const = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  // Blocks until the work recorded before the event is done.
  virtual absl::Status Synchronize() = 0;
  // Whether it is done, without blocking.
  virtual absl::StatusOr<bool> Done() = 0;
  // The native handle (cudaEvent_t) or nullptr.
  virtual void* native() const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  // Asynchronous copies (ordered in the stream). `host` must stay valid
  // until the stream has passed the copy. OutOfRange when offset + bytes
  // exceeds the buffer.
  virtual absl::Status CopyToDevice(Buffer& dst, uint64_t offset, const void* host,
                                    uint64_t bytes) = 0;
  virtual absl::Status CopyToHost(void* host, const Buffer& src, uint64_t offset,
                                  uint64_t bytes) = 0;
  virtual absl::Status Record(Event& event) = 0;
  // Later work in this stream waits for `event`.
  virtual absl::Status Wait(const Event& event) = 0;
  // Blocks until everything queued so far is done.
  virtual absl::Status Synchronize() = 0;
  // The native handle (cudaStream_t) or nullptr.
  virtual void* native() const = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  // Free and total memory as the device reports them now.
  virtual absl::StatusOr<MemoryInfo> Memory() const = 0;

  // bytes >= 1. RESOURCE_EXHAUSTED over the budget or out of memory.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(uint64_t bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;

  // 0 = no budget (the device's memory is the limit).
  virtual void set_budget(uint64_t bytes) = 0;
  virtual uint64_t budget() const = 0;
  // Bytes held in live Buffers of this device, and the most ever held.
  virtual uint64_t allocated_bytes() const = 0;
  virtual uint64_t peak_allocated_bytes() const = 0;
};

// The host as a device: Buffers in RAM, streams that run copies at once.
std::unique_ptr<Device> CreateCpuDevice();

namespace internal {
// OutOfRange unless [offset, offset + bytes) lies inside `b` (stream copies).
absl::Status CheckCopyRange(const Buffer& b, uint64_t offset, uint64_t bytes);

// Shared accounting of budget / allocated / peak bytes for implementations.
class AllocationCounter {
 public:
  void set_budget(uint64_t b);
  uint64_t budget() const;
  // Reserves `bytes`, or RESOURCE_EXHAUSTED naming `device` when over budget.
  absl::Status Reserve(uint64_t bytes, const std::string& device);
  void Release(uint64_t bytes);
  uint64_t allocated() const;
  uint64_t peak() const;

 private:
  struct State;
  std::shared_ptr<State> state_ = Make();
  static std::shared_ptr<State> Make();
};
}  // namespace internal

}  // namespace moesplit::backend
