// Integer form of the weight formats and the canonical scalar dot
// (internal/unpack.h).

#include "common/quant/internal/unpack.h"

#include <cmath>
#include <cstring>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/iq_grids.h"

namespace moesplit::quant::internal {
namespace {

// Low nibbles to elements 0..15, high nibbles to 16..31 (the 32-block order).
void Nibbles16(const uint8_t* qs, uint8_t* codes) {
  for (int j = 0; j < 16; ++j) {
    codes[j] = qs[j] & 0xF;
    codes[j + 16] = qs[j] >> 4;
  }
}

void TableNibbles16(const uint8_t* qs, const int8_t* table, uint8_t* codes) {
  for (int j = 0; j < 16; ++j) {
    codes[j] = static_cast<uint8_t>(table[qs[j] & 0xF]);
    codes[j + 16] = static_cast<uint8_t>(table[qs[j] >> 4]);
  }
}

// Fifth bit of Q5_0/Q5_1: qh bit j for element j.
void AddHighBits32(const uint8_t* qh4, uint8_t* codes) {
  uint32_t qh;
  std::memcpy(&qh, qh4, 4);
  for (int j = 0; j < 32; ++j) codes[j] |= static_cast<uint8_t>(((qh >> j) & 1) << 4);
}

void UnpackQ2K(const BlockQ2_K& b, const UnpackedBlock& o) {
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) o.codes[128 * h + 32 * s + l] = (b.qs[32 * h + l] >> (2 * s)) & 3;
    }
  }
  for (int g = 0; g < 16; ++g) {
    o.sub[g] = b.scales[g] & 0xF;
    o.mins[g] = b.scales[g] >> 4;
  }
  *o.scale = Fp16ToFp32(b.d);
  *o.min = Fp16ToFp32(b.dmin);
}

void UnpackQ3K(const BlockQ3_K& b, const UnpackedBlock& o) {
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      const int bit = 4 * h + s;
      for (int l = 0; l < 32; ++l) {
        o.codes[128 * h + 32 * s + l] = static_cast<uint8_t>(
            ((b.qs[32 * h + l] >> (2 * s)) & 3) | (((b.hmask[l] >> bit) & 1) << 2));
      }
    }
  }
  int8_t sc[16];
  UnpackQ3KScales(b.scales, sc);
  for (int g = 0; g < 16; ++g) o.sub[g] = sc[g] - 32;
  *o.scale = Fp16ToFp32(b.d);
}

// Q4_K / Q5_K: chunk j of 64 elements = low nibbles of qs[32j..] then high.
void UnpackQ45K(const uint8_t* qs, const uint8_t* qh, const uint8_t* scales, uint16_t d,
                uint16_t dmin, const UnpackedBlock& o) {
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 32; ++l) {
      o.codes[64 * j + l] = qs[32 * j + l] & 0xF;
      o.codes[64 * j + 32 + l] = qs[32 * j + l] >> 4;
    }
  }
  if (qh != nullptr) {
    for (int c = 0; c < 8; ++c) {
      for (int l = 0; l < 32; ++l) o.codes[32 * c + l] |= static_cast<uint8_t>(((qh[l] >> c) & 1) << 4);
    }
  }
  for (int g = 0; g < 8; ++g) {
    uint8_t sc, mn;
    GetScaleMinK4(g, scales, &sc, &mn);
    o.sub[g] = sc;
    o.mins[g] = mn;
  }
  *o.scale = Fp16ToFp32(d);
  *o.min = Fp16ToFp32(dmin);
}

