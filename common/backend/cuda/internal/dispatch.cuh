// Format dispatch for the kernels: MS_DISPATCH_FORMAT(type, F, body) runs
// `body` with `F` a constexpr GgmlType for every format block_codec.h
// decodes, and evaluates to false for any other type. nvcc only.
#pragma once

#include "common/backend/cuda/internal/block_codec.h"

#define MS_FORMAT_CASE(T, F, ...)                    \
  case GgmlType::T: {                                \
    constexpr GgmlType F = GgmlType::T;              \
    __VA_ARGS__;                                     \
    return true;                                     \
  }

// Used inside a lambda or function returning bool.
#define MS_SWITCH_FORMAT(type, F, ...)               \
  switch (type) {                                    \
    MS_FORMAT_CASE(kF32, F, __VA_ARGS__)             \
    MS_FORMAT_CASE(kF16, F, __VA_ARGS__)             \
    MS_FORMAT_CASE(kBF16, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ4_0, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ4_1, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ5_0, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ5_1, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ8_0, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ8_1, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kMXFP4, F, __VA_ARGS__)           \
    MS_FORMAT_CASE(kQ2_K, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ3_K, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ4_K, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ5_K, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ6_K, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kQ8_K, F, __VA_ARGS__)            \
    MS_FORMAT_CASE(kIQ4_NL, F, __VA_ARGS__)          \
    MS_FORMAT_CASE(kIQ4_XS, F, __VA_ARGS__)          \
    MS_FORMAT_CASE(kIQ2_XXS, F, __VA_ARGS__)         \
    MS_FORMAT_CASE(kIQ2_XS, F, __VA_ARGS__)          \
    MS_FORMAT_CASE(kIQ2_S, F, __VA_ARGS__)           \
    MS_FORMAT_CASE(kIQ3_XXS, F, __VA_ARGS__)         \
    MS_FORMAT_CASE(kIQ3_S, F, __VA_ARGS__)           \
    MS_FORMAT_CASE(kIQ1_S, F, __VA_ARGS__)           \
    MS_FORMAT_CASE(kIQ1_M, F, __VA_ARGS__)           \
    MS_FORMAT_CASE(kTQ1_0, F, __VA_ARGS__)           \
    MS_FORMAT_CASE(kTQ2_0, F, __VA_ARGS__)           \
    default:                                         \
      return false;                                  \
  }
