// ThreadPool: a fixed set of persistent worker threads for data-parallel loops.
//
// ParallelFor(n, fn) splits [0, n) into contiguous chunks, runs fn(begin, end)
// on the workers and the calling thread, and returns when all chunks are done.
// One ParallelFor at a time per pool (calls from several threads are
// serialised). fn must not call ParallelFor on the same pool.
//
// Hand-off: a forward step issues dozens of short parallel loops back to
// back, and waking a sleeping thread costs tens of microseconds (more in a
// VM). So after a loop the workers spin for `spin_us` watching for the next
// one, and the caller spins the same way for the last chunk to finish; only
// then do they sleep on a futex (std::atomic::wait). spin_us = 0 sleeps at
// once. The default comes from $MOESPLIT_SPIN_US, else 50.
//
// Thread-safe as described; the destructor joins the workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moesplit {

class ThreadPool {
 public:
  // n_threads counts the calling thread: 1 means no extra workers.
  // 0 picks AvailableCpuCount() (cpu_count.h). spin_us < 0: the default.
  explicit ThreadPool(int n_threads = 0, int spin_us = -1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn over [0, n) in at most size() chunks (or chunks of at least
  // `min_chunk` items). Blocks until done.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                   int64_t min_chunk = 1);

  // Runs fn(thread_index) once on each of size() threads (index 0 = caller).
  void RunOnAll(const std::function<void(int)>& fn);

  // $MOESPLIT_SPIN_US, else 50.
  static int DefaultSpinUs();

 private:
  void WorkerLoop(int index);

  const int n_threads_;
  const int spin_us_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serialises RunOnAll callers

  // Published with a release increment of generation_; read by the workers
  // after they see the new generation.
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int32_t> pending_{0};  // workers still running the current job
  std::atomic<bool> stop_{false};
};

}  // namespace moesplit