void UnpackQ6K(const BlockQ6_K& b, const UnpackedBlock& o) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    uint8_t* c = o.codes + 128 * h;
    for (int l = 0; l < 32; ++l) {
      c[l] = static_cast<uint8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
      c[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      c[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      c[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
  for (int g = 0; g < 16; ++g) o.sub[g] = b.scales[g];
  *o.scale = Fp16ToFp32(b.d);
}

void UnpackIq4Xs(const BlockIq4Xs& b, const UnpackedBlock& o) {
  for (int g = 0; g < 8; ++g) {
    TableNibbles16(b.qs + 16 * g, kValuesIq4Nl, o.codes + 32 * g);
    const int ls = ((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b.scales_h >> (2 * g)) & 3) << 4);
    o.sub[g] = ls - 32;
  }
  *o.scale = Fp16ToFp32(b.d);
}

// ---- i-quants and ternary types -------------------------------------------
//
// Codes are the signed integers of ggml's dot kernels (grid magnitude times
// sign; for IQ1_S/IQ1_M 8 * grid value + delta sign, the delta of +-1/8 made
// integral), sub-scales the odd integers 2 s + 1, and d the f16 block scale
// times the power of two ggml applies after the integer sums (1/8 for IQ2_*
// and IQ1_*, 1/4 for IQ3_XXS), which is exact.

// Eight bytes at a time (SWAR, little-endian: byte j is value j of a group).
constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;

// 0xFF in byte j where bit j of `bits` is set.
inline uint64_t ByteMask(uint8_t bits) {
  const uint64_t spread = (bits * kOnes) & 0x8040201008040201ull;  // byte j: bit j or 0
  return (((spread + 0x7F7F7F7F7F7F7F7Full) >> 7) & kOnes) * 0xFF;
}

// The 8 magnitudes of `mag` (none zero, as in every IQ2/IQ3 grid) negated
// where bit j of `signs` is set: two's complement as (m ^ 0xFF) + 1, which
// cannot carry into the next byte for a non-zero m.
inline void PutSigned(uint64_t mag, uint8_t signs, uint8_t* out) {
  const uint64_t m = ByteMask(signs);
  const uint64_t v = (mag ^ m) + (m & kOnes);
  std::memcpy(out, &v, 8);
}

// IQ1: 8 * grid value + delta (+-1) per byte, grid values in {-1, 0, 1}.
inline void PutIq1(uint64_t entry, int delta, uint8_t* out) {
  const uint64_t x = (entry << 3) & 0xF8F8F8F8F8F8F8F8ull;  // 8 * value, per byte
  const uint64_t y = delta > 0 ? kOnes : ~0ull;             // +1 or -1 per byte
  const uint64_t v = ((x & ~kHigh) + (y & ~kHigh)) ^ ((x ^ y) & kHigh);  // byte-wise add
  std::memcpy(out, &v, 8);
}

void UnpackIq2Xxs(const BlockIq2Xxs& b, const UnpackedBlock& o) {
  for (int ib = 0; ib < 8; ++ib) {
    uint8_t idx[4];
    uint32_t aux;
    std::memcpy(idx, b.qs + 4 * ib, 4);
    std::memcpy(&aux, b.qs + 4 * ib + 2, 4);
    o.sub[ib] = 2 * static_cast<int32_t>(aux >> 28) + 1;
    for (int l = 0; l < 4; ++l) {
      PutSigned(kIq2XxsGrid[idx[l]], kSignsIq2Xs[(aux >> (7 * l)) & 127], o.codes + 32 * ib + 8 * l);
    }
  }
  *o.scale = Fp16ToFp32(b.d) * 0.125f;
}

void UnpackIq2Xs(const BlockIq2Xs& b, const UnpackedBlock& o) {
  for (int ib = 0; ib < 8; ++ib) {
    o.sub[2 * ib] = 2 * (b.scales[ib] & 0xF) + 1;
    o.sub[2 * ib + 1] = 2 * (b.scales[ib] >> 4) + 1;
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = b.qs[4 * ib + l];
      PutSigned(kIq2XsGrid[q & 511], kSignsIq2Xs[q >> 9], o.codes + 32 * ib + 8 * l);
    }
  }
  *o.scale = Fp16ToFp32(b.d) * 0.125f;
}

void UnpackIq2S(const BlockIq2S& b, const UnpackedBlock& o) {
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int ib = 0; ib < 8; ++ib) {
    o.sub[2 * ib] = 2 * (b.scales[ib] & 0xF) + 1;
    o.sub[2 * ib + 1] = 2 * (b.scales[ib] >> 4) + 1;
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3) << 8);
      PutSigned(kIq2SGrid[index], signs[4 * ib + l], o.codes + 32 * ib + 8 * l);
    }
  }
  *o.scale = Fp16ToFp32(b.d) * 0.125f;
}

