// Scalar dot kernels: ports of ggml's ggml_vec_dot_*_generic
// (ggml-cpu/quants.c) and the scalar f32/f16/bf16 dots (ggml-cpu/vec.cpp),
// with the same integer accumulation and float reduction order.

#include <cstring>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/internal/unpack.h"

namespace moesplit::quant::internal {
namespace {

float DotF32(int64_t n, const void* vx, const void* vy) {
  const float* x = static_cast<const float*>(vx);
  const float* y = static_cast<const float*>(vy);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

float DotF16(int64_t n, const void* vx, const void* vy) {
  const uint16_t* x = static_cast<const uint16_t*>(vx);
  const uint16_t* y = static_cast<const uint16_t*>(vy);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(Fp16ToFp32(x[i]) * Fp16ToFp32(y[i]));
  }
  return static_cast<float>(sum);
}

float DotBf16(int64_t n, const void* vx, const void* vy) {
  const uint16_t* x = static_cast<const uint16_t*>(vx);
  const uint16_t* y = static_cast<const uint16_t*>(vy);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(Bf16ToFp32(x[i]) * Bf16ToFp32(y[i]));
  }
  return static_cast<float>(sum);
}

float DotQ4_0(int64_t n, const void* vx, const void* vy) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  constexpr int qk = kQK8_0;
  float sumf = 0;
  for (int64_t ib = 0; ib < n / qk; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const int v0 = (x[ib].qs[j] & 0x0F) - 8;
      const int v1 = (x[ib].qs[j] >> 4) - 8;
      sumi0 += v0 * y[ib].qs[j];
      sumi1 += v1 * y[ib].qs[j + qk / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += sumi * Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d);
  }
  return sumf;
}

float DotQ4_1(int64_t n, const void* vx, const void* vy) {
  const BlockQ4_1* x = static_cast<const BlockQ4_1*>(vx);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(vy);
  constexpr int qk = kQK8_1;
  float sumf = 0;
  for (int64_t ib = 0; ib < n / qk; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const int v0 = x[ib].qs[j] & 0x0F;
      const int v1 = x[ib].qs[j] >> 4;
      sumi0 += v0 * y[ib].qs[j];
      sumi1 += v1 * y[ib].qs[j + qk / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d)) * sumi +
            Fp16ToFp32(x[ib].m) * Fp16ToFp32(y[ib].s);
  }
  return sumf;
}

float DotQ5_0(int64_t n, const void* vx, const void* vy) {
  const BlockQ5_0* x = static_cast<const BlockQ5_0*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  constexpr int qk = kQK8_0;
  float sumf = 0;
  for (int64_t ib = 0; ib < n / qk; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, sizeof(qh));
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xh_0 = ((qh & (1u << (j + 0))) >> (j + 0)) << 4;
      const uint8_t xh_1 = ((qh & (1u << (j + 16))) >> (j + 12));
      const int32_t x0 = (int8_t)(((x[ib].qs[j] & 0x0F) | xh_0) - 16);
      const int32_t x1 = (int8_t)(((x[ib].qs[j] >> 4) | xh_1) - 16);
      sumi0 += x0 * y[ib].qs[j];
      sumi1 += x1 * y[ib].qs[j + qk / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d)) * sumi;
  }
  return sumf;
}

float DotQ5_1(int64_t n, const void* vx, const void* vy) {
  const BlockQ5_1* x = static_cast<const BlockQ5_1*>(vx);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(vy);
  constexpr int qk = kQK8_1;
  float sumf = 0;
  for (int64_t ib = 0; ib < n / qk; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, sizeof(qh));
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
      const int32_t x0 = (x[ib].qs[j] & 0xF) | xh_0;
      const int32_t x1 = (x[ib].qs[j] >> 4) | xh_1;
      sumi0 += x0 * y[ib].qs[j];
      sumi1 += x1 * y[ib].qs[j + qk / 2];
    }
    const int sumi = sumi0 + sumi1;
    sumf += (Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d)) * sumi +
            Fp16ToFp32(x[ib].m) * Fp16ToFp32(y[ib].s);
  }
  return sumf;
}

