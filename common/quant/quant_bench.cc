// Throughput of FillRandomBlocks, dequantisation and the dot kernels per
// type and kernel level, in thread CPU time (a benchmark, not a test).
//
//   quant_bench [seconds_per_case=0.2]

#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/quant/internal/test_util.h"
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

template <typename Fn>
double Rate(double seconds, double units_per_call, Fn fn) {
  const double start = CpuSeconds();
  int64_t calls = 0;
  double elapsed = 0;
  do {
    fn();
    ++calls;
    elapsed = CpuSeconds() - start;
  } while (elapsed < seconds);
  return units_per_call * calls / elapsed;
}

const GgmlType kTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,  GgmlType::kQ4_0,   GgmlType::kQ4_1,
    GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,  GgmlType::kQ2_K,   GgmlType::kQ3_K,
    GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,  GgmlType::kIQ4_NL, GgmlType::kIQ4_XS,
    GgmlType::kMXFP4};

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
  std::printf("\n");
}

}  // namespace
}  // namespace moesplit::quant

int main(int argc, char** argv) {
  const double secs = argc > 1 ? std::atof(argv[1]) : 0.2;
  std::printf("active kernel level %d\n", static_cast<int>(moesplit::quant::ActiveKernelLevel()));
  for (moesplit::GgmlType type : moesplit::quant::kTypes) moesplit::quant::BenchType(type, secs);
  return 0;
}
