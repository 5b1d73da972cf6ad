// Element decoders and KV-cache block encoders of the ggml block formats,
// written once for the host and the device (__host__ __device__ under nvcc,
// plain inline functions otherwise) so that the CPU test suite checks the
// very code the kernels run against common/quant's dequantisers
// (block_codec_test.cc), with no GPU needed.
//
//   DecodeElement<T>(block, i)  value i (0 <= i < BlockElems<T>()) of one
//                               block of format T, with the float operations
//                               of ggml's dequantize_row_* in the same order
//                               (kernels are built with --fmad=false, so the
//                               device result is the host's to the bit).
//   EncodeQ8_0 / EncodeQ4_0     ggml's quantize_row_q8_0_ref / q4_0_ref for
//                               one block of 32 floats (KV cache writes).
//
// Block layouts: common/quant/internal/blocks.h (ggml-common.h). Blocks are
// read byte-wise (no alignment assumption beyond that of the row).
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/gguf/types.h"
#include "common/quant/internal/iq_grids.h"

#if defined(__CUDACC__)
#define MS_HD __host__ __device__ __forceinline__
#else
#define MS_HD inline
#endif

namespace moesplit::cuda::codec {

MS_HD float BitsToFloat(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(w);
#else
  float f;
  std::memcpy(&f, &w, 4);
  return f;
#endif
}
MS_HD uint32_t FloatToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t w;
  std::memcpy(&w, &f, 4);
  return w;
#endif
}

// IEEE binary16 -> binary32, exact (as common/base/fp16.h).
MS_HD float HalfToFloat(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t man = h & 0x3FF;
  if (exp == 0x1F) return BitsToFloat(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return BitsToFloat(sign);
    // Subnormal: value = man * 2^-24, exact in f32.
    const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return BitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
}

// binary32 -> binary16, round to nearest even (overflow -> inf, NaN kept).
MS_HD uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 -> inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or 0
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 -> 0
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 .. 24 for the subnormal range
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;
  return static_cast<uint16_t>(sign | r);
}

MS_HD float Bf16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

MS_HD uint16_t Load16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
MS_HD uint32_t Load32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// kvalues_iq4nl and kvalues_mxfp4 (doubled E2M1) packed 8 per uint64.
MS_HD int Iq4NlValue(int idx) {
  const uint64_t lo = 0xF6EADDCFBFAD9881ull;  // -127 -104 -83 -65 -49 -35 -22 -10
  const uint64_t hi = 0x7159453526190D01ull;  // 1 13 25 38 53 69 89 113 (low byte first)
  const uint64_t w = idx < 8 ? lo : hi;
  return static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * (idx & 7))));
}
MS_HD int Mxfp4Value(int idx) {
  const uint64_t lo = 0x0C08060403020100ull;  // 0 1 2 3 4 6 8 12
  const uint64_t hi = 0xF4F8FAFCFDFEFF00ull;  // 0 -1 -2 -3 -4 -6 -8 -12
  const uint64_t w = idx < 8 ? lo : hi;
  return static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * (idx & 7))));
}
MS_HD float E8m0Half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return BitsToFloat(bits);
}

