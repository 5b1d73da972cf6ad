// The host emulation of the kernel ABI (raw_emulated.cc) itself: its device,
// its memory accounting and out-of-memory answer, and the pointer checks a
// real device does not make (a host pointer given as a device one, an extent
// past a buffer, a copy of the wrong kind are errors, not silent reads).
#include <cstdlib>
#include <string>
#include <vector>

#include "common/backend/cuda/cuda_backend.h"
#include "common/backend/cuda/cuda_device.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "gtest/gtest.h"

namespace moesplit::cuda {
namespace {

uint64_t ExpectedTotal() {
  const char* env = std::getenv("MOESPLIT_EMULATED_GPU_BYTES");
  return env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 10) : uint64_t{16} << 30;
}

TEST(RawEmulatedTest, OneDeviceWithTheEmulatedMemory) {
  const std::vector<DeviceInfo> devices = ListDevices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_NE(devices[0].name.find("emulated"), std::string::npos) << devices[0].name;
  EXPECT_EQ(devices[0].total_bytes, ExpectedTotal());
  EXPECT_FALSE(CreateCudaDevice(1).ok());
}

TEST(RawEmulatedTest, AllocationsCountAndOutOfMemoryIsResourceExhausted) {
  auto dev = CreateCudaDevice(0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto before = (*dev)->Memory();
  ASSERT_TRUE(before.ok());
  {
    auto b = (*dev)->Allocate(1000);  // counted as 1024 (256-byte granules)
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*b)->data()) % 256, 0u);
    auto during = (*dev)->Memory();
    ASSERT_TRUE(during.ok());
    EXPECT_EQ(during->free_bytes, before->free_bytes - 1024);
    // More than is free: RESOURCE_EXHAUSTED, nothing allocated.
    auto big = (*dev)->Allocate(during->free_bytes + 1);
    EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
    EXPECT_EQ((*dev)->Memory()->free_bytes, during->free_bytes);
    EXPECT_EQ((*dev)->allocated_bytes(), 1000u);
  }
  EXPECT_EQ((*dev)->Memory()->free_bytes, before->free_bytes);
  EXPECT_TRUE(raw::IsOutOfMemory(2));
  EXPECT_TRUE(raw::IsNoDevice(100));
  EXPECT_EQ(ToStatus({2, "cudaMalloc"}).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ToStatus({100, "x"}).code(), absl::StatusCode::kUnavailable);
}

TEST(RawEmulatedTest, DevicePointersAreChecked) {
  auto dev = CreateCudaDevice(0);
  ASSERT_TRUE(dev.ok());
  auto stream = (*dev)->CreateStream();
  ASSERT_TRUE(stream.ok());
  void* s = (*stream)->native();
  constexpr int64_t n = 64;  // 256 bytes: no slack after the buffer
  auto a = (*dev)->Allocate(n * sizeof(float));
  auto b = (*dev)->Allocate(n * sizeof(float));
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> host(n, 1.0f), back(n, 0.0f);
  ASSERT_TRUE((*stream)->CopyToDevice(**a, 0, host.data(), n * sizeof(float)).ok());
  ASSERT_TRUE((*stream)->CopyToDevice(**b, 0, host.data(), n * sizeof(float)).ok());
  float* da = static_cast<float*>((*a)->data());
  float* db = static_cast<float*>((*b)->data());
  // A kernel on device buffers runs at once.
  ASSERT_TRUE(ToStatus(raw::Add(da, db, n, s)).ok());
  ASSERT_TRUE((*stream)->CopyToHost(back.data(), **a, 0, n * sizeof(float)).ok());
  EXPECT_EQ(back, std::vector<float>(n, 2.0f));
  // A host pointer given as a device one, an extent past the buffer.
  absl::Status st = ToStatus(raw::Add(da, host.data(), n, s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_NE(std::string(st.message()).find("illegal"), std::string::npos) << st;
  EXPECT_FALSE(ToStatus(raw::Add(da, db, n + 1, s)).ok());
  // Copies of the wrong kind.
  EXPECT_FALSE(ToStatus(raw::MemcpyAsync(back.data(), host.data(), 4, 0, s)).ok());
  EXPECT_FALSE(ToStatus(raw::MemcpyAsync(da, db, 4, 1, s)).ok());
  EXPECT_FALSE(ToStatus(raw::MemcpyAsync(back.data(), da, 4, 2, s)).ok());
  EXPECT_TRUE(ToStatus(raw::MemcpyAsync(db, da, 4, 2, s)).ok());
  EXPECT_FALSE(ToStatus(raw::Memset(host.data(), 0, 4, s)).ok());
  // Nothing above changed the buffers.
  ASSERT_TRUE((*stream)->CopyToHost(back.data(), **a, 0, n * sizeof(float)).ok());
  EXPECT_EQ(back, std::vector<float>(n, 2.0f));
  // Events are done once recorded (the emulation is synchronous).
  auto ev = (*dev)->CreateEvent();
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE((*stream)->Record(**ev).ok());
  auto done = (*ev)->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_TRUE((*ev)->Synchronize().ok());
}

TEST(RawEmulatedTest, PartialActivationBlocksAreInvalid) {
  auto dev = CreateCudaDevice(0);
  ASSERT_TRUE(dev.ok());
  auto buf = (*dev)->Allocate(256 * sizeof(float));
  ASSERT_TRUE(buf.ok());
  float* x = static_cast<float*>((*buf)->data());
  ASSERT_TRUE(raw::Memset(x, 0, 256 * sizeof(float), nullptr).ok());
  // Q8_K rounds blocks of 256: 128 columns are not whole blocks.
  EXPECT_EQ(raw::RoundActivations(GgmlType::kQ4_K, x, 1, 128, x, nullptr).code, 1);
  EXPECT_TRUE(raw::RoundActivations(GgmlType::kQ4_K, x, 1, 256, x, nullptr).ok());
}

}  // namespace
}  // namespace moesplit::cuda
