#include "common/base/aligned_allocator.h"

#include <cstdint>
#include <list>

#include "gtest/gtest.h"

namespace moesplit {
namespace {

TEST(AlignedAllocatorTest, StorageStartsOnTheBoundary) {
  for (size_t n : {1u, 3u, 17u, 1000u, 600000u}) {  // heap and mapped allocations
    CacheAlignedVector<float> v(n, 1.0f);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u) << n;
    v.resize(3 * n + 5);  // a reallocation keeps the alignment and the contents
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u) << n;
    EXPECT_EQ(v[n - 1], 1.0f);
    CacheAlignedVector<float> copy = v;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.data()) % 64, 0u) << n;
    EXPECT_EQ(copy, v);
  }
  std::vector<uint8_t, AlignedAllocator<uint8_t, 4096>> page(10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(page.data()) % 4096, 0u);
}

TEST(AlignedAllocatorTest, RebindsForNodeContainers) {
  std::list<int, AlignedAllocator<int, 64>> l = {1, 2, 3};  // allocates list nodes
  int sum = 0;
  for (int x : l) sum += x;
  EXPECT_EQ(sum, 6);
  EXPECT_TRUE((AlignedAllocator<int, 64>() == AlignedAllocator<double, 64>()));
}

}  // namespace
}  // namespace moesplit