// Q4_K / Q5_K 6-bit scale and min j (ggml get_scale_min_k4).
MS_HD void ScaleMinK4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K scale s (0..15), unbiased (ggml's unpacked scales - 32).
MS_HD int Q3KScale(const uint8_t* sc, int s) {
  const int low = s < 8 ? (sc[s] & 0xF) : (sc[s - 8] >> 4);
  const int high = (sc[8 + (s % 4)] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The i-quant codebooks and sign patterns: common/quant/internal/iq_grids.inc
// is the one copy of the data. Host code reads quant's tables (iq_grids.h);
// device code its own __device__ copies, defined here from the same file.
#if defined(__CUDACC__)
namespace iq_device {
#define MOESPLIT_IQ_TABLE(type, name, count, ...) static __device__ const type name[count] = {__VA_ARGS__};
#include "common/quant/internal/iq_grids.inc"
#undef MOESPLIT_IQ_TABLE
}  // namespace iq_device
#endif
#if defined(__CUDA_ARCH__)
#define MS_IQ_TABLE(name) ::moesplit::cuda::codec::iq_device::name
#else
#define MS_IQ_TABLE(name) ::moesplit::quant::internal::name
#endif

// Byte j of a packed grid entry.
MS_HD int GridByte(uint64_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }
// -1 where bit j of a sign pattern is set, +1 otherwise (ggml's kmask_iq2xs).
MS_HD float SignOf(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.f : 1.f; }
// Digit n (0 = most significant) of a TQ1_0 byte (ggml's fixed-point base 3).
MS_HD int Tq1Digit(uint8_t byte, int n) {
  const uint8_t pow3 = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
  const uint8_t q = static_cast<uint8_t>(byte * pow3);
  return (static_cast<uint16_t>(q) * 3) >> 8;
}

template <GgmlType T> struct Format;
#define MS_FORMAT(T, elems, bytes) \
  template <> struct Format<GgmlType::T> { static constexpr int kElems = elems, kBytes = bytes; }
MS_FORMAT(kF32, 1, 4);
MS_FORMAT(kF16, 1, 2);
MS_FORMAT(kBF16, 1, 2);
MS_FORMAT(kQ4_0, 32, 18);
MS_FORMAT(kQ4_1, 32, 20);
MS_FORMAT(kQ5_0, 32, 22);
MS_FORMAT(kQ5_1, 32, 24);
MS_FORMAT(kQ8_0, 32, 34);
MS_FORMAT(kQ8_1, 32, 36);
MS_FORMAT(kMXFP4, 32, 17);
MS_FORMAT(kQ2_K, 256, 84);
MS_FORMAT(kQ3_K, 256, 110);
MS_FORMAT(kQ4_K, 256, 144);
MS_FORMAT(kQ5_K, 256, 176);
MS_FORMAT(kQ6_K, 256, 210);
MS_FORMAT(kQ8_K, 256, 292);
MS_FORMAT(kIQ4_NL, 32, 18);
MS_FORMAT(kIQ4_XS, 256, 136);
MS_FORMAT(kIQ2_XXS, 256, 66);
MS_FORMAT(kIQ2_XS, 256, 74);
MS_FORMAT(kIQ2_S, 256, 82);
MS_FORMAT(kIQ3_XXS, 256, 98);
MS_FORMAT(kIQ3_S, 256, 110);
MS_FORMAT(kIQ1_S, 256, 50);
MS_FORMAT(kIQ1_M, 256, 56);
MS_FORMAT(kTQ1_0, 256, 54);
MS_FORMAT(kTQ2_0, 256, 66);
#undef MS_FORMAT

// Value i of the block at b. REQUIRES: 0 <= i < Format<T>::kElems.
template <GgmlType T>
MS_HD float DecodeElement(const uint8_t* b, int i) {
  if constexpr (T == GgmlType::kF32) {
    return BitsToFloat(Load32(b));
  } else if constexpr (T == GgmlType::kF16) {
    return HalfToFloat(Load16(b));
  } else if constexpr (T == GgmlType::kBF16) {
    return Bf16ToFloat(Load16(b));
  } else if constexpr (T == GgmlType::kQ4_0 || T == GgmlType::kIQ4_NL) {
    const float d = HalfToFloat(Load16(b));
    const uint8_t q = b[2 + (i & 15)];
    const int nib = i < 16 ? (q & 0xF) : (q >> 4);
    if constexpr (T == GgmlType::kQ4_0) return (nib - 8) * d;
    else return d * Iq4NlValue(nib);
  } else if constexpr (T == GgmlType::kQ4_1) {
    const float d = HalfToFloat(Load16(b)), m = HalfToFloat(Load16(b + 2));
    const uint8_t q = b[4 + (i & 15)];
    const int nib = i < 16 ? (q & 0xF) : (q >> 4);
    return nib * d + m;
  } else if constexpr (T == GgmlType::kQ5_0 || T == GgmlType::kQ5_1) {
    const bool has_m = T == GgmlType::kQ5_1;
    const float d = HalfToFloat(Load16(b));
    const uint32_t qh = Load32(b + (has_m ? 4 : 2));
    const uint8_t q = b[(has_m ? 8 : 6) + (i & 15)];
    const int j = i & 15;
    const int xh = i < 16 ? ((qh >> j) << 4) & 0x10 : (qh >> (j + 12)) & 0x10;
    const int nib = (i < 16 ? (q & 0xF) : (q >> 4)) | xh;
    if constexpr (T == GgmlType::kQ5_0) return (nib - 16) * d;
    else return nib * d + HalfToFloat(Load16(b + 2));
  } else if constexpr (T == GgmlType::kQ8_0 || T == GgmlType::kQ8_1) {
    const float d = HalfToFloat(Load16(b));
    const int off = T == GgmlType::kQ8_0 ? 2 : 4;
    return static_cast<int8_t>(b[off + i]) * d;
  } else if constexpr (T == GgmlType::kMXFP4) {
    const float d = E8m0Half(b[0]);
    const uint8_t q = b[1 + (i & 15)];
    return Mxfp4Value(i < 16 ? (q & 0xF) : (q >> 4)) * d;
  } else if constexpr (T == GgmlType::kQ2_K) {
    // scales[16] qs[64] d dmin
    const int n128 = i >> 7, r = i & 127, j = r >> 5, half = (r >> 4) & 1, l = r & 15;
    const uint8_t sc = b[n128 * 8 + j * 2 + half];
    const uint8_t q = b[16 + n128 * 32 + half * 16 + l];
    const float d = HalfToFloat(Load16(b + 80)), min = HalfToFloat(Load16(b + 82));
    const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
    return dl * static_cast<int8_t>((q >> (2 * j)) & 3) - ml;
  } else if constexpr (T == GgmlType::kQ3_K) {
    // hmask[32] qs[64] scales[12] d
    const int n128 = i >> 7, r = i & 127, j = r >> 5, half = (r >> 4) & 1, l = r & 15;
    const float d_all = HalfToFloat(Load16(b + 108));
    const float dl = d_all * Q3KScale(b + 96, n128 * 8 + j * 2 + half);
    const uint8_t q = b[32 + n128 * 32 + half * 16 + l];
    const uint8_t hm = b[half * 16 + l];
    const int m = 1 << (n128 * 4 + j);
    return dl * (static_cast<int8_t>((q >> (2 * j)) & 3) - ((hm & m) ? 0 : 4));
  } else if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) {
    // d dmin scales[12] [qh[32]] qs[128]
    const bool five = T == GgmlType::kQ5_K;
    const int chunk = i >> 6, r = i & 63, upper = r >> 5, l = r & 31;
    const float d = HalfToFloat(Load16(b)), min = HalfToFloat(Load16(b + 2));
    int sc, m;
    ScaleMinK4(chunk * 2 + upper, b + 4, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    const uint8_t q = b[(five ? 48 : 16) + chunk * 32 + l];
    int v = upper ? (q >> 4) : (q & 0xF);
    if constexpr (five) {
      const uint8_t qh = b[16 + l];
      v += (qh & (1 << (chunk * 2 + upper))) ? 16 : 0;
    }
    return d1 * v - m1;
  } else if constexpr (T == GgmlType::kQ6_K) {
    // ql[128] qh[64] scales[16] d
    const int n128 = i >> 7, r = i & 127, quarter = r >> 5, l = r & 31;
    const float d = HalfToFloat(Load16(b + 208));
    const uint8_t ql = b[n128 * 64 + l + ((quarter & 1) ? 32 : 0)];
    const int low = (quarter & 2) ? (ql >> 4) : (ql & 0xF);
    const int high = (b[128 + n128 * 32 + l] >> (2 * quarter)) & 3;
    const int8_t q = static_cast<int8_t>(static_cast<int8_t>(low | (high << 4)) - 32);
    const int8_t sc = static_cast<int8_t>(b[192 + n128 * 8 + (l >> 4) + 2 * quarter]);
    return d * sc * q;
  } else if constexpr (T == GgmlType::kQ8_K) {
    const float d = BitsToFloat(Load32(b));
    return d * static_cast<int8_t>(b[4 + i]);
  } else if constexpr (T == GgmlType::kIQ4_XS) {
    // d scales_h scales_l[4] qs[128]
    const int ib = i >> 5, r = i & 31;
    const float d = HalfToFloat(Load16(b));
    const uint16_t scales_h = Load16(b + 2);
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * (ls - 32);
    const uint8_t q = b[8 + ib * 16 + (r & 15)];
    return dl * Iq4NlValue(r < 16 ? (q & 0xF) : (q >> 4));
  } else if constexpr (T == GgmlType::kIQ2_XXS) {
    // d qs[32 x u16]: per 32 values 4 grid bytes, then 4 x 7 sign bits + 4-bit scale
    const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
    const float d = HalfToFloat(Load16(b));
    const uint32_t aux = Load32(b + 2 + 8 * ib + 4);
    const float db = d * (0.5f + (aux >> 28)) * 0.25f;
    const uint8_t signs = MS_IQ_TABLE(kSignsIq2Xs)[(aux >> (7 * l)) & 127];
    return db * GridByte(MS_IQ_TABLE(kIq2XxsGrid)[b[2 + 8 * ib + l]], j) * SignOf(signs, j);
  } else if constexpr (T == GgmlType::kIQ2_XS) {
    // d qs[32 x u16] (9-bit index | 7 sign bits << 9) scales[8]
    const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
    const float d = HalfToFloat(Load16(b));
    const float db = d * (0.5f + ((b[66 + ib] >> (4 * (l / 2))) & 0xf)) * 0.25f;
    const uint16_t q = Load16(b + 2 + 2 * (4 * ib + l));
    const uint8_t signs = MS_IQ_TABLE(kSignsIq2Xs)[q >> 9];
    return db * GridByte(MS_IQ_TABLE(kIq2XsGrid)[q & 511], j) * SignOf(signs, j);
  } else if constexpr (T == GgmlType::kIQ2_S) {
    // d qs[32] signs[32] qh[8] scales[8]
    const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
    const float d = HalfToFloat(Load16(b));
    const float db = d * (0.5f + ((b[74 + ib] >> (4 * (l / 2))) & 0xf)) * 0.25f;
    const int index = b[2 + 4 * ib + l] | (((b[66 + ib] >> (2 * l)) & 3) << 8);
    return db * GridByte(MS_IQ_TABLE(kIq2SGrid)[index], j) * SignOf(b[34 + 4 * ib + l], j);
  } else if constexpr (T == GgmlType::kIQ3_XXS) {
    // d qs[64] then 8 x (4 x 7 sign bits + 4-bit scale)
    const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
    const float d = HalfToFloat(Load16(b));
    const uint32_t aux = Load32(b + 66 + 4 * ib);
    const float db = d * (0.5f + (aux >> 28)) * 0.5f;
    const uint8_t signs = MS_IQ_TABLE(kSignsIq2Xs)[(aux >> (7 * l)) & 127];
    const uint32_t entry = MS_IQ_TABLE(kIq3XxsGrid)[b[2 + 8 * ib + 2 * l + (j >> 2)]];
    return db * GridByte(entry, j & 3) * SignOf(signs, j);
  } else if constexpr (T == GgmlType::kIQ3_S) {
    // d qs[64] qh[8] signs[32] scales[4]
    const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
    const float d = HalfToFloat(Load16(b));
    const int sc = (b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf;
    const float db = d * (1 + 2 * sc);
    const int k = 2 * l + (j >> 2);
    const int index = b[2 + 8 * ib + k] | (((b[66 + ib] >> k) & 1) << 8);
    return db * GridByte(MS_IQ_TABLE(kIq3SGrid)[index], j & 3) * SignOf(b[74 + 4 * ib + l], j);
  } else if constexpr (T == GgmlType::kIQ1_S) {
    // d qs[32] qh[8 x u16] (4 x 3 high index bits, 3-bit scale, delta sign)
    const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
    const float d = HalfToFloat(Load16(b));
    const uint16_t qh = Load16(b + 34 + 2 * ib);
    const float dl = d * (2 * ((qh >> 12) & 7) + 1);
    const float delta = (qh & 0x8000) ? -0.125f : 0.125f;
    const int index = b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
    return dl * (static_cast<int8_t>(GridByte(MS_IQ_TABLE(kIq1SGrid)[index], j)) + delta);
  } else if constexpr (T == GgmlType::kIQ1_M) {
    // qs[32] qh[16] scales[4 x u16] (3-bit scales; the f16 scale in the top nibbles)
    const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
    const uint16_t s0 = Load16(b + 48), s1 = Load16(b + 50), s2 = Load16(b + 52), s3 = Load16(b + 54);
    const float d = HalfToFloat(static_cast<uint16_t>((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) |
                                                      (s3 & 0xf000)));
    const uint16_t sc = Load16(b + 48 + 2 * (ib / 2));
    const float dl = d * (2 * ((sc >> (6 * (ib % 2) + 3 * (l / 2))) & 0x7) + 1);
    const int nib = (b[32 + 2 * ib + l / 2] >> (4 * (l % 2))) & 0xf;
    const int index = b[4 * ib + l] | ((nib & 7) << 8);
    const float delta = (nib & 8) ? -0.125f : 0.125f;
    return dl * (static_cast<int8_t>(GridByte(MS_IQ_TABLE(kIq1SGrid)[index], j)) + delta);
  } else if constexpr (T == GgmlType::kTQ1_0) {
    // qs[48] (5 digits per byte: a run of 32 bytes, then one of 16) qh[4] (4 digits) d
    const float d = HalfToFloat(Load16(b + 52));
    int digit;
    if (i < 160) {
      digit = Tq1Digit(b[i & 31], i >> 5);
    } else if (i < 240) {
      digit = Tq1Digit(b[32 + ((i - 160) & 15)], (i - 160) >> 4);
    } else {
      digit = Tq1Digit(b[48 + ((i - 240) & 3)], (i - 240) >> 2);
    }
    return static_cast<float>(digit - 1) * d;
  } else if constexpr (T == GgmlType::kTQ2_0) {
    // qs[64] (2-bit digits: 4 runs of 32 values per 32 bytes) d
    const float d = HalfToFloat(Load16(b + 64));
    const uint8_t q = b[32 * (i >> 7) + (i & 31)];
    return static_cast<float>(((q >> (2 * ((i >> 5) & 3))) & 3) - 1) * d;
  } else {
    static_assert(T == GgmlType::kF32, "unsupported format");
    return 0.0f;
  }
}

// Element e of a row of format T starting at `row`.
template <GgmlType T>
MS_HD float DecodeRowElement(const uint8_t* row, int64_t e) {
  constexpr int kElems = Format<T>::kElems, kBytes = Format<T>::kBytes;
  return DecodeElement<T>(row + (e / kElems) * kBytes, static_cast<int>(e % kElems));
}

MS_HD float RoundHalfAway(float x) {
#if defined(__CUDA_ARCH__)
  return roundf(x);
#else
  return __builtin_roundf(x);
#endif
}

// quantize_row_q8_0_ref for one block: 32 floats -> 34 bytes.
MS_HD void EncodeQ8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] < 0 ? -x[j] : x[j];
    amax = amax > v ? amax : v;
  }
  const float d = amax / ((1 << 7) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  const uint16_t dh = FloatToHalf(d);
  out[0] = static_cast<uint8_t>(dh & 0xFF);
  out[1] = static_cast<uint8_t>(dh >> 8);
  for (int j = 0; j < 32; ++j) {
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(RoundHalfAway(x[j] * id)));
  }
}

// quantize_row_q4_0_ref for one block: 32 floats -> 18 bytes.
MS_HD void EncodeQ4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] < 0 ? -x[j] : x[j];
    if (amax < v) {
      amax = v;
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d ? 1.0f / d : 0.0f;
  const uint16_t dh = FloatToHalf(d);
  out[0] = static_cast<uint8_t>(dh & 0xFF);
  out[1] = static_cast<uint8_t>(dh >> 8);
  for (int j = 0; j < 16; ++j) {
    const float x0 = x[j] * id, x1 = x[16 + j] * id;
    int xi0 = static_cast<int8_t>(x0 + 8.5f), xi1 = static_cast<int8_t>(x1 + 8.5f);
    xi0 = xi0 < 15 ? xi0 : 15;
    xi1 = xi1 < 15 ? xi1 : 15;
    out[2 + j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
  }
}

// ---------------------------------------------------------------- activations
// llama.cpp (and the CPU reference, common/quant) converts the activation row
// of a product to the weight type's vec_dot_type before the dot: Q8_0 blocks
// of 32 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, Q8_1 for Q4_1/Q5_1 (the same values
// as Q8_0), Q8_K blocks of 256 for the K-quants, IQ4_XS, the i-quants and the
// ternary types, F16 for F16,
// BF16 for BF16, none for F32. The GPU rounds the activations the same way
// ("round trip": quantise, then dequantise to f32) and then runs its f32
// products, so that both sides multiply the same values.
enum class ActRounding { kNone = 0, kF16, kBF16, kQ8_0, kQ8_K };

MS_HD ActRounding ActRoundingOf(GgmlType weight) {
  switch (weight) {
    case GgmlType::kF16: return ActRounding::kF16;
    case GgmlType::kBF16: return ActRounding::kBF16;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ8_1:
    case GgmlType::kIQ4_NL:
    case GgmlType::kMXFP4: return ActRounding::kQ8_0;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kQ8_K:
    case GgmlType::kIQ4_XS:
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M:
    case GgmlType::kTQ1_0:
    case GgmlType::kTQ2_0: return ActRounding::kQ8_K;
    default: return ActRounding::kNone;
  }
}
// Elements per rounding unit (1 for the float formats).
MS_HD int ActRoundingBlock(ActRounding r) {
  return r == ActRounding::kQ8_0 ? 32 : r == ActRounding::kQ8_K ? 256 : 1;
}

// binary32 -> bfloat16 as ggml's GGML_FP32_TO_BF16 (round to nearest even).
MS_HD uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatToBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 64);
  return static_cast<uint16_t>((u + (0x7FFFu + ((u >> 16) & 1))) >> 16);
}

