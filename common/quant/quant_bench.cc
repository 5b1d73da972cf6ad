// Throughput of FillRandomBlocks, dequantisation, the dot kernels (n = 4096,
// data in L1/L2) per type and kernel level, and of the activation
// quantisers, in thread CPU time (a benchmark, not a test).
//
//   quant_bench [seconds_per_case=0.2] [packed [TYPE]]   (packed: only the packed-layout
//                                                        lines, of TYPE if given, then
//                                                        with DeepSeek-V3's expert shapes)
//   quant_bench [seconds_per_case=0.2] matvec [threads=2] [MiB=512] [TYPE] [columns=2048]
//   quant_bench [seconds_per_case=0.2] dots TYPE...      (only those types' dot and
//                                                        32-token lines)
//
// matvec: one-token MatMul (a decode step's dense product, e.g. the output
// head) of a matrix of about MiB MiB with 2048 columns (or `columns`; 2880 is
// gpt-oss's experts), far larger than the caches, on `threads` threads, in
// GB/s of weight bytes, next to the DRAM read bandwidth of the same threads
// measured alternately in the same run; of TYPE only if given.

#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/base/memory_bandwidth.h"
#include "common/base/thread_pool.h"
#include "common/quant/internal/test_util.h"
#include "common/quant/matmul.h"
#include "common/quant/gemm.h"
#include "common/quant/packed.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"

