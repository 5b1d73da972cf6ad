// LoadProgress: progress of a long load or write on stderr (a worker's shard
// copy, `moesplit make-test-model`). On a terminal one line is rewritten in
// place ("\r<what>: 42% 1.23 of 2.90 GB, 0.85 GB/s"); otherwise a plain line
// every ~10% or every 5 s, whichever comes first. Finish() prints the last
// line: "<what>: 2.90 GB in 6.1 s (0.48 GB/s)".
//
// Thread-safe: Add may be called from several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace moesplit {

class LoadProgress {
 public:
  // `prefix` opens every line ("moesplit-expert-worker: loading experts");
  // `total_bytes` > 0. `terminal`: rewrite one line (default: stderr is a TTY).
  LoadProgress(std::string prefix, uint64_t total_bytes, FILE* out = stderr);
  LoadProgress(std::string prefix, uint64_t total_bytes, FILE* out, bool terminal);
  void Add(uint64_t bytes);
  // Prints the final line (once); returns the seconds since construction.
  double Finish();

  // The text of one progress line and of the final line (no newline).
  static std::string ProgressText(uint64_t done, uint64_t total, double seconds);
  static std::string FinalText(uint64_t total, double seconds);

 private:
  const std::string prefix_;
  const uint64_t total_;
  FILE* const out_;
  const bool terminal_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  uint64_t done_ = 0;                                  // guarded by mu_
  int last_decile_ = 0;                                // guarded by mu_
  std::chrono::steady_clock::time_point last_print_;  // guarded by mu_
  bool finished_ = false;                              // guarded by mu_
};

}  // namespace moesplit