// ggml nearest_int (round half to even through 1.5 * 2^23). |f| <= 4194303.
MS_HD int NearestInt(float f) {
  const float v = f + 12582912.f;
  return static_cast<int>(FloatToBits(v) & 0x007FFFFFu) - 0x00400000;
}

// x through quantize_row_q8_0_ref + dequantize_row_q8_0, in a block whose
// largest magnitude is amax.
MS_HD float RoundQ8_0(float x, float amax) {
  const float d = amax / ((1 << 7) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  return static_cast<int8_t>(RoundHalfAway(x * id)) * HalfToFloat(FloatToHalf(d));
}

// x through quantize_row_q8_K_ref + dequantize_row_q8_K, in a block whose
// first value of the largest magnitude is max (0: an all-zero block).
MS_HD float RoundQ8_K(float x, float max) {
  if (!max) return 0.0f;
  const float iscale = -127.f / max;
  const float d = 1 / iscale;
  const int v = NearestInt(iscale * x);
  return d * static_cast<int8_t>(v < 127 ? v : 127);
}

// One Q8_0 block (32 values).
MS_HD void RoundTripQ8_0(const float* x, float* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] < 0 ? -x[j] : x[j];
    amax = amax > v ? amax : v;
  }
  for (int j = 0; j < 32; ++j) out[j] = RoundQ8_0(x[j], amax);
}

// One Q8_K block (256 values).
MS_HD void RoundTripQ8_K(const float* x, float* out) {
  float max = 0.0f, amax = 0.0f;
  for (int j = 0; j < 256; ++j) {
    const float ax = x[j] < 0 ? -x[j] : x[j];
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  for (int j = 0; j < 256; ++j) out[j] = RoundQ8_K(x[j], max);
}

// Rounds the unit of ActRoundingBlock(r) values at x into out (may alias).
MS_HD void RoundActivations(ActRounding r, const float* x, float* out) {
  switch (r) {
    case ActRounding::kF16: out[0] = HalfToFloat(FloatToHalf(x[0])); break;
    case ActRounding::kBF16: out[0] = Bf16ToFloat(FloatToBf16(x[0])); break;
    case ActRounding::kQ8_0: RoundTripQ8_0(x, out); break;
    case ActRounding::kQ8_K: RoundTripQ8_K(x, out); break;
    default: out[0] = x[0]; break;
  }
}

}  // namespace moesplit::cuda::codec
