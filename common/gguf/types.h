// ggml tensor element types as stored in GGUF files: ids, block sizes and
// bytes per block. This is layout knowledge only; dequantisers and kernels
// live in common/quant.
//
// Thread-safe: immutable tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moesplit {

// Values are the on-disk ids of ggml's `enum ggml_type`.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;   // "Q4_K", as ggml_type_name() prints it
  int64_t block_size;      // elements per block
  int64_t type_size;       // bytes per block
};

// Layout of `id`, or nullopt for an id ggml does not define.
std::optional<GgmlTypeInfo> LookupGgmlType(uint32_t id);
const GgmlTypeInfo& TypeInfo(GgmlType type);  // REQUIRES: a defined type
std::string_view GgmlTypeName(GgmlType type);
// Case-insensitive name ("q4_k", "F16") -> type.
std::optional<GgmlType> GgmlTypeFromName(std::string_view name);

// Bytes of one row of `n` elements, or nullopt when n is not a multiple of the
// block size or the size overflows.
std::optional<uint64_t> RowBytes(GgmlType type, int64_t n);

}  // namespace moesplit
