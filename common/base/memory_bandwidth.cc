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

DramReader::DramReader(ThreadPool* pool, uint64_t bytes) : pool_(pool) {
  const int nt = pool_->size();
  chunk_ = (bytes / nt) & ~uint64_t{127};
  uint8_t* p = buf_.Get(chunk_ * nt);
  // First touch from the threads that will read, so pages land on their
  // NUMA nodes.
  pool_->RunOnAll([&](int t) { std::memset(p + t * chunk_, 1, chunk_); });
  sums_.assign(nt, 0);
}

double DramReader::MeasureGbps(int reps) {
  const int nt = pool_->size();
  const uint8_t* p = buf_.data();
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_->RunOnAll([&](int t) { sums_[t] += SumWords(p + t * chunk_, chunk_); });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(chunk_) * nt / s / 1e9);
  }
  // Keeps the sums observable.
  if (sums_[0] == 0x5eed) std::abort();
  return best;
}

double MeasureDramReadGbps(ThreadPool* pool, int reps, uint64_t bytes) {
  DramReader reader(pool, bytes);
  return reader.MeasureGbps(reps);
}

}  // namespace moesplit
