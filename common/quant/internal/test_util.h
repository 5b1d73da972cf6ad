// Helpers shared by the common/quant tests (not part of the library).
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/gguf/types.h"
#include "common/quant/quant.h"

namespace moesplit::quant::testing {

inline std::string FixturePath(const std::string& rel) {
  return std::string(MOESPLIT_FIXTURES_DIR) + "/" + rel;
}

// Whole file as little-endian float32 values; empty when unreadable.
inline std::vector<float> ReadF32File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  std::vector<float> v(size / 4);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

// Gaussian values with a few outliers, as real activations have.
inline std::vector<float> RandomActivations(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  for (int64_t i = 0; i < n; i += 97) v[i] *= 6.0f;
  return v;
}

inline std::vector<uint8_t> Bytes(GgmlType type, int64_t n) {
  return std::vector<uint8_t>(*RowBytes(type, n));
}

inline std::vector<float> Dequant(GgmlType type, const void* data, int64_t n) {
  std::vector<float> out(n);
  if (!DequantizeRow(type, data, out.data(), n).ok()) out.assign(n, NAN);
  return out;
}

// Weight types that have a dot kernel (the ones MatMul accepts).
inline const std::vector<GgmlType>& WeightTypes() {
  static const std::vector<GgmlType> kTypes = {
      GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,  GgmlType::kQ4_0,
      GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,  GgmlType::kQ8_0,
      GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,  GgmlType::kQ5_K,
      GgmlType::kQ6_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kMXFP4,
      GgmlType::kIQ1_S, GgmlType::kIQ1_M, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
      GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kTQ1_0, GgmlType::kTQ2_0};
  return kTypes;
}

// The weight types without a quantiser (their tensors come from files or
// FillRandomBlocks): the i-quants and the ternary types.
inline const std::vector<GgmlType>& NoQuantizerTypes() {
  static const std::vector<GgmlType> kTypes = {
      GgmlType::kIQ1_S,   GgmlType::kIQ1_M,  GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S,
      GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,  GgmlType::kTQ1_0,   GgmlType::kTQ2_0};
  return kTypes;
}

inline std::string Name(GgmlType type) { return std::string(GgmlTypeName(type)); }

}  // namespace moesplit::quant::testing
