#include "common/base/thread_pool.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/base/subprocess.h"
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

// The threads of this process.
int ThreadCount() { return ThreadsOf(getpid()); }

// The kernel lists a thread a moment after pthread_join has seen it end;
// waits (up to a minute, never in a passing run) for the count to come down.
int ThreadCountSettledAt(int want) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int n = ThreadCount();
  while (n != want && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = ThreadCount();
  }
  return n;
}

// Counts the worker threads that have ended: each worker that runs a job
// gets one of these; its destructor runs as the thread exits.
std::atomic<int> g_exited{0};
struct ExitMarker {
  bool armed = false;
  ~ExitMarker() {
    if (!armed) return;
    // A thread still exiting after ~ThreadPool returned would be caught
    // here: the pause makes that visible rather than a lucky race.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    g_exited.fetch_add(1);
  }
};
thread_local ExitMarker t_exit_marker;

// The destructor joins the workers (thread_pool.h): when it returns every
// worker has ended, whether the pool never ran a job (the workers still wait
// for the first) or ran some (they spin, then sleep, waiting for the next).
TEST(ThreadPoolTest, DestructorEndsEveryWorker) {
  const int before = ThreadCount();
  for (int spin_us : {0, 50, 100000}) {
    {
      ThreadPool fresh(4, spin_us);
      EXPECT_EQ(ThreadCount(), before + 3) << spin_us;
    }
    EXPECT_EQ(ThreadCountSettledAt(before), before) << "fresh pool, spin_us " << spin_us;

    g_exited = 0;
    {
      ThreadPool used(4, spin_us);
      std::atomic<int> ran{0};
      const auto caller = std::this_thread::get_id();
      used.RunOnAll([&](int) {
        if (std::this_thread::get_id() != caller) t_exit_marker.armed = true;
        ran.fetch_add(1);
      });
      EXPECT_EQ(ran.load(), 4);
      EXPECT_EQ(g_exited.load(), 0);
    }
    // Joined, not merely told to stop: all three workers have finished.
    EXPECT_EQ(g_exited.load(), 3) << "used pool, spin_us " << spin_us;
    EXPECT_EQ(ThreadCountSettledAt(before), before) << "used pool, spin_us " << spin_us;
  }
}

}  // namespace
}  // namespace moesplit
