#include "common/base/scratch_buffer.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "gtest/gtest.h"

namespace moesplit {
namespace {

bool Aligned64(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 63) == 0; }

TEST(ScratchBufferTest, SmallBuffersComeFromTheHeapAligned) {
  ScratchBuffer b;
  EXPECT_EQ(b.data(), nullptr);
  uint8_t* p = b.Get(0);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(Aligned64(p));
  p = b.Get(1000);
  EXPECT_TRUE(Aligned64(p));
  EXPECT_GE(b.capacity(), 1000u);
  EXPECT_FALSE(b.mapped());
  std::memset(p, 0xAB, 1000);
  // A smaller request keeps the block and its contents.
  EXPECT_EQ(b.Get(10), p);
  EXPECT_EQ(p[999], 0xAB);
}

TEST(ScratchBufferTest, LargeBuffersAreHugePageAlignedMappings) {
  ScratchBuffer b;
  const uint64_t n = ScratchBuffer::kHugeThreshold * 3 + 123;
  uint8_t* p = b.Get(n);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(b.mapped());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % ScratchBuffer::kHugeThreshold, 0u);
  EXPECT_EQ(b.capacity(), ScratchBuffer::kHugeThreshold * 4);
  // The whole capacity is writable.
  std::memset(p, 0x5A, b.capacity());
  EXPECT_EQ(p[b.capacity() - 1], 0x5A);
}

TEST(ScratchBufferTest, GrowsFromHeapToMappingAndTyped) {
  ScratchBuffer b;
  float* f = b.As<float>(16);
  f[15] = 1.5f;
  EXPECT_FALSE(b.mapped());
  float* g = b.As<float>(ScratchBuffer::kHugeThreshold);  // 8 MiB of floats
  EXPECT_TRUE(b.mapped());
  EXPECT_GE(b.capacity(), ScratchBuffer::kHugeThreshold * sizeof(float));
  g[ScratchBuffer::kHugeThreshold - 1] = 2.5f;
  EXPECT_EQ(b.As<float>(1), g);
}

TEST(ScratchBufferTest, MovesOwnership) {
  ScratchBuffer a;
  uint8_t* p = a.Get(ScratchBuffer::kHugeThreshold);
  p[0] = 7;
  ScratchBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[0], 7);
  ScratchBuffer c;
  c.Get(100);
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_TRUE(c.mapped());
}

TEST(AllocateHugePageBytesTest, GivesAlignedZeroedWritableMemory) {
  std::shared_ptr<uint8_t[]> p = AllocateHugePageBytes(5 << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % ScratchBuffer::kHugeThreshold, 0u);
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[(5 << 20) - 1], 0);
  p[(6 << 20) - 1] = 3;  // rounded up to 6 MiB
  std::shared_ptr<uint8_t[]> q = p;
  p.reset();
  EXPECT_EQ(q[(6 << 20) - 1], 3);
}

}  // namespace
}  // namespace moesplit
