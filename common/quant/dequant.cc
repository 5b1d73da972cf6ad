// Scalar dequantisers: ports of ggml's dequantize_row_* (ggml-quants.c),
// computing every value with the same float operations in the same order so
// the results are bit-identical to ggml's.

#include <cstring>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/iq_grids.h"
#include "common/quant/internal/kernels.h"

namespace moesplit::quant::internal {
namespace {

void DequantF32(const void* src, float* y, int64_t n) {
  std::memcpy(y, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantF16(const void* src, float* y, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp16ToFp32(x[i]);
}

void DequantBf16(const void* src, float* y, int64_t n) {
  const uint16_t* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) y[i] = Bf16ToFp32(x[i]);
}

void DequantQ4_0(const void* src, float* y, int64_t n) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(src);
  constexpr int qk = kQK4_0;
  for (int64_t i = 0; i < n / qk; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < qk / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[i * qk + j] = x0 * d;
      y[i * qk + j + qk / 2] = x1 * d;
    }
  }
}

void DequantQ4_1(const void* src, float* y, int64_t n) {
  const BlockQ4_1* x = static_cast<const BlockQ4_1*>(src);
  constexpr int qk = kQK4_1;
  for (int64_t i = 0; i < n / qk; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float m = Fp16ToFp32(x[i].m);
    for (int j = 0; j < qk / 2; ++j) {
      const int x0 = x[i].qs[j] & 0x0F;
      const int x1 = x[i].qs[j] >> 4;
      y[i * qk + j] = x0 * d + m;
      y[i * qk + j + qk / 2] = x1 * d + m;
    }
  }
}

void DequantQ5_0(const void* src, float* y, int64_t n) {
  const BlockQ5_0* x = static_cast<const BlockQ5_0*>(src);
  constexpr int qk = kQK5_0;
  for (int64_t i = 0; i < n / qk; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
      const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh_0) - 16;
      const int32_t x1 = ((x[i].qs[j] >> 4) | xh_1) - 16;
      y[i * qk + j] = x0 * d;
      y[i * qk + j + qk / 2] = x1 * d;
    }
  }
}

void DequantQ5_1(const void* src, float* y, int64_t n) {
  const BlockQ5_1* x = static_cast<const BlockQ5_1*>(src);
  constexpr int qk = kQK5_1;
  for (int64_t i = 0; i < n / qk; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float m = Fp16ToFp32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
      const int x0 = (x[i].qs[j] & 0x0F) | xh_0;
      const int x1 = (x[i].qs[j] >> 4) | xh_1;
      y[i * qk + j] = x0 * d + m;
      y[i * qk + j + qk / 2] = x1 * d + m;
    }
  }
}

void DequantQ8_0(const void* src, float* y, int64_t n) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(src);
  constexpr int qk = kQK8_0;
  for (int64_t i = 0; i < n / qk; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < qk; ++j) y[i * qk + j] = x[i].qs[j] * d;
  }
}

void DequantQ8_1(const void* src, float* y, int64_t n) {
  const BlockQ8_1* x = static_cast<const BlockQ8_1*>(src);
  constexpr int qk = kQK8_1;
  for (int64_t i = 0; i < n / qk; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < qk; ++j) y[i * qk + j] = x[i].qs[j] * d;
  }
}

void DequantMxfp4(const void* src, float* y, int64_t n) {
  const BlockMxfp4* x = static_cast<const BlockMxfp4*>(src);
  constexpr int qk = kQKMxfp4;
  for (int64_t i = 0; i < n / qk; ++i) {
    const float d = E8m0ToFp32Half(x[i].e);
    for (int j = 0; j < qk / 2; ++j) {
      const int8_t x0 = kValuesMxfp4[x[i].qs[j] & 0x0F];
      const int8_t x1 = kValuesMxfp4[x[i].qs[j] >> 4];
      y[i * qk + j] = x0 * d;
      y[i * qk + j + qk / 2] = x1 * d;
    }
  }
}