void UnpackIq3Xxs(const BlockIq3Xxs& b, const UnpackedBlock& o) {
  const uint8_t* scales_and_signs = b.qs + kQK_K / 4;
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t aux;
    std::memcpy(&aux, scales_and_signs + 4 * ib, 4);
    o.sub[ib] = 2 * static_cast<int32_t>(aux >> 28) + 1;
    for (int l = 0; l < 4; ++l) {
      const uint64_t mag = kIq3XxsGrid[b.qs[8 * ib + 2 * l]] |
                           static_cast<uint64_t>(kIq3XxsGrid[b.qs[8 * ib + 2 * l + 1]]) << 32;
      PutSigned(mag, kSignsIq2Xs[(aux >> (7 * l)) & 127], o.codes + 32 * ib + 8 * l);
    }
  }
  *o.scale = Fp16ToFp32(b.d) * 0.25f;
}

void UnpackIq3S(const BlockIq3S& b, const UnpackedBlock& o) {
  for (int ib = 0; ib < 8; ++ib) {
    o.sub[ib] = 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
    const uint8_t qh = b.qh[ib];
    for (int l = 0; l < 4; ++l) {
      const int i1 = b.qs[8 * ib + 2 * l] | (((qh >> (2 * l)) & 1) << 8);
      const int i2 = b.qs[8 * ib + 2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8);
      PutSigned(kIq3SGrid[i1] | static_cast<uint64_t>(kIq3SGrid[i2]) << 32, b.signs[4 * ib + l],
                o.codes + 32 * ib + 8 * l);
    }
  }
  *o.scale = Fp16ToFp32(b.d);
}

void UnpackIq1S(const BlockIq1S& b, const UnpackedBlock& o) {
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t qh = b.qh[ib];
    o.sub[ib] = 2 * ((qh >> 12) & 7) + 1;
    const int delta = (qh & 0x8000) ? -1 : 1;
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
      PutIq1(kIq1SGrid[index], delta, o.codes + 32 * ib + 8 * l);
    }
  }
  *o.scale = Fp16ToFp32(b.d) * 0.125f;
}

void UnpackIq1M(const BlockIq1M& b, const UnpackedBlock& o) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof(sc));
  const uint16_t d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                             ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
  for (int ib = 0; ib < 8; ++ib) {
    o.sub[2 * ib] = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
    o.sub[2 * ib + 1] = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
    for (int l = 0; l < 4; ++l) {
      const int nib = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0xF;
      const int index = b.qs[4 * ib + l] | ((nib & 7) << 8);
      PutIq1(kIq1SGrid[index], (nib & 8) ? -1 : 1, o.codes + 32 * ib + 8 * l);
    }
  }
  *o.scale = Fp16ToFp32(d16) * 0.125f;
}

// Digit n (0 = most significant) of a TQ1_0 byte (ggml's fixed-point base 3).
inline int Tq1Digit(uint8_t byte, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t q = static_cast<uint8_t>(byte * kPow3[n]);
  return (static_cast<uint16_t>(q) * 3) >> 8;
}

void UnpackTq1_0(const BlockTq1_0& b, const UnpackedBlock& o) {
  constexpr int kQs = sizeof(b.qs);
  uint8_t* c = o.codes;
  for (int j = 0; j < kQs;) {
    const int run = kQs - j >= 32 ? 32 : 16;
    for (int dn = 0; dn < 5; ++dn) {
      for (int m = 0; m < run; ++m) *c++ = static_cast<uint8_t>(Tq1Digit(b.qs[j + m], dn) - 1);
    }
    j += run;
  }
  for (int dn = 0; dn < 4; ++dn) {
    for (int m = 0; m < static_cast<int>(sizeof(b.qh)); ++m) *c++ = static_cast<uint8_t>(Tq1Digit(b.qh[m], dn) - 1);
  }
  for (int g = 0; g < 8; ++g) o.sub[g] = 1;
  *o.scale = Fp16ToFp32(b.d);
}