namespace moesplit::quant {
namespace {

// Thread CPU time, so other processes on a shared machine do not skew it.
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Calls fn in batches (the thread CPU clock is a system call, far slower
// than one small kernel call) until `seconds` have passed.
template <typename Fn>
double Rate(double seconds, double units_per_call, Fn fn) {
  const double start = CpuSeconds();
  int64_t calls = 0, batch = 1;
  double elapsed = 0;
  do {
    for (int64_t i = 0; i < batch; ++i) fn();
    calls += batch;
    batch *= 2;
    elapsed = CpuSeconds() - start;
  } while (elapsed < seconds);
  return units_per_call * calls / elapsed;
}

const GgmlType kTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,  GgmlType::kQ4_0,   GgmlType::kQ4_1,
    GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,  GgmlType::kQ2_K,   GgmlType::kQ3_K,
    GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,  GgmlType::kIQ4_NL, GgmlType::kIQ4_XS,
    GgmlType::kMXFP4, GgmlType::kIQ1_S, GgmlType::kIQ1_M, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS,
    GgmlType::kIQ2_S, GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kTQ1_0, GgmlType::kTQ2_0};

void BenchType(GgmlType type, double secs) {
  const int64_t n_fill = 1 << 22, n_dot = 4096;
  std::vector<uint8_t> buf = testing::Bytes(type, n_fill);
  const double fill_gbs = Rate(secs, buf.size() / 1e9, [&] {
    (void)FillRandomBlocks(type, 1, 0.02f, buf.data(), n_fill);
  });
  std::vector<float> out(n_fill);
  const double deq_gelem = Rate(secs, n_fill / 1e9, [&] {
    (void)DequantizeRow(type, buf.data(), out.data(), n_fill);
  });
  const TypeTraits* t = GetTypeTraits(type);
  const std::vector<float> x = testing::RandomActivations(n_dot, 1);
  std::vector<uint8_t> a = testing::Bytes(t->vec_dot_type, n_dot);
  (void)QuantizeRow(t->vec_dot_type, x.data(), a.data(), n_dot);
  std::printf("%-7s fill %6.2f GB/s  dequant %6.2f Gelem/s  dot(Gelem/s):", testing::Name(type).c_str(),
              fill_gbs, deq_gelem);
  const KernelLevel saved = ActiveKernelLevel();
  for (KernelLevel level : {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512}) {
    if (static_cast<int>(level) > static_cast<int>(saved)) break;
    SetActiveKernelLevel(level);
    const VecDotFn dot = GetTypeTraits(type)->vec_dot;
    volatile float sink = 0;
    const double rate = Rate(secs, n_dot / 1e9, [&] { sink = sink + dot(n_dot, buf.data(), a.data()); });
    std::printf("  L%d %6.2f", static_cast<int>(level), rate);
  }
  SetActiveKernelLevel(saved);
  // 32 tokens through MatMul on one thread (GGUF rows: the tiled GEMM where
  // the type has one), a 768 x 2048 matrix in cache, in Gmac/s.
  if (TypeInfo(type).block_size > 1) {
    const int64_t rows = 768, cols = 2048, tokens = 32;
    std::vector<uint8_t> w = testing::Bytes(type, rows * cols);
    (void)FillRandomBlocks(type, 4, 0.02f, w.data(), rows * cols);
    const std::vector<float> xs = testing::RandomActivations(tokens * cols, 5);
    std::vector<float> ys(tokens * rows);
    const WeightView v{type, w.data(), rows, cols, *RowBytes(type, cols), false};
    std::printf("  32-token MatMul %6.1f Gmac/s", Rate(secs, rows * cols * tokens / 1e9, [&] {
                  (void)MatMul(v, xs.data(), tokens, ys.data(), nullptr);
                }));
  }
  std::printf("\n");
}

// Activation conversion (the quantiser of each level) in Gelem/s.
void BenchQuantizer(GgmlType type, double secs) {
  const int64_t n = 4096;
  const std::vector<float> x = testing::RandomActivations(n, 2);
  std::vector<uint8_t> out = testing::Bytes(type, n);
  std::printf("%-7s quantize(Gelem/s):", testing::Name(type).c_str());
  const KernelLevel saved = ActiveKernelLevel();
  for (KernelLevel level : {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512}) {
    if (static_cast<int>(level) > static_cast<int>(saved)) break;
    SetActiveKernelLevel(level);
    const QuantRowFn q = GetTypeTraits(type)->quantize;
    std::printf("  L%d %6.2f", static_cast<int>(level), Rate(secs, n / 1e9, [&] { q(x.data(), out.data(), n); }));
  }
  SetActiveKernelLevel(saved);
  std::printf("\n");
}

// The packed layout (packed.h) against the GGUF kernels on one expert-sized
// matrix (rows x cols: 768 x 2048 is Qwen3-30B-A3B's gate/up, 2048 x 768 its
// down) held in cache, and on 64 of them (out of cache):
// GB/s of GGUF weight bytes for one token (decode), and tokens x rows x
// columns multiply-adds per second for 32 tokens (prefill). Where the CPU
// does not prefer the packed layout (PackedPreferred) its columns read 0.
void BenchPacked(GgmlType type, double secs, int64_t rows, int64_t cols) {
  if (!PackedLayoutExists(type)) return;
  const bool packed_ok = PackedPreferred(type);
  const uint64_t rb = *RowBytes(type, cols);
  for (int64_t copies : {1, 64}) {
    std::vector<uint8_t> w(rb * rows * copies);
    (void)FillRandomBlocks(type, 3, 0.02f, w.data(), rows * cols * copies);
    const uint64_t pb = packed_ok ? PackedMatrixBytes(type, rows, cols) : 0;
    std::vector<uint8_t> p(pb * copies);
    const double t_pack = CpuSeconds();
    for (int64_t c = 0; c < copies && packed_ok; ++c) PackRows(type, w.data() + c * rb * rows, rb, rows, cols, p.data() + c * pb);
    if (copies > 1 && packed_ok) std::printf("%-5s packing: %.2f GB/s of GGUF bytes\n", testing::Name(type).c_str(), rb * rows * copies / 1e9 / (CpuSeconds() - t_pack));
    const int64_t n_tok = 32;
    const GgmlType act_type = GetTypeTraits(type)->vec_dot_type;
    std::vector<std::vector<uint8_t>> act;
    std::vector<const uint8_t*> ptrs;
    for (int64_t t = 0; t < n_tok; ++t) {
      const std::vector<float> x = testing::RandomActivations(cols, 10 + t);
      act.push_back(testing::Bytes(act_type, cols));
      (void)QuantizeRow(act_type, x.data(), act.back().data(), cols);
      ptrs.push_back(act.back().data());
    }
    std::vector<float> y(rows * n_tok);
    const TypeTraits* t = GetTypeTraits(type);
    int64_t c = 0;
    const double gguf = Rate(secs, rb * rows / 1e9, [&] {
      t->vec_dot_rows(cols, w.data() + (c++ % copies) * rb * rows, rb, rows, ptrs[0], y.data());
    });
    const double packed = !packed_ok ? 0.0 : Rate(secs, rb * rows / 1e9, [&] {
      PackedGemm({type, p.data() + (c++ % copies) * pb, rows, cols}, 0, rows, ptrs.data(), 1, y.data(), rows);
    });
    std::vector<uint8_t> tiles(ActTileBytes(cols, n_tok) + 64), scratch(TileGemmScratchBytes(type, cols) + 64);
    auto align = [](uint8_t* q) { return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(q) + 63) & ~uintptr_t{63}); };
    PackActTiles(act_type, ptrs.data(), n_tok, cols, align(tiles.data()));
    const double macs = static_cast<double>(rows) * cols * n_tok / 1e9;
    const double tiled = !TileGemmAvailable(type) ? 0.0 : Rate(secs, macs, [&] {
      TileGemm({type, w.data() + (c++ % copies) * rb * rows, rows, cols, rb}, 0, rows, align(tiles.data()), n_tok,
               y.data(), rows, align(scratch.data()));
    });
    const double packed_mm = !packed_ok ? 0.0 : Rate(secs, macs, [&] {
      PackedGemm({type, p.data() + (c++ % copies) * pb, rows, cols}, 0, rows, ptrs.data(), n_tok, y.data(), rows);
    });
    std::printf("%-5s %4lldx%-4lld %s: 1 token  GGUF rows %6.2f GB/s, packed %6.2f GB/s;  32 tokens  tiled %6.1f, packed %6.1f Gmac/s\n",
                testing::Name(type).c_str(), static_cast<long long>(rows), static_cast<long long>(cols),
                copies == 1 ? "in cache    " : "out of cache", gguf, packed, tiled, packed_mm);
  }
}

