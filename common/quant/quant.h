// Quantisation formats: dequantisers, quantisers and dot kernels per ggml type,
// behind a registry so SIMD variants slot in beside the scalar reference
// without touching callers.
//
// Block layouts are ggml's (ggml-common.h), bit for bit. Dot products follow
// ggml's scheme: the activation row is first converted to the weight type's
// `vec_dot_type` (Q8_0 blocks of 32 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4,
// Q8_K blocks of 256 for the K-quants and IQ4_XS, F16 for F16, BF16 for BF16,
// F32 for F32), then `vec_dot(n, w_row, act_row)` returns the f32 dot.
//
// Thread-safe: the registry is filled once at static-init / first use;
// kernels are pure functions.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "common/gguf/types.h"

namespace moesplit::quant {

// n is always a multiple of the type's block size.
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
// registered level not above it.
void RegisterVecDot(GgmlType type, KernelLevel level, VecDotFn fn);
// Forces a level (tests); default is the best the CPU supports.
void SetActiveKernelLevel(KernelLevel level);
KernelLevel ActiveKernelLevel();

}  // namespace moesplit::quant