float DotQ8_0(int64_t n, const void* vx, const void* vy) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  float sumf = 0;
  for (int64_t ib = 0; ib < n / kQK8_0; ++ib) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += x[ib].qs[j] * y[ib].qs[j];
    sumf += sumi * (Fp16ToFp32(x[ib].d) * Fp16ToFp32(y[ib].d));
  }
  return sumf;
}

float DotMxfp4(int64_t n, const void* vx, const void* vy) {
  const BlockMxfp4* x = static_cast<const BlockMxfp4*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  constexpr int qk = kQKMxfp4;
  float sumf = 0;
  for (int64_t ib = 0; ib < n / qk; ++ib) {
    const float d = Fp16ToFp32(y[ib].d) * E8m0ToFp32Half(x[ib].e);
    int sumi1 = 0, sumi2 = 0;
    for (int j = 0; j < qk / 2; ++j) {
      sumi1 += y[ib].qs[j + 0] * kValuesMxfp4[x[ib].qs[j] & 0xf];
      sumi2 += y[ib].qs[j + qk / 2] * kValuesMxfp4[x[ib].qs[j] >> 4];
    }
    sumf += d * (sumi1 + sumi2);
  }
  return sumf;
}

float DotIq4Nl(int64_t n, const void* vx, const void* vy) {
  const BlockIq4Nl* x = static_cast<const BlockIq4Nl*>(vx);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(vy);
  constexpr int qk = kQK4_NL;
  float sumf = 0;
  for (int64_t ib = 0; ib < n / qk; ++ib) {
    const float d = Fp16ToFp32(y[ib].d) * Fp16ToFp32(x[ib].d);
    int sumi1 = 0, sumi2 = 0;
    for (int j = 0; j < qk / 2; ++j) {
      sumi1 += y[ib].qs[j + 0] * kValuesIq4Nl[x[ib].qs[j] & 0xf];
      sumi2 += y[ib].qs[j + qk / 2] * kValuesIq4Nl[x[ib].qs[j] >> 4];
    }
    sumf += d * (sumi1 + sumi2);
  }
  return sumf;
}

float DotQ2_K(int64_t n, const void* vx, const void* vy) {
  const BlockQ2_K* x = static_cast<const BlockQ2_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q2 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    const uint8_t* sc = x[i].scales;
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (sc[j] >> 4);
    const float dall = y[i].d * Fp16ToFp32(x[i].d);
    const float dmin = y[i].d * Fp16ToFp32(x[i].dmin);
    int isum = 0, is = 0;
    for (int k = 0; k < kQK_K / 128; ++k) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        int d = sc[is++] & 0xF;
        int isuml = 0;
        for (int l = 0; l < 16; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
        isum += d * isuml;
        d = sc[is++] & 0xF;
        isuml = 0;
        for (int l = 16; l < 32; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
        isum += d * isuml;
        shift += 2;
        q8 += 32;
      }
      q2 += 32;
    }
    sumf += dall * isum - dmin * summs;
  }
  return sumf;
}

// The K-quant generic kernels accumulate 16-element groups into 8 int32 lanes
// and the per-block products into 8 float lanes; kept so the float rounding
// matches ggml's.
inline void AccumulateGroups(const int8_t* q8, const int8_t* a, int n_groups,
                             const int32_t* group_scales, int group_len,
                             int32_t aux32[8]) {
  int16_t aux16[8];
  for (int g = 0; g < n_groups; ++g) {
    const int32_t scale = group_scales[g];
    for (int k = 0; k < group_len / 8; ++k) {
      for (int l = 0; l < 8; ++l) aux16[l] = static_cast<int16_t>(q8[l] * a[l]);
      for (int l = 0; l < 8; ++l) aux32[l] += scale * aux16[l];
      q8 += 8;
      a += 8;
    }
  }
}

