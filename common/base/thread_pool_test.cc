#include "common/base/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace moesplit {
namespace {

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 3, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPoolTest, RunOnAllRunsEachIndex) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(3);
  for (int rep = 0; rep < 50; ++rep) pool.RunOnAll([&](int t) { hits[t]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 50);
}

}  // namespace
}  // namespace moesplit
