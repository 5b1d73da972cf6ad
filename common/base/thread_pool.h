// ThreadPool: a fixed set of persistent worker threads for data-parallel loops.
//
// ParallelFor(n, fn) splits [0, n) into contiguous chunks, runs fn(begin, end)
// on the workers and the calling thread, and returns when all chunks are done.
// One ParallelFor at a time per pool (calls from several threads are
// serialised). fn must not call ParallelFor on the same pool.
//
// Thread-safe as described; the destructor joins the workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moesplit {

class ThreadPool {
 public:
  // n_threads counts the calling thread: 1 means no extra workers.
  // 0 picks std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
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

 private:
  void WorkerLoop(int index);

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serialises RunOnAll callers

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int)>* job_ = nullptr;  // guarded by mu_
  uint64_t generation_ = 0;                        // guarded by mu_
  int pending_ = 0;                                // guarded by mu_
  bool stop_ = false;                              // guarded by mu_
};

}  // namespace moesplit