void DequantQ2_K(const void* src, float* y, int64_t n) {
  const BlockQ2_K* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int n128 = 0; n128 < kQK_K; n128 += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = x[i].scales[is++];
        float dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
        sc = x[i].scales[is++];
        dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

void DequantQ3_K(const void* src, float* y, int64_t n) {
  const BlockQ3_K* x = static_cast<const BlockQ3_K*>(src);
  int8_t scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = Fp16ToFp32(x[i].d);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    UnpackQ3KScales(x[i].scales, scales);
    int is = 0;
    for (int n128 = 0; n128 < kQK_K; n128 += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
        }
        dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        }
        shift += 2;
        m <<= 1;
      }
      q += 32;
    }
  }
}

void DequantQ4_K(const void* src, float* y, int64_t n) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < kQK_K; j += 64) {
      GetScaleMinK4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      GetScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void DequantQ5_K(const void* src, float* y, int64_t n) {
  const BlockQ5_K* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = Fp16ToFp32(x[i].d);
    const float min = Fp16ToFp32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64) {
      GetScaleMinK4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      GetScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

void DequantQ6_K(const void* src, float* y, int64_t n) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n128 = 0; n128 < kQK_K; n128 += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void DequantQ8_K(const void* src, float* y, int64_t n) {
  const BlockQ8_K* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * x[i].qs[j];
  }
}

void DequantIq4Nl(const void* src, float* y, int64_t n) {
  const BlockIq4Nl* x = static_cast<const BlockIq4Nl*>(src);
  for (int64_t i = 0; i < n / kQK4_NL; ++i) {
    const uint8_t* qs = x[i].qs;
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[j + 0] = d * kValuesIq4Nl[qs[j] & 0xf];
      y[j + kQK4_NL / 2] = d * kValuesIq4Nl[qs[j] >> 4];
    }
    y += kQK4_NL;
  }
}

void DequantIq4Xs(const void* src, float* y, int64_t n) {
  const BlockIq4Xs* x = static_cast<const BlockIq4Xs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* qs = x[i].qs;
    const float d = Fp16ToFp32(x[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) |
                     (((x[i].scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * (ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j + 0] = dl * kValuesIq4Nl[qs[j] & 0xf];
        y[j + 16] = dl * kValuesIq4Nl[qs[j] >> 4];
      }
      y += 32;
      qs += 16;
    }
  }
}

// --- i-quants (ggml dequantize_row_iq2_xxs ... iq1_m) ---------------------
//
// Each group of 8 values is one codebook entry (internal/iq_grids.h, value j in
// byte j) times a sub-block scale, with per-value signs for IQ2_*/IQ3_* and a
// +-delta offset for IQ1_*. The float steps are ggml's, in ggml's order.

// Value j of entry `index` of a grid of 8 one-byte values.
inline uint8_t GridByte(const uint64_t* grid, int index, int j) {
  return static_cast<uint8_t>(grid[index] >> (8 * j));
}
inline uint8_t GridByte(const uint32_t* grid, int index, int j) {
  return static_cast<uint8_t>(grid[index] >> (8 * j));
}
// -1 where sign bit j of `signs` is set, +1 otherwise.
inline float Sign(uint8_t signs, int j) { return (signs & kMaskIq2Xs[j]) ? -1.f : 1.f; }

void DequantIq2Xxs(const void* src, float* y, int64_t n) {
  const BlockIq2Xxs* x = static_cast<const BlockIq2Xxs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      // 4 grid indices (bytes), then 4 x 7 sign-pattern bits and a 4-bit scale.
      uint8_t idx[4];
      uint32_t aux;
      std::memcpy(idx, x[i].qs + 4 * ib32, 4);
      std::memcpy(&aux, x[i].qs + 4 * ib32 + 2, 4);
      const float db = d * (0.5f + (aux >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = kSignsIq2Xs[(aux >> 7 * l) & 127];
        for (int j = 0; j < 8; ++j) y[j] = db * GridByte(kIq2XxsGrid, idx[l], j) * Sign(signs, j);
        y += 8;
      }
    }
  }
}

void DequantIq2Xs(const void* src, float* y, int64_t n) {
  const BlockIq2Xs* x = static_cast<const BlockIq2Xs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      const float db[2] = {d * (0.5f + (x[i].scales[ib32] & 0xf)) * 0.25f,
                           d * (0.5f + (x[i].scales[ib32] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = x[i].qs[4 * ib32 + l];
        const int index = q & 511;
        const uint8_t signs = kSignsIq2Xs[q >> 9];
        for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * GridByte(kIq2XsGrid, index, j) * Sign(signs, j);
        y += 8;
      }
    }
  }
}