// Wall-clock seconds (the matvec runs on several threads).
double WallSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void BenchMatVec(double secs, int threads, int64_t mib, const std::string& only, int64_t cols) {
  ThreadPool pool(threads);
  DramReader dram(&pool);
  std::printf("one-token MatMul, %d threads, %lld MiB matrices x %lld columns (GB/s of weight bytes)\n", threads,
              static_cast<long long>(mib), static_cast<long long>(cols));
  bool matched = false;
  for (GgmlType type :
       {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_0, GgmlType::kMXFP4, GgmlType::kQ5_0,
        GgmlType::kIQ1_S, GgmlType::kIQ1_M, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
        GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kTQ1_0, GgmlType::kTQ2_0}) {
    if (!only.empty() && testing::Name(type) != only) continue;
    matched = true;
    const std::optional<uint64_t> row_bytes = RowBytes(type, cols);
    if (!row_bytes) {  // e.g. 2880 columns are not whole 256-column superblocks
      std::printf("%-5s  skipped: %lld columns are not whole blocks\n", testing::Name(type).c_str(),
                  static_cast<long long>(cols));
      continue;
    }
    const uint64_t rb = *row_bytes;
    const int64_t rows = static_cast<int64_t>((static_cast<uint64_t>(mib) << 20) / rb) / 16 * 16;
    std::vector<uint8_t> w(rb * rows);
    (void)FillRandomBlocks(type, 5, 0.02f, w.data(), rows * cols);
    std::vector<uint8_t> p;
    if (PackedPreferred(type)) {
      p.resize(PackedMatrixBytes(type, rows, cols));
      PackRows(type, w.data(), rb, rows, cols, p.data());
    }
    const std::vector<float> x = testing::RandomActivations(cols, 3);
    std::vector<float> y(rows);
    const double bytes = static_cast<double>(rb) * rows;
    auto rate = [&](const WeightView& v) {
      (void)MatMul(v, x.data(), 1, y.data(), &pool);  // warm
      int64_t n = 0;
      const double t0 = WallSeconds();
      double el = 0;
      do {
        (void)MatMul(v, x.data(), 1, y.data(), &pool);
        ++n;
        el = WallSeconds() - t0;
      } while (el < secs);
      return bytes * n / el / 1e9;
    };
    double gguf = 0, packed = 0, ram = 0;
    for (int round = 0; round < 3; ++round) {  // alternated, best of 3 each
      ram = std::max(ram, dram.MeasureGbps(1));
      gguf = std::max(gguf, rate({type, w.data(), rows, cols, rb, false}));
      if (!p.empty()) packed = std::max(packed, rate({type, p.data(), rows, cols, rb, true}));
    }
    std::printf("%-7s  DRAM read %6.2f  GGUF rows %6.2f (%3.0f%%)  packed %6.2f (%3.0f%%)\n", testing::Name(type).c_str(),
                ram, gguf, 100 * gguf / ram, packed, 100 * packed / ram);
  }
  if (!matched) {
    std::fprintf(stderr,
                 "quant_bench: matvec has no type '%s' (Q4_K Q5_K Q6_K Q8_0 MXFP4 Q5_0 IQ1_S IQ1_M IQ2_XXS "
                 "IQ2_XS IQ2_S IQ3_XXS IQ3_S TQ1_0 TQ2_0)\n",
                 only.c_str());
    std::exit(2);
  }
}

}  // namespace
}  // namespace moesplit::quant

