#include <atomic>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/backend/backend.h"

namespace moesplit::backend {
namespace internal {

struct AllocationCounter::State {
  std::atomic<uint64_t> budget{0}, allocated{0}, peak{0};
};
std::shared_ptr<AllocationCounter::State> AllocationCounter::Make() {
  return std::make_shared<State>();
}
void AllocationCounter::set_budget(uint64_t b) { state_->budget = b; }
uint64_t AllocationCounter::budget() const { return state_->budget; }
absl::Status AllocationCounter::Reserve(uint64_t bytes, const std::string& device) {
  const uint64_t before = state_->allocated.fetch_add(bytes);
  const uint64_t budget = state_->budget;
  if (budget != 0 && before + bytes > budget) {
    state_->allocated.fetch_sub(bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        device, ": allocating ", bytes, " bytes would exceed the memory budget of ", budget,
        " bytes (", before, " in use)"));
  }
  uint64_t peak = state_->peak;
  while (before + bytes > peak && !state_->peak.compare_exchange_weak(peak, before + bytes)) {
  }
  return absl::OkStatus();
}
void AllocationCounter::Release(uint64_t bytes) { state_->allocated.fetch_sub(bytes); }
uint64_t AllocationCounter::allocated() const { return state_->allocated; }
uint64_t AllocationCounter::peak() const { return state_->peak; }

absl::Status CheckCopyRange(const Buffer& b, uint64_t offset, uint64_t bytes) {
  if (offset > b.size() || bytes > b.size() - offset) {
    return absl::OutOfRangeError(absl::StrCat("copy of ", bytes, " bytes at offset ", offset,
                                              " exceeds a buffer of ", b.size()));
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace {

class CpuBuffer final : public Buffer {
 public:
  CpuBuffer(void* p, uint64_t n, internal::AllocationCounter c) : p_(p), n_(n), c_(c) {}
  ~CpuBuffer() override {
    ::operator delete(p_, std::align_val_t(64));
    c_.Release(n_);
  }
  void* data() const override { return p_; }
  uint64_t size() const override { return n_; }

 private:
  void* p_;
  uint64_t n_;
  internal::AllocationCounter c_;
};

class CpuEvent final : public Event {
 public:
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::StatusOr<bool> Done() override { return true; }
  void* native() const override { return nullptr; }
};

// Copies run synchronously: the CPU stream is always idle.
class CpuStream final : public Stream {
 public:
  absl::Status CopyToDevice(Buffer& dst, uint64_t offset, const void* host,
                            uint64_t bytes) override {
    absl::Status s = internal::CheckCopyRange(dst, offset, bytes);
    if (s.ok() && bytes > 0) std::memcpy(static_cast<char*>(dst.data()) + offset, host, bytes);
    return s;
  }
  absl::Status CopyToHost(void* host, const Buffer& src, uint64_t offset,
                          uint64_t bytes) override {
    absl::Status s = internal::CheckCopyRange(src, offset, bytes);
    if (s.ok() && bytes > 0) std::memcpy(host, static_cast<const char*>(src.data()) + offset, bytes);
    return s;
  }
  absl::Status Record(Event&) override { return absl::OkStatus(); }
  absl::Status Wait(const Event&) override { return absl::OkStatus(); }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  void* native() const override { return nullptr; }
};

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string name() const override { return "cpu"; }
  absl::StatusOr<MemoryInfo> Memory() const override {
    // Host RAM is not this backend's to plan; report the budget view.
    MemoryInfo m;
    m.total_bytes = counter_.budget();
    m.free_bytes = m.total_bytes > counter_.allocated() ? m.total_bytes - counter_.allocated() : 0;
    return m;
  }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(uint64_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("Allocate: 0 bytes");
    absl::Status s = counter_.Reserve(bytes, name());
    if (!s.ok()) return s;
    void* p = ::operator new(bytes, std::align_val_t(64), std::nothrow);
    if (p == nullptr) {
      counter_.Release(bytes);
      return absl::ResourceExhaustedError(absl::StrCat("cpu: out of memory allocating ", bytes));
    }
    return std::unique_ptr<Buffer>(new CpuBuffer(p, bytes, counter_));
  }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return std::unique_ptr<Stream>(new CpuStream());
  }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::unique_ptr<Event>(new CpuEvent());
  }
  void set_budget(uint64_t b) override { counter_.set_budget(b); }
  uint64_t budget() const override { return counter_.budget(); }
  uint64_t allocated_bytes() const override { return counter_.allocated(); }
  uint64_t peak_allocated_bytes() const override { return counter_.peak(); }

 private:
  internal::AllocationCounter counter_;
};

}  // namespace

std::unique_ptr<Device> CreateCpuDevice() { return std::make_unique<CpuDevice>(); }

}  // namespace moesplit::backend
