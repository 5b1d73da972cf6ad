// Quantisation formats: dequantisers, quantisers and dot kernels per ggml type,
// behind a registry so SIMD variants slot in beside the scalar reference
// without touching callers.
//
// Block layouts are ggml's (ggml-common.h), bit for bit. Dot products follow
// ggml's scheme: the activation row is first converted to the weight type's
// `vec_dot_type` (Q8_0 blocks of 32 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, Q8_1
// blocks of 32 (with the block sum) for Q4_1/Q5_1 as in ggml, Q8_K blocks of
// 256 for the K-quants and IQ4_XS, F16 for F16, BF16 for BF16, F32 for F32),
// then `vec_dot(n, w_row, act_row)` returns the f32 dot.
//
// Supported types (dequantize + quantize): F32, F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4.
// Supported without a quantiser (dequantize + vec_dot with Q8_K activations,
// as ggml's vec_dot_type for them; QuantizeRow refuses them): IQ1_S, IQ1_M,
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0. Their codebooks are
// in internal/iq_grids.h.
// Every type except the activation formats Q8_1 and Q8_K has a vec_dot.
//  - dequantize: ggml's dequantize_row_*, bit-exact.
//  - quantize: ggml's quantize_row_*_ref (for IQ4_NL / IQ4_XS: quantize_iq4_nl
//    / quantize_iq4_xs without an importance matrix), byte-exact: the output
//    equals what llama-quantize writes without --imatrix.
//  - vec_dot, scalar level: ggml's ggml_vec_dot_*_generic (f32/f16/bf16 sum in
//    f64 as ggml's scalar path; the i-quants' and ternary types' exact integer
//    sums per superblock, then ggml's float steps).
//  - vec_dot, AVX2 and AVX-512 levels (x86-64; every weight type): compiled
//    per function with target attributes and picked at run time from CPUID,
//    so the library needs no -m flags and runs on any x86-64 CPU. For the
//    quantised types they compute the canonical order of internal/unpack.h
//    (exact integer sums, then fixed float steps per block), identical bit
//    for bit at both levels and in the tiled GEMM (gemm.h); that agrees with
//    the scalar level to float rounding. F32/F16/BF16 use 4 x 8 / 4 x 16 lane
//    FMA accumulators (float rounding of the f64 scalar sum).
//  - quantize at the SIMD levels: AVX2 versions of the activation formats
//    (F16, BF16, Q8_0, Q8_1, Q8_K), byte-identical to the reference.
//  - vec_dot_rows: the same kernel over many rows (no call per row, the next
//    rows prefetched), bit-identical to vec_dot.
//  - vec_dot_tokens: the same kernel over many rows and tokens, bit-identical
//    to vec_dot; only where it pays (F32 at the AVX-512 level: the prefill's
//    router products).
// Levels: kScalar; kAvx2 (AVX2 + FMA + F16C); kAvx512 (AVX-512 F/BW/VL/DQ +
// VNNI; byte dots with vpdpbusd); kAmx (AVX-512 plus AMX-TILE/AMX-INT8 with
// the tile state granted by Linux: the vec_dots are the AVX-512 ones, the
// tiled GEMM uses tdpbusd). The default is the best the CPU supports.
//
// Thread-safe: the registry is built once on first use; GetTypeTraits and the
// kernels may be used from any thread. RegisterVecDot and
// SetActiveKernelLevel are meant for start-up and tests: a traits pointer read
// before a level change keeps pointing at the old level's table.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "common/gguf/types.h"

namespace moesplit::quant {

// n is always a multiple of the type's block size. Block buffers are aligned
// like ggml's block structs (2 bytes; 4 for F32 and Q8_K; GGUF data is).
using DequantRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantRowFn = void (*)(const float* src, void* dst, int64_t n);
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
// y[r] = vec_dot(n, w + r * row_bytes, a) for r < n_rows, bit for bit (one
// call for many rows: no per-row call, the next rows prefetched).
using VecDotRowsFn = void (*)(int64_t n, const void* w, uint64_t row_bytes, int64_t n_rows,
                              const void* a, float* y);
// y[t * ldy + r] = vec_dot(n, w + r * row_bytes, a + t * a_row_bytes) for
// r < n_rows, t < n_tokens, bit for bit (register blocks of rows x tokens,
// each load feeding several FMAs).
using VecDotTokensFn = void (*)(int64_t n, const void* w, uint64_t row_bytes, int64_t n_rows,
                                const void* a, uint64_t a_row_bytes, int64_t n_tokens, float* y,
                                int64_t ldy);

enum class KernelLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

struct TypeTraits {
  GgmlType type;
  DequantRowFn dequantize = nullptr;
  QuantRowFn quantize = nullptr;  // nullptr where no quantiser is provided
  GgmlType vec_dot_type = GgmlType::kF32;
  VecDotFn vec_dot = nullptr;     // best registered level <= the active one
  // The multi-row form of this vec_dot; nullptr when a kernel registered
  // through RegisterVecDot is active (callers then loop over vec_dot).
  VecDotRowsFn vec_dot_rows = nullptr;
  // The many-rows, many-tokens form of this vec_dot; nullptr for most types
  // and whenever vec_dot_rows is (callers then loop over the tokens).
  VecDotTokensFn vec_dot_tokens = nullptr;
};

// Traits of `type`, or nullptr when the format is not supported.
const TypeTraits* GetTypeTraits(GgmlType type);

// OkStatus for a supported type; InvalidArgument naming the type otherwise.
absl::Status CheckSupported(GgmlType type);

// True when DequantizeRow decodes `type`: every supported type.
bool CanDequantize(GgmlType type);

// Dequantises n elements. InvalidArgument for a type CanDequantize rejects or
// an n that is not a multiple of the block size.
absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);
// Quantises n elements with the reference quantiser. InvalidArgument when the
// type has no quantiser or n is not a multiple of the block size.
absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

// Registers a dot kernel for a SIMD level; the active level picks the highest
// registered level not above it. fn == nullptr unregisters that level (and a
// registered kernel has no vec_dot_rows). Ignored for unsupported types and
// out-of-range levels. The scalar level is registered for every weight type
// at start-up; on x86-64 so are the AVX2 and AVX-512 kernels of every weight
// type the CPU can run (kAmx uses the AVX-512 ones).
void RegisterVecDot(GgmlType type, KernelLevel level, VecDotFn fn);
// Forces a level (tests, benchmarks); default is the best the CPU supports
// (kAmx needs AMX-INT8 and Linux's permission, kAvx512 AVX-512
// F/BW/VL/DQ/VNNI, kAvx2 AVX2+FMA+F16C). A level above the CPU's runs the
// best kernels the CPU has.
void SetActiveKernelLevel(KernelLevel level);
KernelLevel ActiveKernelLevel();

}  // namespace moesplit::quant