float DotQ3_K(int64_t n, const void* vx, const void* vy) {
  const BlockQ3_K* x = static_cast<const BlockQ3_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  int8_t aux8[kQK_K];
  float sums[8] = {0};
  int8_t scales[16];
  int32_t group_scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q3 = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    int32_t aux32[8] = {0};
    int8_t* a = aux8;
    uint8_t m = 1;
    for (int j = 0; j < kQK_K; j += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int l = 0; l < 32; ++l) a[l] = (q3[l] >> shift) & 3;
        for (int l = 0; l < 32; ++l) a[l] -= (hm[l] & m ? 0 : 4);
        a += 32;
        m <<= 1;
      }
      q3 += 32;
    }
    UnpackQ3KScales(x[i].scales, scales);
    for (int j = 0; j < 16; ++j) group_scales[j] = scales[j] - 32;
    AccumulateGroups(y[i].qs, aux8, 16, group_scales, 16, aux32);
    const float d = Fp16ToFp32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
  }
  float sumf = 0;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

// Q4_K / Q5_K: decoded codes in aux8, then scales and mins as ggml does.
float DotKWithMins(const uint16_t d16, const uint16_t dmin16, const uint8_t* packed,
                   const BlockQ8_K& y, const int8_t* aux8, float sums[8]) {
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) GetScaleMinK4(j, packed, &sc[j], &mn[j]);
  int sumi = 0;
  for (int j = 0; j < kQK_K / 16; ++j) sumi += y.bsums[j] * mn[j / 2];
  int32_t group_scales[8];
  for (int j = 0; j < 8; ++j) group_scales[j] = sc[j];
  int32_t aux32[8] = {0};
  AccumulateGroups(y.qs, aux8, 8, group_scales, 32, aux32);
  const float d = Fp16ToFp32(d16) * y.d;
  for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
  const float dmin = Fp16ToFp32(dmin16) * y.d;
  return dmin * sumi;
}

