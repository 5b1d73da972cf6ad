// Benchmark: a decode step's gated delta rule (internal::DeltaRule) over the
// recurrent state of every DeltaNet layer, one thread, the state read from
// DRAM (the caches flushed before each repetition with a 64 MiB read,
// untimed: in a decode step hundreds of MB of weights stream through the
// caches between one token's recurrence and the next's). The state lives in
// CacheAlignedVector buffers as SequenceState keeps it; the two buffers
// alternate as current and next, as they do there.
//
//   deltanet_bench [layers=6] [value_heads=32] [key_heads=16] [head_dim=128] [reps=30]
//
// Defaults: Qwen3.5-35B-A3B cut to 8 layers (6 of them DeltaNet). Prints the
// best and the mean time per token and per head. Not a test (timing belongs
// in benchmarks).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "common/base/aligned_allocator.h"
#include "common/model/internal/delta_net.h"

namespace {

using moesplit::CacheAlignedVector;
using moesplit::model::internal::DeltaRule;
using moesplit::model::internal::DeltaRuleHead;

int64_t Arg(int argc, char** argv, int i, int64_t def) {
  return argc > i ? std::strtoll(argv[i], nullptr, 10) : def;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t layers = Arg(argc, argv, 1, 6), n_v = Arg(argc, argv, 2, 32);
  const int64_t n_k = Arg(argc, argv, 3, 16), dim = Arg(argc, argv, 4, 128);
  const int64_t reps = Arg(argc, argv, 5, 30);
  if (layers < 1 || n_v < 1 || n_k < 1 || n_v % n_k != 0 || dim < 1 || reps < 1) {
    std::fprintf(stderr, "usage: deltanet_bench [layers] [value_heads] [key_heads] [head_dim] [reps]\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  const int64_t state = n_v * dim * dim;  // one layer's recurrent state
  std::vector<CacheAlignedVector<float>> cur(layers), next(layers);
  for (int64_t l = 0; l < layers; ++l) {
    cur[l].resize(state);
    next[l].resize(state);
    for (float& x : cur[l]) x = dist(rng);
  }
  std::vector<float> q(n_k * dim), k(n_k * dim), v(n_v * dim), g(n_v, -0.1f), beta(n_v, 0.5f);
  std::vector<float> out(n_v * dim);
  for (float& x : q) x = dist(rng);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  std::vector<uint64_t> flush((64 << 20) / sizeof(uint64_t), 1);
  uint64_t flushed = 0;
  double best = 1e30, total = 0;
  for (int64_t r = 0; r < reps; ++r) {
    for (uint64_t x : flush) flushed += x;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < layers; ++l) {
      for (int64_t head = 0; head < n_v; ++head) {
        const int64_t kh = head % n_k;
        DeltaRuleHead h{q.data() + kh * dim, k.data() + kh * dim, v.data() + head * dim,
                        dim, dim, dim, g.data() + head, beta.data() + head, 1,
                        out.data() + head * dim, dim};
        DeltaRule(h, 1, dim, cur[l].data() + head * dim * dim, next[l].data() + head * dim * dim);
      }
      std::swap(cur[l], next[l]);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s);
    total += s;
  }
  double check = 0;
  for (float x : out) check += x;
  if (flushed == 0) check = -1;  // keeps the flush reads
  std::printf(
      "decode delta rule, %lld layers x %lld value heads (%lld key heads) x %lld: best %.3f ms, "
      "mean %.3f ms per token (1 thread, cold caches, %lld reps), best %.2f us per head "
      "(checksum %.6g)\n",
      static_cast<long long>(layers), static_cast<long long>(n_v), static_cast<long long>(n_k),
      static_cast<long long>(dim), best * 1e3, total / reps * 1e3, static_cast<long long>(reps),
      best * 1e6 / (layers * n_v), check);
  return 0;
}
