#include "common/base/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
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

TEST(ThreadPoolTest, SleepingAndSpinningHandOffsAgree) {
  // spin 0: every hand-off goes through the futex; 1000 us: mostly spinning.
  for (int spin_us : {0, 1000}) {
    ThreadPool pool(3, spin_us);
    std::atomic<int64_t> total{0};
    for (int rep = 0; rep < 2000; ++rep) {
      pool.ParallelFor(3, [&](int64_t b, int64_t e) { total += e - b; });
      if (rep % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(total.load(), 6000) << spin_us;
  }
}

TEST(ThreadPoolTest, CallsFromSeveralThreadsAreSerialised) {
  ThreadPool pool(2, 0);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        pool.ParallelFor(10, [&](int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 10);
}

TEST(ThreadPoolTest, DestroysIdleAndFreshPools) {
  for (int spin_us : {0, 50}) {
    { ThreadPool fresh(4, spin_us); }
    ThreadPool used(4, spin_us);
    used.RunOnAll([](int) {});
  }
}

}  // namespace
}  // namespace moesplit