void UnpackTq2_0(const BlockTq2_0& b, const UnpackedBlock& o) {
  uint8_t* c = o.codes;
  for (int j = 0; j < kQK_K / 4; j += 32) {
    for (int l = 0; l < 4; ++l) {
      for (int m = 0; m < 32; ++m) *c++ = static_cast<uint8_t>(((b.qs[j + m] >> (2 * l)) & 3) - 1);
    }
  }
  for (int g = 0; g < 8; ++g) o.sub[g] = 1;
  *o.scale = Fp16ToFp32(b.d);
}

// ---- canonical dots ------------------------------------------------------

inline int Code(const UnpackLayout& L, uint8_t c) {
  return L.is_signed ? static_cast<int8_t>(c) : static_cast<int>(c) - L.zero;
}

template <GgmlType kType>
float CanonicalBlock32(int64_t n, const void* vw, const void* va) {
  UnpackLayout L;
  GetUnpackLayout(kType, &L);
  const size_t wbytes = TypeInfo(kType).type_size;
  const uint8_t* w = static_cast<const uint8_t*>(vw);
  const bool q8_1 = L.has_min;
  uint8_t codes[32];
  float scale = 0, min = 0;
  float acc[2] = {0, 0};  // even and odd blocks
  for (int64_t b = 0; b < n / 32; ++b) {
    UnpackBlock(kType, w + b * wbytes, {codes, nullptr, nullptr, &scale, &min});
    const int8_t* q;
    float da, sa = 0;
    if (q8_1) {
      const BlockQ8_1& a = static_cast<const BlockQ8_1*>(va)[b];
      q = a.qs;
      da = Fp16ToFp32(a.d);
      sa = Fp16ToFp32(a.s);
    } else {
      const BlockQ8_0& a = static_cast<const BlockQ8_0*>(va)[b];
      q = a.qs;
      da = Fp16ToFp32(a.d);
    }
    int isum = 0;
    for (int k = 0; k < 32; ++k) isum += Code(L, codes[k]) * q[k];
    float& a = acc[b & 1];
    a = std::fma(static_cast<float>(isum), scale * da, a);
    if (L.has_min) a = std::fma(min, sa, a);
  }
  return acc[0] + acc[1];
}

template <GgmlType kType>
float CanonicalSuper(int64_t n, const void* vw, const void* va) {
  UnpackLayout L;
  GetUnpackLayout(kType, &L);
  const size_t wbytes = TypeInfo(kType).type_size;
  const uint8_t* w = static_cast<const uint8_t*>(vw);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(va);
  uint8_t codes[256];
  int32_t sub[16];
  int16_t mins[16] = {};
  float d = 0, dmin = 0;
  float acc = 0;
  const int n_groups = 256 / L.group;
  for (int64_t b = 0; b < n / 256; ++b) {
    UnpackBlock(kType, w + b * wbytes, {codes, sub, mins, &d, &dmin});
    int32_t isum = 0;
    for (int g = 0; g < n_groups; ++g) {
      int32_t s = 0;
      for (int k = g * L.group; k < (g + 1) * L.group; ++k) s += Code(L, codes[k]) * a[b].qs[k];
      isum += sub[g] * s;
    }
    acc = std::fma(static_cast<float>(isum), d * a[b].d, acc);
    if (L.has_min) {
      int32_t imin = 0;
      for (int g = 0; g < n_groups; ++g) {
        const int qsum = L.group == 16 ? a[b].bsums[g] : a[b].bsums[2 * g] + a[b].bsums[2 * g + 1];
        imin += mins[g] * qsum;
      }
      acc = std::fma(static_cast<float>(imin), -(dmin * a[b].d), acc);
    }
  }
  return acc;
}

}  // namespace

