// The machine's DRAM read bandwidth, measured the way a decode step reads
// expert weights: every thread of a pool streams its own contiguous slice of
// a buffer far larger than the caches, with wide loads and no writes.
//
// Thread-safety: MeasureDramReadGbps may be called from one thread at a time
// per pool (it runs on all of the pool's threads).
#pragma once

#include <cstdint>

#include <vector>

#include "common/base/scratch_buffer.h"
#include "common/base/thread_pool.h"

namespace moesplit {

// Sums the bytes [p, p + n) as 64-bit words (n is rounded down to 128); used
// so that the reads cannot be optimised away. AVX2 when the CPU has it.
uint64_t SumWords(const uint8_t* p, uint64_t n);

// A buffer far larger than the caches, kept for repeated measurements (so
// that a benchmark can interleave them with what it measures without paying
// the allocation each time). The buffer is on huge pages where the kernel
// allows, like the expert arena, and first touched by the pool's threads so
// that each thread's slice is on its NUMA node.
class DramReader {
 public:
  // REQUIRES: bytes >= 1 MiB; `pool` outlives the reader.
  DramReader(ThreadPool* pool, uint64_t bytes = uint64_t{1} << 30);
  // Best of `reps` streaming reads of the whole buffer, split over the pool's
  // threads, in GB/s (1e9 bytes). REQUIRES: reps >= 1.
  double MeasureGbps(int reps);

 private:
  ThreadPool* const pool_;
  ScratchBuffer buf_;
  uint64_t chunk_ = 0;  // bytes per thread
  std::vector<uint64_t> sums_;
};

// A DramReader's MeasureGbps(reps) on a fresh `bytes`-sized buffer.
double MeasureDramReadGbps(ThreadPool* pool, int reps = 5,
                           uint64_t bytes = uint64_t{1} << 30);

}  // namespace moesplit
