#include "common/base/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace moesplit {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, uint64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a0, 0) + _mm256_extract_epi64(a0, 1) +
                               _mm256_extract_epi64(a0, 2) + _mm256_extract_epi64(a0, 3));
}
#endif

}  // namespace

uint64_t SumWords(const uint8_t* p, uint64_t n) {
  n &= ~uint64_t{127};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) return SumAvx2(p, n);
#endif
  uint64_t s = 0;
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

double MeasureDramReadGbps(ThreadPool* pool, int reps, uint64_t bytes) {
  // Aligned to 2 MiB so that the kernel can back it with huge pages, like
  // the expert arena.
  constexpr uint64_t kAlign = uint64_t{2} << 20;
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  std::unique_ptr<uint8_t, decltype(&std::free)> buf(
      static_cast<uint8_t*>(std::aligned_alloc(kAlign, bytes)), &std::free);
  if (buf == nullptr) return 0;
  const int nt = pool->size();
  // First touch from the threads that will read, so pages land on their
  // NUMA nodes.
  const uint64_t chunk = (bytes / nt) & ~uint64_t{127};
  pool->RunOnAll([&](int t) { std::memset(buf.get() + t * chunk, 1, chunk); });
  std::vector<uint64_t> sums(nt);
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool->RunOnAll([&](int t) { sums[t] += SumWords(buf.get() + t * chunk, chunk); });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(chunk) * nt / s / 1e9);
  }
  // Keeps the sums observable.
  if (sums[0] == 0x5eed) std::abort();
  return best;
}

}  // namespace moesplit
