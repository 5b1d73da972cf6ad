// Benchmark: causal prompt attention on the CPU (internal::AttendGroup), one
// thread, over an f16 KV cache, in the blocks Forward::AttendHeads uses
// (4 tokens x the query heads of one KV head per call).
//
//   attention_bench [tokens=512] [heads=32] [kv_heads=4] [head_dim=128] [reps=5]
//   attention_bench decode [depth=4096] [heads=32] [kv_heads=4] [head_dim=128] [reps=20]
//
// Prints the time of one layer's attention and ns per (query head, position)
// pair; `decode`: one token after `depth` positions (a decode step's
// attention), with the caches flushed before each repetition (64 MiB read,
// untimed): in a decode step the layers' weights stream through the caches
// between one layer's attention and the next step's, so its K/V rows come
// from DRAM. Not a test (timing belongs in benchmarks).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/base/fp16.h"
#include "common/model/internal/attention.h"

namespace {

using moesplit::Fp32ToFp16;
using moesplit::model::internal::AttendGroup;
using moesplit::model::internal::GroupAttention;

int64_t Arg(int argc, char** argv, int i, int64_t def) {
  return argc > i ? std::strtoll(argv[i], nullptr, 10) : def;
}

}  // namespace

int main(int argc, char** argv) {
  const bool decode = argc > 1 && std::string(argv[1]) == "decode";
  if (decode) {
    --argc;
    ++argv;
  }
  const int64_t n = Arg(argc, argv, 1, decode ? 4096 : 512), heads = Arg(argc, argv, 2, 32);
  const int64_t kv_heads = Arg(argc, argv, 3, 4), hd = Arg(argc, argv, 4, 128);
  const int64_t reps = Arg(argc, argv, 5, decode ? 20 : 5);
  if (n < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || hd < 1 || reps < 1) {
    std::fprintf(stderr,
                 "usage: attention_bench [decode] [tokens|depth] [heads] [kv_heads] [head_dim] "
                 "[reps]\n");
    return 2;
  }
  const int64_t group = heads / kv_heads;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> k(n * kv_heads * hd), v(n * kv_heads * hd);
  for (auto& x : k) x = Fp32ToFp16(dist(rng));
  for (auto& x : v) x = Fp32ToFp16(dist(rng));
  std::vector<float> q(n * heads * hd), out(n * heads * hd);
  for (auto& x : q) x = dist(rng);
  constexpr int64_t kBlock = 4;
  std::vector<const float*> qp(kBlock * group);
  std::vector<float*> op(kBlock * group);
  std::vector<int64_t> n_kv(kBlock * group);
  GroupAttention g;
  g.k_stride = g.v_stride = kv_heads * hd;
  g.dk = g.dv = hd;
  g.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  g.q = qp.data();
  g.out = op.data();
  g.n_kv = n_kv.data();
  double best = 1e30;
  if (decode) {
    // One token at position n: every query head of a KV head sees n + 1 positions.
    std::vector<float> q1(heads * hd), out1(heads * hd);
    for (auto& x : q1) x = dist(rng);
    std::vector<uint64_t> flush((64 << 20) / sizeof(uint64_t), 1);
    uint64_t flushed = 0;
    for (int64_t r = 0; r < reps; ++r) {
      for (uint64_t x : flush) flushed += x;
      const auto start = std::chrono::steady_clock::now();
      for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
        g.k = k.data() + kvh * hd;
        g.v = v.data() + kvh * hd;
        g.n_q = 0;
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          qp[g.n_q] = q1.data() + h * hd;
          op[g.n_q] = out1.data() + h * hd;
          n_kv[g.n_q] = n;
          ++g.n_q;
        }
        AttendGroup(g);
      }
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    double check = 0;
    for (float x : out1) check += x;
    if (flushed == 0) check = -1;  // keeps the flush reads
    std::printf(
        "decode attention over %lld positions, %lld heads (%lld KV), head dim %lld: %.3f ms per "
        "layer (1 thread, cold caches, best of %lld), %.2f ns per head-position pair (checksum %.6g)\n",
        static_cast<long long>(n), static_cast<long long>(heads), static_cast<long long>(kv_heads),
        static_cast<long long>(hd), best * 1e3, static_cast<long long>(reps),
        best * 1e9 / (static_cast<double>(heads) * n), check);
    return 0;
  }
  for (int64_t r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t t0 = 0; t0 < n; t0 += kBlock) {
      for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
        g.k = k.data() + kvh * hd;
        g.v = v.data() + kvh * hd;
        g.n_q = 0;
        for (int64_t t = t0; t < std::min(n, t0 + kBlock); ++t) {
          for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
            qp[g.n_q] = q.data() + (t * heads + h) * hd;
            op[g.n_q] = out.data() + (t * heads + h) * hd;
            n_kv[g.n_q] = t + 1;
            ++g.n_q;
          }
        }
        AttendGroup(g);
      }
    }
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double pairs = static_cast<double>(heads) * n * (n + 1) / 2;
  double check = 0;
  for (float x : out) check += x;
  std::printf(
      "attention of %lld tokens, %lld heads (%lld KV), head dim %lld: %.2f ms per layer "
      "(1 thread, best of %lld), %.2f ns per head-position pair (checksum %.6g)\n",
      static_cast<long long>(n), static_cast<long long>(heads), static_cast<long long>(kv_heads),
      static_cast<long long>(hd), best * 1e3, static_cast<long long>(reps), best * 1e9 / pairs,
      check);
  return 0;
}