bool GetUnpackLayout(GgmlType type, UnpackLayout* out) {
  UnpackLayout L;
  switch (type) {
    case GgmlType::kQ4_0: L.zero = 8; break;
    case GgmlType::kQ5_0: L.zero = 16; break;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1: L.has_min = true; break;
    case GgmlType::kQ8_0:
    case GgmlType::kIQ4_NL:
    case GgmlType::kMXFP4: L.is_signed = true; break;
    case GgmlType::kQ2_K: L = {256, 16, true, false, 0, true}; break;
    case GgmlType::kQ3_K: L = {256, 16, true, false, 4, false}; break;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: L = {256, 32, true, false, 0, true}; break;
    case GgmlType::kQ6_K: L = {256, 16, true, false, 32, false}; break;
    case GgmlType::kIQ4_XS: L = {256, 32, true, true, 0, false}; break;
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ1_M: L = {256, 16, true, true, 0, false}; break;
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ1_S:
    case GgmlType::kTQ1_0:
    case GgmlType::kTQ2_0: L = {256, 32, true, true, 0, false}; break;
    default: return false;
  }
  *out = L;
  return true;
}

void UnpackBlock(GgmlType type, const void* block, const UnpackedBlock& o) {
  switch (type) {
    case GgmlType::kQ4_0: {
      const auto& b = *static_cast<const BlockQ4_0*>(block);
      Nibbles16(b.qs, o.codes);
      *o.scale = Fp16ToFp32(b.d);
      return;
    }
    case GgmlType::kQ4_1: {
      const auto& b = *static_cast<const BlockQ4_1*>(block);
      Nibbles16(b.qs, o.codes);
      *o.scale = Fp16ToFp32(b.d);
      *o.min = Fp16ToFp32(b.m);
      return;
    }
    case GgmlType::kQ5_0: {
      const auto& b = *static_cast<const BlockQ5_0*>(block);
      Nibbles16(b.qs, o.codes);
      AddHighBits32(b.qh, o.codes);
      *o.scale = Fp16ToFp32(b.d);
      return;
    }
    case GgmlType::kQ5_1: {
      const auto& b = *static_cast<const BlockQ5_1*>(block);
      Nibbles16(b.qs, o.codes);
      AddHighBits32(b.qh, o.codes);
      *o.scale = Fp16ToFp32(b.d);
      *o.min = Fp16ToFp32(b.m);
      return;
    }
    case GgmlType::kQ8_0: {
      const auto& b = *static_cast<const BlockQ8_0*>(block);
      std::memcpy(o.codes, b.qs, 32);
      *o.scale = Fp16ToFp32(b.d);
      return;
    }
    case GgmlType::kIQ4_NL: {
      const auto& b = *static_cast<const BlockIq4Nl*>(block);
      TableNibbles16(b.qs, kValuesIq4Nl, o.codes);
      *o.scale = Fp16ToFp32(b.d);
      return;
    }
    case GgmlType::kMXFP4: {
      const auto& b = *static_cast<const BlockMxfp4*>(block);
      TableNibbles16(b.qs, kValuesMxfp4, o.codes);
      *o.scale = E8m0ToFp32Half(b.e);
      return;
    }
    case GgmlType::kQ2_K: return UnpackQ2K(*static_cast<const BlockQ2_K*>(block), o);
    case GgmlType::kQ3_K: return UnpackQ3K(*static_cast<const BlockQ3_K*>(block), o);
    case GgmlType::kQ4_K: {
      const auto& b = *static_cast<const BlockQ4_K*>(block);
      return UnpackQ45K(b.qs, nullptr, b.scales, b.d, b.dmin, o);
    }
    case GgmlType::kQ5_K: {
      const auto& b = *static_cast<const BlockQ5_K*>(block);
      return UnpackQ45K(b.qs, b.qh, b.scales, b.d, b.dmin, o);
    }
    case GgmlType::kQ6_K: return UnpackQ6K(*static_cast<const BlockQ6_K*>(block), o);
    case GgmlType::kIQ4_XS: return UnpackIq4Xs(*static_cast<const BlockIq4Xs*>(block), o);
    case GgmlType::kIQ2_XXS: return UnpackIq2Xxs(*static_cast<const BlockIq2Xxs*>(block), o);
    case GgmlType::kIQ2_XS: return UnpackIq2Xs(*static_cast<const BlockIq2Xs*>(block), o);
    case GgmlType::kIQ2_S: return UnpackIq2S(*static_cast<const BlockIq2S*>(block), o);
    case GgmlType::kIQ3_XXS: return UnpackIq3Xxs(*static_cast<const BlockIq3Xxs*>(block), o);
    case GgmlType::kIQ3_S: return UnpackIq3S(*static_cast<const BlockIq3S*>(block), o);
    case GgmlType::kIQ1_S: return UnpackIq1S(*static_cast<const BlockIq1S*>(block), o);
    case GgmlType::kIQ1_M: return UnpackIq1M(*static_cast<const BlockIq1M*>(block), o);
    case GgmlType::kTQ1_0: return UnpackTq1_0(*static_cast<const BlockTq1_0*>(block), o);
    case GgmlType::kTQ2_0: return UnpackTq2_0(*static_cast<const BlockTq2_0*>(block), o);
    default: return;
  }
}

