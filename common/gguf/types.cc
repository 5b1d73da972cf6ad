#include "common/gguf/types.h"

#include <array>
#include <limits>

#include "absl/strings/match.h"
#include "common/base/status.h"

namespace moesplit {
namespace {

constexpr std::array kTypes = {
    GgmlTypeInfo{GgmlType::kF32, "F32", 1, 4},
    GgmlTypeInfo{GgmlType::kF16, "F16", 1, 2},
    GgmlTypeInfo{GgmlType::kQ4_0, "Q4_0", 32, 18},
    GgmlTypeInfo{GgmlType::kQ4_1, "Q4_1", 32, 20},
    GgmlTypeInfo{GgmlType::kQ5_0, "Q5_0", 32, 22},
    GgmlTypeInfo{GgmlType::kQ5_1, "Q5_1", 32, 24},
    GgmlTypeInfo{GgmlType::kQ8_0, "Q8_0", 32, 34},
    GgmlTypeInfo{GgmlType::kQ8_1, "Q8_1", 32, 36},
    GgmlTypeInfo{GgmlType::kQ2_K, "Q2_K", 256, 84},
    GgmlTypeInfo{GgmlType::kQ3_K, "Q3_K", 256, 110},
    GgmlTypeInfo{GgmlType::kQ4_K, "Q4_K", 256, 144},
    GgmlTypeInfo{GgmlType::kQ5_K, "Q5_K", 256, 176},
    GgmlTypeInfo{GgmlType::kQ6_K, "Q6_K", 256, 210},
    GgmlTypeInfo{GgmlType::kQ8_K, "Q8_K", 256, 292},
    GgmlTypeInfo{GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66},
    GgmlTypeInfo{GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    GgmlTypeInfo{GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98},
    GgmlTypeInfo{GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    GgmlTypeInfo{GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},
    GgmlTypeInfo{GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    GgmlTypeInfo{GgmlType::kIQ2_S, "IQ2_S", 256, 82},
    GgmlTypeInfo{GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    GgmlTypeInfo{GgmlType::kI8, "I8", 1, 1},
    GgmlTypeInfo{GgmlType::kI16, "I16", 1, 2},
    GgmlTypeInfo{GgmlType::kI32, "I32", 1, 4},
    GgmlTypeInfo{GgmlType::kI64, "I64", 1, 8},
    GgmlTypeInfo{GgmlType::kF64, "F64", 1, 8},
    GgmlTypeInfo{GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    GgmlTypeInfo{GgmlType::kBF16, "BF16", 1, 2},
    GgmlTypeInfo{GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    GgmlTypeInfo{GgmlType::kTQ2_0, "TQ2_0", 256, 66},
    GgmlTypeInfo{GgmlType::kMXFP4, "MXFP4", 32, 17},
};

}  // namespace

std::optional<GgmlTypeInfo> LookupGgmlType(uint32_t id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

const GgmlTypeInfo& TypeInfo(GgmlType type) {
  for (const auto& t : kTypes) {
    if (t.type == type) return t;
  }
  return kTypes[0];  // unreachable for defined types
}

std::string_view GgmlTypeName(GgmlType type) { return TypeInfo(type).name; }

std::optional<GgmlType> GgmlTypeFromName(std::string_view name) {
  for (const auto& t : kTypes) {
    if (absl::EqualsIgnoreCase(AbslView(t.name), AbslView(name))) return t.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> RowBytes(GgmlType type, int64_t n) {
  const GgmlTypeInfo& info = TypeInfo(type);
  if (n < 0 || n % info.block_size != 0) return std::nullopt;
  const uint64_t blocks = static_cast<uint64_t>(n / info.block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / info.type_size) {
    return std::nullopt;
  }
  return blocks * static_cast<uint64_t>(info.type_size);
}

}  // namespace moesplit
