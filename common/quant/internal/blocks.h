// ggml block layouts (ggml-common.h) and value tables, private to common/quant.
//
// Every struct is byte-for-byte the ggml struct of the same name; the
// static_asserts pin the sizes to common/gguf/types.cc. Half-precision fields
// are raw IEEE binary16 bits (uint16_t); convert with common/base/fp16.h.
//
// Thread-safe: types and constant tables only.
#pragma once

#include <cstdint>

#include "common/gguf/types.h"

namespace moesplit::quant::internal {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK4_NL = 32;
inline constexpr int kQKMxfp4 = 32;
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleSize = 12;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;  // d * sum(qs)
  int8_t qs[kQK8_1];
};
struct BlockMxfp4 {
  uint8_t e;  // E8M0 shared exponent
  uint8_t qs[kQKMxfp4 / 2];
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low nibble scale, high nibble min
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[kQK4_NL / 2];
};
struct BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};

// i-quants (ggml block_iq*): grid indices into the codebooks of
// internal/iq_grids.h, with per-group signs and sub-block scales.
struct BlockIq2Xxs {
  uint16_t d;
  uint16_t qs[kQK_K / 8];  // per 32 values: 4 grid bytes, then 4x7 sign bits + 4-bit scale
};
struct BlockIq2Xs {
  uint16_t d;
  uint16_t qs[kQK_K / 8];  // 9-bit grid index | 7 sign bits << 9
  uint8_t scales[kQK_K / 32];
};
struct BlockIq2S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];  // low 8 grid bits (first half), sign bytes (second half)
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
struct BlockIq3Xxs {
  uint16_t d;
  uint8_t qs[3 * kQK_K / 8];  // 64 grid bytes, then 8 x (4x7 sign bits + 4-bit scale)
};
inline constexpr int kIq3SNScale = kQK_K / 64;
struct BlockIq3S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kIq3SNScale];
};
struct BlockIq1S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];  // 4x3 high grid bits, 3-bit scale, delta sign
};
struct BlockIq1M {
  uint8_t qs[kQK_K / 8];      // grid index, low 8 bits
  uint8_t qh[kQK_K / 16];     // grid index, high 3 bits + delta sign (two groups of 8)
  uint8_t scales[kQK_K / 32]; // 3-bit sub-block scales; the f16 scale in the top nibbles
};
// Ternary (ggml block_tq*): digits in {0, 1, 2} meaning {-1, 0, 1}.
struct BlockTq1_0 {
  uint8_t qs[(kQK_K - 4 * kQK_K / 64) / 5];  // 5 base-3 digits per byte
  uint8_t qh[kQK_K / 64];                    // 4 base-3 digits per byte
  uint16_t d;
};
struct BlockTq2_0 {
  uint8_t qs[kQK_K / 4];  // 2 bits per digit
  uint16_t d;
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockMxfp4) == 17);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockIq4Xs) == 136);
static_assert(sizeof(BlockIq2Xxs) == 66);
static_assert(sizeof(BlockIq2Xs) == 74);
static_assert(sizeof(BlockIq2S) == 82);
static_assert(sizeof(BlockIq3Xxs) == 98);
static_assert(sizeof(BlockIq3S) == 110);
static_assert(sizeof(BlockIq1S) == 50);
static_assert(sizeof(BlockIq1M) == 56);
static_assert(sizeof(BlockTq1_0) == 54);
static_assert(sizeof(BlockTq2_0) == 66);
static_assert(alignof(BlockIq1M) == 1);  // no f16 field: the scale is spread over `scales`

// Byte alignment of one element or block of `type` (alignof its struct);
// GGUF data sections (32-byte aligned, whole blocks) always satisfy it.
inline uint64_t BlockAlignment(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kQ8_K:
      return 4;
    case GgmlType::kMXFP4:
    case GgmlType::kIQ1_M:
    case GgmlType::kI8:
      return 1;
    case GgmlType::kI64:
    case GgmlType::kF64:
      return 8;
    case GgmlType::kI32:
      return 4;
    default:
      return 2;
  }
}

// Non-linear 4-bit codebook of IQ4_NL / IQ4_XS (ggml kvalues_iq4nl).
inline constexpr int8_t kValuesIq4Nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values doubled (ggml kvalues_mxfp4); the E8M0 scale is halved to match.
inline constexpr int8_t kValuesMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// ggml_e8m0_to_fp32_half: 2^(e - 128) as f32, exact for every byte.
inline float E8m0ToFp32Half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Unpacks scale j (0..7) and min of a Q4_K / Q5_K block (ggml get_scale_min_k4).
inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// Packs 6-bit scale/min j into a Q4_K / Q5_K scales array (inverse of above).
// REQUIRES: the array was zeroed before the first call for this block.
inline void PutScaleMinK4(int j, uint8_t ls, uint8_t lm, uint8_t* q) {
  if (j < 4) {
    q[j] = static_cast<uint8_t>((q[j] & 0xC0) | ls);
    q[j + 4] = static_cast<uint8_t>((q[j + 4] & 0xC0) | lm);
  } else {
    q[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    q[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    q[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

// Unpacks the 16 6-bit Q3_K scales to int8 values (still biased by +32).
inline void UnpackQ3KScales(const uint8_t* packed, int8_t out[16]) {
  uint32_t aux[4];
  __builtin_memcpy(aux, packed, 12);
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  __builtin_memcpy(out, aux, 16);
}

// Packs biased 6-bit Q3_K scale l (0..63) for sub-block j.
// REQUIRES: the 12 bytes were zeroed before the first call for this block.
inline void PutQ3KScale(int j, int l, uint8_t* scales) {
  if (j < 8) {
    scales[j] |= static_cast<uint8_t>(l & 0xF);
  } else {
    scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
  }
  scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
}

}  // namespace moesplit::quant::internal