VecDotFn CanonicalVecDot(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return CanonicalBlock32<GgmlType::kQ4_0>;
    case GgmlType::kQ4_1: return CanonicalBlock32<GgmlType::kQ4_1>;
    case GgmlType::kQ5_0: return CanonicalBlock32<GgmlType::kQ5_0>;
    case GgmlType::kQ5_1: return CanonicalBlock32<GgmlType::kQ5_1>;
    case GgmlType::kQ8_0: return CanonicalBlock32<GgmlType::kQ8_0>;
    case GgmlType::kIQ4_NL: return CanonicalBlock32<GgmlType::kIQ4_NL>;
    case GgmlType::kMXFP4: return CanonicalBlock32<GgmlType::kMXFP4>;
    case GgmlType::kQ2_K: return CanonicalSuper<GgmlType::kQ2_K>;
    case GgmlType::kQ3_K: return CanonicalSuper<GgmlType::kQ3_K>;
    case GgmlType::kQ4_K: return CanonicalSuper<GgmlType::kQ4_K>;
    case GgmlType::kQ5_K: return CanonicalSuper<GgmlType::kQ5_K>;
    case GgmlType::kQ6_K: return CanonicalSuper<GgmlType::kQ6_K>;
    case GgmlType::kIQ4_XS: return CanonicalSuper<GgmlType::kIQ4_XS>;
    case GgmlType::kIQ2_XXS: return CanonicalSuper<GgmlType::kIQ2_XXS>;
    case GgmlType::kIQ2_XS: return CanonicalSuper<GgmlType::kIQ2_XS>;
    case GgmlType::kIQ2_S: return CanonicalSuper<GgmlType::kIQ2_S>;
    case GgmlType::kIQ3_XXS: return CanonicalSuper<GgmlType::kIQ3_XXS>;
    case GgmlType::kIQ3_S: return CanonicalSuper<GgmlType::kIQ3_S>;
    case GgmlType::kIQ1_S: return CanonicalSuper<GgmlType::kIQ1_S>;
    case GgmlType::kIQ1_M: return CanonicalSuper<GgmlType::kIQ1_M>;
    case GgmlType::kTQ1_0: return CanonicalSuper<GgmlType::kTQ1_0>;
    case GgmlType::kTQ2_0: return CanonicalSuper<GgmlType::kTQ2_0>;
    default: return nullptr;
  }
}

}  // namespace moesplit::quant::internal
