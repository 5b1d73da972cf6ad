#include "common/base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "common/base/cpu_count.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace moesplit {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Waits until `a` holds a value other than `old`: spins for spin_us, then
// sleeps on the futex. Returns the new value.
template <typename T>
T WaitForChange(const std::atomic<T>& a, T old, int spin_us) {
  T v = a.load(std::memory_order_acquire);
  if (v != old) return v;
  if (spin_us > 0) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    for (int i = 0;; ++i) {
      for (int k = 0; k < 64; ++k) {
        CpuRelax();
        v = a.load(std::memory_order_acquire);
        if (v != old) return v;
      }
      if ((i & 7) == 7 && std::chrono::steady_clock::now() >= deadline) break;
    }
  }
  for (;;) {
    a.wait(old, std::memory_order_acquire);
    v = a.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

}  // namespace

int ThreadPool::DefaultSpinUs() {
  static const int spin = [] {
    const char* s = std::getenv("MOESPLIT_SPIN_US");
    if (s == nullptr || *s == '\0') return 50;
    const int v = std::atoi(s);
    return std::clamp(v, 0, 100000);
  }();
  return spin;
}

ThreadPool::ThreadPool(int n_threads, int spin_us)
    : n_threads_(n_threads > 0
                     ? n_threads
                     : AvailableCpuCount()),
      spin_us_(spin_us >= 0 ? spin_us : DefaultSpinUs()) {
  for (int i = 1; i < n_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint32_t seen = 0;
  for (;;) {
    seen = WaitForChange(generation_, seen, spin_us_);
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::RunOnAll(const std::function<void(int)>& fn) {
  std::lock_guard<std::mutex> call_lock(call_mu_);
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(0);
  for (int32_t p = pending_.load(std::memory_order_acquire); p != 0;) {
    p = WaitForChange(pending_, p, spin_us_);
  }
  job_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n,
                             const std::function<void(int64_t, int64_t)>& fn,
                             int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = (n + min_chunk - 1) / min_chunk;
  const int chunks = static_cast<int>(std::min<int64_t>(n_threads_, max_chunks));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  RunOnAll([&](int t) {
    if (t >= chunks) return;
    const int64_t begin = n * t / chunks;
    const int64_t end = n * (t + 1) / chunks;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace moesplit