int main(int argc, char** argv) {
  const double secs = argc > 1 ? std::atof(argv[1]) : 0.2;
  if (argc > 2 && std::string(argv[2]) == "matvec") {
    moesplit::quant::BenchMatVec(secs, argc > 3 ? std::atoi(argv[3]) : 2, argc > 4 ? std::atoll(argv[4]) : 512,
                                 argc > 5 ? argv[5] : "", argc > 6 ? std::atoll(argv[6]) : 2048);
    return 0;
  }
  std::printf("active kernel level %d\n", static_cast<int>(moesplit::quant::ActiveKernelLevel()));
  if (argc > 2 && std::string(argv[2]) == "dots") {
    for (int k = 3; k < argc; ++k) {
      bool known = false;
      for (moesplit::GgmlType type : moesplit::quant::kTypes) {
        if (moesplit::quant::testing::Name(type) != argv[k]) continue;
        moesplit::quant::BenchType(type, secs);
        known = true;
      }
      if (!known) {
        std::fprintf(stderr, "quant_bench: unknown type '%s'\n", argv[k]);
        return 2;
      }
    }
    return 0;
  }
  // "packed [TYPE]": only that type's packed figures.
  const std::string only = argc > 3 && std::string(argv[2]) == "packed" ? argv[3] : "";
  bool matched = false;
  for (moesplit::GgmlType type : {moesplit::GgmlType::kQ4_K, moesplit::GgmlType::kQ5_K, moesplit::GgmlType::kQ6_K,
                                  moesplit::GgmlType::kQ8_0, moesplit::GgmlType::kMXFP4, moesplit::GgmlType::kQ5_0}) {
    if (!only.empty() && moesplit::quant::testing::Name(type) != only) continue;
    moesplit::quant::BenchPacked(type, secs, 768, 2048);
    moesplit::quant::BenchPacked(type, secs, 2048, 768);
    if (!only.empty()) {  // DeepSeek-V3's expert shapes (gate/up, down): wide strips
      moesplit::quant::BenchPacked(type, secs, 2048, 7168);
      moesplit::quant::BenchPacked(type, secs, 7168, 2048);
    }
    matched = true;
  }
  if (!matched) {
    std::fprintf(stderr, "quant_bench: no packed layout for type '%s' (Q4_K Q5_K Q6_K Q8_0 MXFP4 Q5_0)\n",
                 only.c_str());
    return 2;
  }
  if (argc > 2 && std::string(argv[2]) == "packed") return 0;
  for (moesplit::GgmlType type : moesplit::quant::kTypes) moesplit::quant::BenchType(type, secs);
  for (moesplit::GgmlType type : {moesplit::GgmlType::kQ8_0, moesplit::GgmlType::kQ8_1, moesplit::GgmlType::kQ8_K,
                                  moesplit::GgmlType::kF16, moesplit::GgmlType::kBF16}) {
    moesplit::quant::BenchQuantizer(type, secs);
  }
  return 0;
}
