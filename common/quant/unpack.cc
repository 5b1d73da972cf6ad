// Integer form of the weight formats and the canonical scalar dot
// (internal/unpack.h).

#include "common/quant/internal/unpack.h"

#include <cmath>
#include <cstring>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"

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
    default: return nullptr;
  }
}

}  // namespace moesplit::quant::internal