float DotQ4_K(int64_t n, const void* vx, const void* vy) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  int8_t aux8[kQK_K];
  float sums[8] = {0};
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q4 = x[i].qs;
    int8_t* a = aux8;
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int l = 0; l < 32; ++l) a[l] = (int8_t)(q4[l] & 0xF);
      a += 32;
      for (int l = 0; l < 32; ++l) a[l] = (int8_t)(q4[l] >> 4);
      a += 32;
      q4 += 32;
    }
    sumf -= DotKWithMins(x[i].d, x[i].dmin, x[i].scales, y[i], aux8, sums);
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float DotQ5_K(int64_t n, const void* vx, const void* vy) {
  const BlockQ5_K* x = static_cast<const BlockQ5_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  int8_t aux8[kQK_K];
  float sums[8] = {0};
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q4 = x[i].qs;
    const uint8_t* hm = x[i].qh;
    int8_t* a = aux8;
    uint8_t m = 1;
    for (int j = 0; j < kQK_K / 64; ++j) {
      for (int l = 0; l < 32; ++l) a[l] = (int8_t)(q4[l] & 0xF);
      for (int l = 0; l < 32; ++l) a[l] += (hm[l] & m ? 16 : 0);
      a += 32;
      m <<= 1;
      for (int l = 0; l < 32; ++l) a[l] = (int8_t)(q4[l] >> 4);
      for (int l = 0; l < 32; ++l) a[l] += (hm[l] & m ? 16 : 0);
      a += 32;
      m <<= 1;
      q4 += 32;
    }
    sumf -= DotKWithMins(x[i].d, x[i].dmin, x[i].scales, y[i], aux8, sums);
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float DotQ6_K(int64_t n, const void* vx, const void* vy) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  int8_t aux8[kQK_K];
  float sums[8] = {0};
  int32_t group_scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q4 = x[i].ql;
    const uint8_t* qh = x[i].qh;
    int8_t* a = aux8;
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        a[l + 0] = (int8_t)((q4[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        a[l + 32] = (int8_t)((q4[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        a[l + 64] = (int8_t)((q4[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        a[l + 96] = (int8_t)((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
      a += 128;
      q4 += 64;
      qh += 32;
    }
    for (int j = 0; j < 16; ++j) group_scales[j] = x[i].scales[j];
    int32_t aux32[8] = {0};
    AccumulateGroups(y[i].qs, aux8, 16, group_scales, 16, aux32);
    const float d = Fp16ToFp32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
  }
  float sumf = 0;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float DotIq4Xs(int64_t n, const void* vx, const void* vy) {
  const BlockIq4Xs* x = static_cast<const BlockIq4Xs*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  float sumf = 0;
  for (int64_t ibl = 0; ibl < n / kQK_K; ++ibl) {
    const float d4d8 = Fp16ToFp32(x[ibl].d) * y[ibl].d;
    uint16_t h = x[ibl].scales_h;
    const uint8_t* qs = x[ibl].qs;
    const int8_t* q8 = y[ibl].qs;
    for (int ib = 0; ib < kQK_K / 32; ib += 2) {
      const uint8_t ls1 = (x[ibl].scales_l[ib / 2] & 0xf) | ((h << 4) & 0x30);
      const uint8_t ls2 = (x[ibl].scales_l[ib / 2] >> 4) | ((h << 2) & 0x30);
      h >>= 4;
      const float d1 = d4d8 * (ls1 - 32);
      const float d2 = d4d8 * (ls2 - 32);
      for (const float dl : {d1, d2}) {
        int sumi1 = 0, sumi2 = 0;
        for (int j = 0; j < 16; ++j) {
          sumi1 += q8[j + 0] * kValuesIq4Nl[qs[j] & 0xf];
          sumi2 += q8[j + 16] * kValuesIq4Nl[qs[j] >> 4];
        }
        sumf += dl * (sumi1 + sumi2);
        qs += 16;
        q8 += 32;
      }
    }
  }
  return sumf;
}

// ggml_vec_dot_{iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,iq1_m,tq1_0,tq2_0}_q8_K:
// per superblock the exact integer sum of sub-scale times the group's code
// dot (the integer form of internal/unpack.h, which folds IQ1's +-1/8 delta
// into the codes and ggml's final 1/8 or 1/4 factor into d, both exactly),
// then sumf += d * d_a * isum block after block, as ggml's reference does.
template <GgmlType kType>
float DotIqK(int64_t n, const void* vx, const void* vy) {
  constexpr uint64_t kBytes = [] {
    switch (kType) {
      case GgmlType::kIQ2_XXS: return sizeof(BlockIq2Xxs);
      case GgmlType::kIQ2_XS: return sizeof(BlockIq2Xs);
      case GgmlType::kIQ2_S: return sizeof(BlockIq2S);
      case GgmlType::kIQ3_XXS: return sizeof(BlockIq3Xxs);
      case GgmlType::kIQ3_S: return sizeof(BlockIq3S);
      case GgmlType::kIQ1_S: return sizeof(BlockIq1S);
      case GgmlType::kIQ1_M: return sizeof(BlockIq1M);
      case GgmlType::kTQ1_0: return sizeof(BlockTq1_0);
      default: return sizeof(BlockTq2_0);
    }
  }();
  UnpackLayout L;
  GetUnpackLayout(kType, &L);
  const uint8_t* x = static_cast<const uint8_t*>(vx);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(vy);
  uint8_t codes[kQK_K];
  int32_t sub[16];
  int16_t mins[16];
  float d = 0, dmin = 0;
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    UnpackBlock(kType, x + i * kBytes, {codes, sub, mins, &d, &dmin});
    int32_t isum = 0;
    for (int g = 0; g < kQK_K / L.group; ++g) {
      int32_t s = 0;
      for (int k = g * L.group; k < (g + 1) * L.group; ++k) s += static_cast<int8_t>(codes[k]) * y[i].qs[k];
      isum += sub[g] * s;
    }
    sumf += d * y[i].d * static_cast<float>(isum);
  }
  return sumf;
}

template <VecDotFn kDot>
void DotRows(int64_t n, const void* w, uint64_t row_bytes, int64_t n_rows, const void* a, float* y) {
  const uint8_t* p = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < n_rows; ++r) y[r] = kDot(n, p + r * row_bytes, a);
}

}  // namespace

VecDotRowsFn ScalarVecDotRows(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return DotRows<DotF32>;
    case GgmlType::kF16: return DotRows<DotF16>;
    case GgmlType::kBF16: return DotRows<DotBf16>;
    case GgmlType::kQ4_0: return DotRows<DotQ4_0>;
    case GgmlType::kQ4_1: return DotRows<DotQ4_1>;
    case GgmlType::kQ5_0: return DotRows<DotQ5_0>;
    case GgmlType::kQ5_1: return DotRows<DotQ5_1>;
    case GgmlType::kQ8_0: return DotRows<DotQ8_0>;
    case GgmlType::kMXFP4: return DotRows<DotMxfp4>;
    case GgmlType::kIQ4_NL: return DotRows<DotIq4Nl>;
    case GgmlType::kQ2_K: return DotRows<DotQ2_K>;
    case GgmlType::kQ3_K: return DotRows<DotQ3_K>;
    case GgmlType::kQ4_K: return DotRows<DotQ4_K>;
    case GgmlType::kQ5_K: return DotRows<DotQ5_K>;
    case GgmlType::kQ6_K: return DotRows<DotQ6_K>;
    case GgmlType::kIQ4_XS: return DotRows<DotIq4Xs>;
    case GgmlType::kIQ2_XXS: return DotRows<DotIqK<GgmlType::kIQ2_XXS>>;
    case GgmlType::kIQ2_XS: return DotRows<DotIqK<GgmlType::kIQ2_XS>>;
    case GgmlType::kIQ2_S: return DotRows<DotIqK<GgmlType::kIQ2_S>>;
    case GgmlType::kIQ3_XXS: return DotRows<DotIqK<GgmlType::kIQ3_XXS>>;
    case GgmlType::kIQ3_S: return DotRows<DotIqK<GgmlType::kIQ3_S>>;
    case GgmlType::kIQ1_S: return DotRows<DotIqK<GgmlType::kIQ1_S>>;
    case GgmlType::kIQ1_M: return DotRows<DotIqK<GgmlType::kIQ1_M>>;
    case GgmlType::kTQ1_0: return DotRows<DotIqK<GgmlType::kTQ1_0>>;
    case GgmlType::kTQ2_0: return DotRows<DotIqK<GgmlType::kTQ2_0>>;
    default: return nullptr;
  }
}

VecDotFn ScalarVecDot(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return DotF32;
    case GgmlType::kF16: return DotF16;
    case GgmlType::kBF16: return DotBf16;
    case GgmlType::kQ4_0: return DotQ4_0;
    case GgmlType::kQ4_1: return DotQ4_1;
    case GgmlType::kQ5_0: return DotQ5_0;
    case GgmlType::kQ5_1: return DotQ5_1;
    case GgmlType::kQ8_0: return DotQ8_0;
    case GgmlType::kMXFP4: return DotMxfp4;
    case GgmlType::kIQ4_NL: return DotIq4Nl;
    case GgmlType::kQ2_K: return DotQ2_K;
    case GgmlType::kQ3_K: return DotQ3_K;
    case GgmlType::kQ4_K: return DotQ4_K;
    case GgmlType::kQ5_K: return DotQ5_K;
    case GgmlType::kQ6_K: return DotQ6_K;
    case GgmlType::kIQ4_XS: return DotIq4Xs;
    case GgmlType::kIQ2_XXS: return DotIqK<GgmlType::kIQ2_XXS>;
    case GgmlType::kIQ2_XS: return DotIqK<GgmlType::kIQ2_XS>;
    case GgmlType::kIQ2_S: return DotIqK<GgmlType::kIQ2_S>;
    case GgmlType::kIQ3_XXS: return DotIqK<GgmlType::kIQ3_XXS>;
    case GgmlType::kIQ3_S: return DotIqK<GgmlType::kIQ3_S>;
    case GgmlType::kIQ1_S: return DotIqK<GgmlType::kIQ1_S>;
    case GgmlType::kIQ1_M: return DotIqK<GgmlType::kIQ1_M>;
    case GgmlType::kTQ1_0: return DotIqK<GgmlType::kTQ1_0>;
    case GgmlType::kTQ2_0: return DotIqK<GgmlType::kTQ2_0>;
    default: return nullptr;
  }
}

bool VecDotTypeOf(GgmlType type, GgmlType* out) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
      *out = type;
      return true;
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kMXFP4:
    case GgmlType::kIQ4_NL:
      *out = GgmlType::kQ8_0;
      return true;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
      *out = GgmlType::kQ8_1;
      return true;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kIQ4_XS:
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M:
    case GgmlType::kTQ1_0:
    case GgmlType::kTQ2_0:
      *out = GgmlType::kQ8_K;
      return true;
    default:
      return false;
  }
}

}  // namespace moesplit::quant::internal
