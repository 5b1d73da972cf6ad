// Per-type kernel tables of common/quant, private to the component.
//
// dequant.cc, quantize.cc and vec_dot.cc each own one table of scalar
// functions; quant.cc assembles them into the public TypeTraits registry and
// vec_dot_x86.cc adds SIMD dot kernels. Lookups return nullptr for a type the
// table does not cover. All kernels REQUIRE n to be a multiple of the type's
// block size (the public entry points check it).
//
// Thread-safe: pure functions over constant tables.
#pragma once

#include <vector>

#include "common/gguf/types.h"
#include "common/quant/quant.h"

namespace moesplit::quant::internal {

// dequantize_row_* (ggml-quants.c), bit-exact.
DequantRowFn ScalarDequantizer(GgmlType type);
// quantize_row_*_ref (ggml-quants.c), bit-exact.
QuantRowFn ReferenceQuantizer(GgmlType type);
// ggml_vec_dot_*_generic (ggml-cpu/quants.c, ggml-cpu/vec.cpp); the second
// operand is a row of VecDotType(type).
VecDotFn ScalarVecDot(GgmlType type);
VecDotRowsFn ScalarVecDotRows(GgmlType type);
// ggml's vec_dot_type for a weight type; false when it has no dot kernel.
bool VecDotTypeOf(GgmlType type, GgmlType* out);

struct SimdKernel {
  GgmlType type;
  KernelLevel level;
  VecDotFn fn;
  VecDotRowsFn rows;  // the same kernel over many rows
  VecDotTokensFn tokens = nullptr;  // ... and many tokens, where one pays
};
struct SimdQuantizer {
  GgmlType type;
  KernelLevel level;
  QuantRowFn fn;  // byte-identical to ReferenceQuantizer(type)
};
struct SimdKernels {
  std::vector<SimdKernel> dots;
  std::vector<SimdQuantizer> quantizers;
};

// True when the CPU runs AVX2 + FMA + F16C code (x86-64 only).
bool CpuHasAvx2();
// True when it also has AVX-512 F/BW/VL/DQ/VNNI.
bool CpuHasAvx512Vnni();
// True when it also has AMX-TILE and AMX-INT8 and Linux granted this process
// the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool CpuHasAmxInt8();
// Where the packed kernels' software prefetches put the weight
// lines streaming from DRAM at decode (packed_avx512.cc): L1 (prefetcht0)
// or L2 only (prefetcht1). L2 on AMD family 19h (Zen 3 / Zen 4), where
// prefetcht0 measured slower than prefetcht1 and than no prefetch at all
// (tests/bench/README.md, "On an AVX-512 Zen 4 host"); L1 elsewhere, as
// measured on Zen 5 and the Intel Xeon host. MOESPLIT_PREFETCH=l1 or l2 in
// the environment overrides the choice (read once).
enum class PrefetchLevel { kL1, kL2 };
PrefetchLevel PackedPrefetchLevel();

// Highest level the CPU runs: kAmx, kAvx512, kAvx2 or kScalar.
KernelLevel CpuBestLevel();

// The SIMD kernels the running CPU supports (none on other architectures),
// collected once.
const SimdKernels& CpuSimdKernels();

// Per-level tables (vec_dot_avx2.cc, vec_dot_avx512.cc, quantize_x86.cc);
// only called when the CPU has the level.
void AppendAvx2Kernels(SimdKernels* out);
void AppendAvx512Kernels(SimdKernels* out);
// The AVX-512 i-quant dot that CPUs without VBMI/BITALG get (where the CPU
// has them, AppendAvx512Kernels registers the register-grid kernels for
// IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S instead), so tests check both; nullptr
// for the other types. Only call when CpuHasAvx512Vnni().
VecDotFn Avx512IqDotWithoutVbmi(GgmlType type);
void AppendSimdQuantizers(SimdKernels* out);

// The SIMD dot registered for `type` at exactly `level` by the library
// (nullptr when none): these all compute the canonical order of
// internal/unpack.h for the quantised types.
VecDotFn LibrarySimdVecDot(GgmlType type, KernelLevel level);

}  // namespace moesplit::quant::internal