void DequantIq2S(const void* src, float* y, int64_t n) {
  const BlockIq2S* x = static_cast<const BlockIq2S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* qs = x[i].qs;
    const uint8_t* signs = x[i].qs + kQK_K / 8;
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      const float db[2] = {d * (0.5f + (x[i].scales[ib32] & 0xf)) * 0.25f,
                           d * (0.5f + (x[i].scales[ib32] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l) {
        // 10-bit index: 8 bits from qs, 2 from qh (bits 2l, 2l+1).
        const int index = qs[l] | (((x[i].qh[ib32] >> (2 * l)) & 3) << 8);
        for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * GridByte(kIq2SGrid, index, j) * Sign(signs[l], j);
        y += 8;
      }
      qs += 4;
      signs += 4;
    }
  }
}

void DequantIq3Xxs(const void* src, float* y, int64_t n) {
  const BlockIq3Xxs* x = static_cast<const BlockIq3Xxs*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* qs = x[i].qs;
    const uint8_t* scales_and_signs = x[i].qs + kQK_K / 4;
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      uint32_t aux;
      std::memcpy(&aux, scales_and_signs + 4 * ib32, 4);
      const float db = d * (0.5f + (aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = kSignsIq2Xs[(aux >> 7 * l) & 127];
        // Two 4-value grid entries per group of 8.
        for (int j = 0; j < 4; ++j) {
          y[j + 0] = db * GridByte(kIq3XxsGrid, qs[2 * l + 0], j) * Sign(signs, j + 0);
          y[j + 4] = db * GridByte(kIq3XxsGrid, qs[2 * l + 1], j) * Sign(signs, j + 4);
        }
        y += 8;
      }
      qs += 8;
    }
  }
}

void DequantIq3S(const void* src, float* y, int64_t n) {
  const BlockIq3S* x = static_cast<const BlockIq3S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* qs = x[i].qs;
    const uint8_t* signs = x[i].signs;
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      const int sc = (x[i].scales[ib32 / 2] >> (4 * (ib32 % 2))) & 0xf;
      const float db = d * (1 + 2 * sc);
      const uint8_t qh = x[i].qh[ib32];
      for (int l = 0; l < 4; ++l) {
        // 9-bit indices: bit 8 of entry k (0..7 in this sub-block) is qh bit k.
        const int index1 = qs[2 * l + 0] | (((qh >> (2 * l + 0)) & 1) << 8);
        const int index2 = qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8);
        for (int j = 0; j < 4; ++j) {
          y[j + 0] = db * GridByte(kIq3SGrid, index1, j) * Sign(signs[l], j + 0);
          y[j + 4] = db * GridByte(kIq3SGrid, index2, j) * Sign(signs[l], j + 4);
        }
        y += 8;
      }
      qs += 8;
      signs += 4;
    }
  }
}

void DequantIq1S(const void* src, float* y, int64_t n) {
  const BlockIq1S* x = static_cast<const BlockIq1S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const uint16_t qh = x[i].qh[ib];
      const float dl = d * (2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) ? -kIq1SDelta : kIq1SDelta;
      for (int l = 0; l < 4; ++l) {
        const int index = qs[l] | (((qh >> (3 * l)) & 7) << 8);
        for (int j = 0; j < 8; ++j) {
          y[j] = dl * (static_cast<int8_t>(GridByte(kIq1SGrid, index, j)) + delta);
        }
        y += 8;
      }
      qs += 4;
    }
  }
}

void DequantIq1M(const void* src, float* y, int64_t n) {
  const BlockIq1M* x = static_cast<const BlockIq1M*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    // Four little-endian 16-bit words: 4 x (two 3-bit scales, twice) and the
    // block's f16 scale spread over their top nibbles.
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, sizeof(sc));
    const uint16_t d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                               ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    const float d = Fp16ToFp32(d16);
    const uint8_t* qs = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const float dl[2] = {d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1),
                           d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1)};
      for (int l = 0; l < 4; ++l) {
        // Group l: low index bits qs[l]; qh byte l/2 holds 3 high bits and the
        // delta sign per group, in its low (even l) or high (odd l) nibble.
        const int nib = (qh[l / 2] >> (4 * (l % 2))) & 0xf;
        const int index = qs[l] | ((nib & 7) << 8);
        const float delta = (nib & 8) ? -kIq1MDelta : kIq1MDelta;
        for (int j = 0; j < 8; ++j) {
          y[j] = dl[l / 2] * (static_cast<int8_t>(GridByte(kIq1SGrid, index, j)) + delta);
        }
        y += 8;
      }
      qs += 4;
      qh += 2;
    }
  }
}

