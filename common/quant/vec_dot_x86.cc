// x86 CPU feature detection and the table of SIMD kernels the running CPU
// supports. The kernels themselves live in vec_dot_avx2.cc,
// vec_dot_avx512.cc and quantize_x86.cc, compiled per function with
// __attribute__((target)) / #pragma GCC target, so the library needs no -m
// flags and runs on any x86-64 CPU.

#include <cstdlib>
#include <string_view>
#include <vector>

#include "common/quant/internal/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace moesplit::quant::internal {

#if defined(__x86_64__)

namespace {

// XCR0 (the OS-enabled register state), read with xgetbv.
uint64_t Xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool OsSavesYmmZmm(bool zmm) {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  const uint64_t need = zmm ? 0xE6 : 0x6;  // SSE|AVX (+ opmask, ZMM_Hi256, Hi16_ZMM)
  return (Xcr0() & need) == need;
}

}  // namespace

bool CpuHasAvx2() {
  static const bool have = [] {
    __builtin_cpu_init();
    unsigned eax, ebx, ecx, edx;
    // F16C is CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports lacks it).
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
    return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           OsSavesYmmZmm(false);
  }();
  return have;
}

bool CpuHasAvx512Vnni() {
  static const bool have = CpuHasAvx2() && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512dq") &&
                           __builtin_cpu_supports("avx512vnni") && OsSavesYmmZmm(true);
  return have;
}

PrefetchLevel PackedPrefetchLevel() {
  static const PrefetchLevel level = [] {
    if (const char* env = std::getenv("MOESPLIT_PREFETCH")) {
      if (std::string_view(env) == "l1") return PrefetchLevel::kL1;
      if (std::string_view(env) == "l2") return PrefetchLevel::kL2;
    }
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return PrefetchLevel::kL1;
    const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "AuthenticAMD"
    if (!amd || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return PrefetchLevel::kL1;
    const unsigned family = ((eax >> 8) & 0xF) + ((eax >> 20) & 0xFF);
    return family == 0x19 ? PrefetchLevel::kL2 : PrefetchLevel::kL1;
  }();
  return level;
}

bool CpuHasAmxInt8() {
  static const bool have = [] {
    if (!CpuHasAvx512Vnni()) return false;
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_tile = edx & (1u << 24), amx_int8 = edx & (1u << 25);
    if (!amx_tile || !amx_int8) return false;
    const uint64_t tile_state = (1ull << 17) | (1ull << 18);  // XTILECFG | XTILEDATA
    if ((Xcr0() & tile_state) != tile_state) return false;
    // Linux (5.16+) hands out the 8 KiB tile data state only on request.
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return have;
}

KernelLevel CpuBestLevel() {
  if (CpuHasAmxInt8()) return KernelLevel::kAmx;
  if (CpuHasAvx512Vnni()) return KernelLevel::kAvx512;
  if (CpuHasAvx2()) return KernelLevel::kAvx2;
  return KernelLevel::kScalar;
}

const SimdKernels& CpuSimdKernels() {
  static const SimdKernels* const kernels = [] {
    auto* k = new SimdKernels;
    if (CpuHasAvx2()) {
      AppendAvx2Kernels(k);
      AppendSimdQuantizers(k);
    }
    if (CpuHasAvx512Vnni()) AppendAvx512Kernels(k);
    return k;
  }();
  return *kernels;
}

#else

bool CpuHasAvx2() { return false; }
bool CpuHasAvx512Vnni() { return false; }
bool CpuHasAmxInt8() { return false; }
PrefetchLevel PackedPrefetchLevel() { return PrefetchLevel::kL1; }
KernelLevel CpuBestLevel() { return KernelLevel::kScalar; }
const SimdKernels& CpuSimdKernels() {
  static const SimdKernels* const kernels = new SimdKernels;
  return *kernels;
}

#endif

VecDotFn LibrarySimdVecDot(GgmlType type, KernelLevel level) {
  for (const SimdKernel& k : CpuSimdKernels().dots) {
    if (k.type == type && k.level == level) return k.fn;
  }
  return nullptr;
}

}  // namespace moesplit::quant::internal
