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
// ggml's vec_dot_type for a weight type; false when it has no dot kernel.
bool VecDotTypeOf(GgmlType type, GgmlType* out);

struct SimdKernel {
  GgmlType type;
  KernelLevel level;
  VecDotFn fn;
};

// True when the CPU runs AVX2 + FMA + F16C code (x86-64 only).
bool CpuHasAvx2();
// True when it also has AVX-512 F/BW/VL/VNNI.
bool CpuHasAvx512Vnni();

// Appends the AVX2 / AVX-512 dot kernels the running CPU supports (nothing on
// other architectures) and returns the best level the CPU supports.
KernelLevel DetectX86Kernels(std::vector<SimdKernel>* out);

}  // namespace moesplit::quant::internal
