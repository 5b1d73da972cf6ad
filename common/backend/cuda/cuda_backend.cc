#include "common/backend/cuda/cuda_backend.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/backend/cuda/cuda_device.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda {
namespace {

class CudaBuffer final : public backend::Buffer {
 public:
  CudaBuffer(void* p, uint64_t n, backend::internal::AllocationCounter c)
      : p_(p), n_(n), c_(c) {}
  ~CudaBuffer() override {
    raw::Free(p_);
    c_.Release(n_);
  }
  void* data() const override { return p_; }
  uint64_t size() const override { return n_; }

 private:
  void* p_;
  uint64_t n_;
  backend::internal::AllocationCounter c_;
};

class CudaEvent final : public backend::Event {
 public:
  explicit CudaEvent(void* e) : e_(e) {}
  ~CudaEvent() override { raw::EventDestroy(e_); }
  absl::Status Synchronize() override { return ToStatus(raw::EventSynchronize(e_)); }
  absl::StatusOr<bool> Done() override {
    bool done = false;
    absl::Status s = ToStatus(raw::EventQuery(e_, &done));
    if (!s.ok()) return s;
    return done;
  }
  void* native() const override { return e_; }

 private:
  void* e_;
};

class CudaStream final : public backend::Stream {
 public:
  explicit CudaStream(void* s) : s_(s) {}
  ~CudaStream() override {
    raw::StreamSynchronize(s_);
    raw::StreamDestroy(s_);
  }
  absl::Status CopyToDevice(backend::Buffer& dst, uint64_t offset, const void* host,
                            uint64_t bytes) override {
    absl::Status st = backend::internal::CheckCopyRange(dst, offset, bytes);
    if (!st.ok()) return st;
    return ToStatus(
        raw::MemcpyAsync(static_cast<char*>(dst.data()) + offset, host, bytes, 0, s_));
  }
  absl::Status CopyToHost(void* host, const backend::Buffer& src, uint64_t offset,
                          uint64_t bytes) override {
    absl::Status st = backend::internal::CheckCopyRange(src, offset, bytes);
    if (!st.ok()) return st;
    return ToStatus(
        raw::MemcpyAsync(host, static_cast<const char*>(src.data()) + offset, bytes, 1, s_));
  }
  absl::Status Record(backend::Event& e) override {
    return ToStatus(raw::EventRecord(e.native(), s_));
  }
  absl::Status Wait(const backend::Event& e) override {
    return ToStatus(raw::StreamWaitEvent(s_, e.native()));
  }
  absl::Status Synchronize() override { return ToStatus(raw::StreamSynchronize(s_)); }
  void* native() const override { return s_; }

 private:
  void* s_;
};

class CudaDevice final : public backend::Device {
 public:
  CudaDevice(int index, std::string name) : index_(index), name_(std::move(name)) {}
  backend::DeviceKind kind() const override { return backend::DeviceKind::kCuda; }
  std::string name() const override { return name_; }
  absl::StatusOr<backend::MemoryInfo> Memory() const override {
    backend::MemoryInfo m;
    absl::Status s = ToStatus(raw::SetDevice(index_));
    if (s.ok()) s = ToStatus(raw::MemGetInfo(&m.free_bytes, &m.total_bytes));
    if (!s.ok()) return s;
    return m;
  }
  absl::StatusOr<std::unique_ptr<backend::Buffer>> Allocate(uint64_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("Allocate: 0 bytes");
    absl::Status s = counter_.Reserve(bytes, name_);
    if (!s.ok()) return s;
    void* p = nullptr;
    s = ToStatus(raw::Malloc(&p, bytes));
    if (!s.ok()) {
      counter_.Release(bytes);
      return absl::Status(s.code(), absl::StrCat(name_, ": allocating ", bytes, " bytes: ",
                                                 s.message()));
    }
    return std::unique_ptr<backend::Buffer>(new CudaBuffer(p, bytes, counter_));
  }
  absl::StatusOr<std::unique_ptr<backend::Stream>> CreateStream() override {
    void* s = nullptr;
    absl::Status st = ToStatus(raw::StreamCreate(&s));
    if (!st.ok()) return st;
    return std::unique_ptr<backend::Stream>(new CudaStream(s));
  }
  absl::StatusOr<std::unique_ptr<backend::Event>> CreateEvent() override {
    void* e = nullptr;
    absl::Status st = ToStatus(raw::EventCreate(&e));
    if (!st.ok()) return st;
    return std::unique_ptr<backend::Event>(new CudaEvent(e));
  }
  void set_budget(uint64_t b) override { counter_.set_budget(b); }
  uint64_t budget() const override { return counter_.budget(); }
  uint64_t allocated_bytes() const override { return counter_.allocated(); }
  uint64_t peak_allocated_bytes() const override { return counter_.peak(); }

 private:
  const int index_;
  const std::string name_;
  backend::internal::AllocationCounter counter_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<backend::Device>> CreateCudaDevice(int index) {
  const std::vector<DeviceInfo> devices = ListDevices();
  if (index < 0 || index >= static_cast<int>(devices.size())) {
    return absl::UnavailableError(absl::StrCat("no CUDA device ", index, " (", devices.size(),
                                               " visible)"));
  }
  absl::Status s = ToStatus(raw::SetDevice(index));
  if (!s.ok()) return s;
  return std::unique_ptr<backend::Device>(new CudaDevice(index, devices[index].name));
}

absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> PinnedHostBuffer::Create(uint64_t bytes) {
  void* p = nullptr;
  absl::Status s = ToStatus(raw::MallocHost(&p, bytes));
  if (!s.ok()) return s;
  return std::unique_ptr<PinnedHostBuffer>(new PinnedHostBuffer(p, bytes));
}

PinnedHostBuffer::~PinnedHostBuffer() { raw::FreeHost(p_); }

absl::StatusOr<std::unique_ptr<HostRegistration>> HostRegistration::Create(const void* p,
                                                                           uint64_t bytes,
                                                                           bool read_only) {
  if (p == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("HostRegistration: empty range");
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
  void* base = reinterpret_cast<void*>(b);
  const raw::CallResult r = raw::HostRegister(base, e - b, read_only);
  if (!r.ok()) {
    return absl::UnavailableError(absl::StrCat("page-locking ", e - b, " bytes of host memory: ",
                                               raw::ErrorString(r.code)));
  }
  return std::unique_ptr<HostRegistration>(new HostRegistration(base, e - b));
}

HostRegistration::~HostRegistration() { raw::HostUnregister(p_); }

}  // namespace moesplit::cuda