// --- ternary (ggml dequantize_row_tq1_0 / tq2_0) ---------------------------

// Digit `n` (0 = most significant) of a byte holding base-3 digits as a
// fixed-point fraction: the digit is the integer part of 3 * (b * 3^n mod 256).
inline int Tq1Digit(uint8_t b, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t q = static_cast<uint8_t>(b * kPow3[n]);
  return (static_cast<uint16_t>(q) * 3) >> 8;
}

void DequantTq1_0(const void* src, float* y, int64_t n) {
  const BlockTq1_0* x = static_cast<const BlockTq1_0*>(src);
  constexpr int kQs = sizeof(x->qs);  // 48: one run of 32 bytes, then one of 16
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    // Value order: for each run of bytes, digit 0 of every byte, then digit 1, ...
    for (int j = 0; j < kQs;) {
      const int run = kQs - j >= 32 ? 32 : 16;
      for (int dn = 0; dn < 5; ++dn) {
        for (int m = 0; m < run; ++m) *y++ = static_cast<float>(Tq1Digit(x[i].qs[j + m], dn) - 1) * d;
      }
      j += run;
    }
    for (int dn = 0; dn < 4; ++dn) {
      for (int m = 0; m < static_cast<int>(sizeof(x->qh)); ++m) {
        *y++ = static_cast<float>(Tq1Digit(x[i].qh[m], dn) - 1) * d;
      }
    }
  }
}

void DequantTq2_0(const void* src, float* y, int64_t n) {
  const BlockTq2_0* x = static_cast<const BlockTq2_0*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK_K / 4; j += 32) {
      for (int l = 0; l < 4; ++l) {
        for (int m = 0; m < 32; ++m) {
          *y++ = static_cast<float>(((x[i].qs[j + m] >> (2 * l)) & 3) - 1) * d;
        }
      }
    }
  }
}

}  // namespace

DequantRowFn ScalarDequantizer(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return DequantF32;
    case GgmlType::kF16: return DequantF16;
    case GgmlType::kBF16: return DequantBf16;
    case GgmlType::kQ4_0: return DequantQ4_0;
    case GgmlType::kQ4_1: return DequantQ4_1;
    case GgmlType::kQ5_0: return DequantQ5_0;
    case GgmlType::kQ5_1: return DequantQ5_1;
    case GgmlType::kQ8_0: return DequantQ8_0;
    case GgmlType::kQ8_1: return DequantQ8_1;
    case GgmlType::kMXFP4: return DequantMxfp4;
    case GgmlType::kQ2_K: return DequantQ2_K;
    case GgmlType::kQ3_K: return DequantQ3_K;
    case GgmlType::kQ4_K: return DequantQ4_K;
    case GgmlType::kQ5_K: return DequantQ5_K;
    case GgmlType::kQ6_K: return DequantQ6_K;
    case GgmlType::kQ8_K: return DequantQ8_K;
    case GgmlType::kIQ4_NL: return DequantIq4Nl;
    case GgmlType::kIQ4_XS: return DequantIq4Xs;
    case GgmlType::kIQ2_XXS: return DequantIq2Xxs;
    case GgmlType::kIQ2_XS: return DequantIq2Xs;
    case GgmlType::kIQ2_S: return DequantIq2S;
    case GgmlType::kIQ3_XXS: return DequantIq3Xxs;
    case GgmlType::kIQ3_S: return DequantIq3S;
    case GgmlType::kIQ1_S: return DequantIq1S;
    case GgmlType::kIQ1_M: return DequantIq1M;
    case GgmlType::kTQ1_0: return DequantTq1_0;
    case GgmlType::kTQ2_0: return DequantTq2_0;
    default: return nullptr;
  }
}

}  // namespace moesplit::quant::internal
