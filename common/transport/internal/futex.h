// Spin-then-block waiting on a 32-bit word in (possibly shared) memory.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace moesplit::transport {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Sleeps while *word == expected, at most timeout_us. Shared (not private)
// futex: works across processes mapping the same memory.
inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us) {
  timespec ts{static_cast<time_t>(timeout_us / 1000000),
              static_cast<long>((timeout_us % 1000000) * 1000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
          0);
}

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// Waits until *counter != value (returns true) or `slice_us` passed (false).
// Spins first for `spin_us`, then blocks on the futex, announcing the sleep
// through *sleeping so the producer knows to wake it.
inline bool WaitForChange(std::atomic<uint32_t>* counter, uint32_t value,
                          std::atomic<uint32_t>* sleeping, int64_t spin_us, int64_t slice_us) {
  const uint64_t start = MonotonicNs();
  const uint64_t spin_until = start + static_cast<uint64_t>(spin_us) * 1000;
  while (counter->load(std::memory_order_acquire) == value) {
    if (MonotonicNs() >= spin_until) {
      sleeping->store(1, std::memory_order_seq_cst);
      if (counter->load(std::memory_order_seq_cst) == value) {
        FutexWait(counter, value, slice_us);
      }
      sleeping->store(0, std::memory_order_relaxed);
      return counter->load(std::memory_order_acquire) != value;
    }
    for (int i = 0; i < 16; ++i) CpuRelax();
    // When the peer shares this core (more runnable threads than cores),
    // pausing only burns its time slice: let it run.
    sched_yield();
  }
  return true;
}

// Publishes a counter increment and wakes a sleeping waiter.
inline void Publish(std::atomic<uint32_t>* counter, uint32_t new_value,
                    std::atomic<uint32_t>* sleeping) {
  counter->store(new_value, std::memory_order_seq_cst);
  if (sleeping->load(std::memory_order_seq_cst) != 0) FutexWakeAll(counter);
}

}  // namespace moesplit::transport
