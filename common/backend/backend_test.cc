#include "common/backend/backend.h"

#include <vector>

#include "gtest/gtest.h"

namespace moesplit::backend {
namespace {

TEST(CpuBackendTest, CopiesRoundTripAndCountBytes) {
  auto dev = CreateCpuDevice();
  EXPECT_EQ(dev->kind(), DeviceKind::kCpu);
  auto buf = dev->Allocate(64);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_EQ(dev->allocated_bytes(), 64u);
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok());
  std::vector<uint8_t> in(64), out(64);
  for (int i = 0; i < 64; ++i) in[i] = static_cast<uint8_t>(3 * i + 1);
  ASSERT_TRUE((*stream)->CopyToDevice(**buf, 0, in.data(), 64).ok());
  ASSERT_TRUE((*stream)->CopyToHost(out.data(), **buf, 0, 64).ok());
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(in, out);
  EXPECT_EQ((*stream)->CopyToDevice(**buf, 60, in.data(), 8).code(),
            absl::StatusCode::kOutOfRange);
  buf->reset();
  EXPECT_EQ(dev->allocated_bytes(), 0u);
  EXPECT_EQ(dev->peak_allocated_bytes(), 64u);
}

TEST(CpuBackendTest, BudgetRefusesWithResourceExhausted) {
  auto dev = CreateCpuDevice();
  dev->set_budget(100);
  auto a = dev->Allocate(80);
  ASSERT_TRUE(a.ok());
  auto b = dev->Allocate(40);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
  EXPECT_EQ(dev->allocated_bytes(), 80u);
  EXPECT_EQ(dev->Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  auto ev = dev->CreateEvent();
  ASSERT_TRUE(ev.ok());
  auto done = (*ev)->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
}

}  // namespace
}  // namespace moesplit::backend
