// The machine's DRAM read bandwidth, measured the way a decode step reads
// expert weights: every thread of a pool streams its own contiguous slice of
// a buffer far larger than the caches, with wide loads and no writes.
//
// Thread-safety: MeasureDramReadGbps may be called from one thread at a time
// per pool (it runs on all of the pool's threads).
#pragma once

#include <cstdint>

#include "common/base/thread_pool.h"

namespace moesplit {

// Sums the bytes [p, p + n) as 64-bit words (n is rounded down to 128); used
// so that the reads cannot be optimised away. AVX2 when the CPU has it.
uint64_t SumWords(const uint8_t* p, uint64_t n);

// Best of `reps` streaming reads of a `bytes`-sized buffer (allocated and
// touched on each call, then freed), split over the pool's threads, in GB/s
// (1e9 bytes). REQUIRES: reps >= 1, bytes >= 1 MiB.
double MeasureDramReadGbps(ThreadPool* pool, int reps = 5,
                           uint64_t bytes = uint64_t{1} << 30);

}  // namespace moesplit
