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
// Every one except the activation formats Q8_1 and Q8_K has a vec_dot.
//  - dequantize: ggml's dequantize_row_*, bit-exact.
//  - quantize: ggml's quantize_row_*_ref (for IQ4_NL / IQ4_XS: quantize_iq4_nl
//    / quantize_iq4_xs without an importance matrix), byte-exact: the output
//    equals what llama-quantize writes without --imatrix.
//  - vec_dot, scalar level: ggml's ggml_vec_dot_*_generic (f32/f16/bf16 sum in
//    f64 as ggml's scalar path). SIMD levels agree to float rounding.
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

enum class KernelLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

struct TypeTraits {
  GgmlType type;
  DequantRowFn dequantize = nullptr;
  QuantRowFn quantize = nullptr;  // nullptr where no quantiser is provided
  GgmlType vec_dot_type = GgmlType::kF32;
  VecDotFn vec_dot = nullptr;     // best registered level <= the active one
};

// Traits of `type`, or nullptr when the format is not supported.
const TypeTraits* GetTypeTraits(GgmlType type);

// OkStatus for a supported type; InvalidArgument naming the type otherwise.
absl::Status CheckSupported(GgmlType type);

// Dequantises n elements. InvalidArgument for an unsupported type or an n that
// is not a multiple of the block size.
absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);
// Quantises n elements with the reference quantiser. InvalidArgument when the
// type has no quantiser or n is not a multiple of the block size.
absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

// Registers a dot kernel for a SIMD level; the active level picks the highest
// registered level not above it. fn == nullptr unregisters that level. Ignored
// for unsupported types and out-of-range levels. The scalar level is
// registered for every weight type at start-up; on x86-64 so are the AVX2
// kernels the CPU can run (Q8_0, Q4_K, Q6_K; they also serve kAvx512/kAmx).
void RegisterVecDot(GgmlType type, KernelLevel level, VecDotFn fn);
// Forces a level (tests); default is the best the CPU supports (kAvx512 needs
// AVX-512 F/BW/VL/VNNI, kAvx2 needs AVX2+FMA+F16C; kAmx is never detected).
void SetActiveKernelLevel(KernelLevel level);
KernelLevel ActiveKernelLevel();

}  // namespace moesplit::quant
