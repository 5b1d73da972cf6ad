// Reference quantisers: ports of ggml's quantize_row_*_ref (ggml-quants.c),
// the deterministic versions llama-quantize uses without an importance
// matrix. Same float operations in the same order, so the output blocks are
// byte-identical to ggml's.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/kernels.h"

namespace moesplit::quant::internal {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// ggml nearest_int: round half to even via the 1.5*2^23 trick.
// REQUIRES: |fval| <= 4194303.
inline int NearestInt(float fval) {
  const float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// ggml make_qx_quants (symmetric, weighted least squares over 19 scales).
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L, int rmse_type,
                   const float* qw) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = NearestInt(iscale * x[i]);
      L[i] = nmax + std::max(-nmax, std::min(nmax - 1, l));
    }
    return 1 / iscale;
  }
  auto weight = [&](int i) {
    return qw ? qw[i]
              : rmse_type == 1 ? x[i] * x[i]
              : rmse_type == 2 ? 1
              : rmse_type == 3 ? std::fabs(x[i])
                               : std::sqrt(std::fabs(x[i]));
  };
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = l + nmax;
    const float w = weight(i);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(i);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = nmax + std::max(-nmax, std::min(nmax - 1, l));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml make_q3_quants with do_rmse = true (coordinate descent on the codes).
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = l;
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = NearestInt(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = new_l;
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] += nmax;
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// One candidate scale of make_qkx2_quants: codes for `iscale` (in Laux),
// the weighted least-squares scale and min for them, and their error.
// Returns false when the fit is degenerate (D <= 0).
bool TryQkx2Scale(int n, int nmax, const float* x, const float* weights, float sum_w,
                  float sum_x, float min, float iscale, bool use_mad, uint8_t* Laux,
                  float* scale_out, float* min_out, float* error_out) {
  float sum_l = 0, sum_l2 = 0, sum_xl = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * (x[i] - min));
    l = std::max(0, std::min(nmax, l));
    Laux[i] = l;
    const float w = weights[i];
    sum_l += w * l;
    sum_l2 += w * l * l;
    sum_xl += w * l * x[i];
  }
  const float D = sum_w * sum_l2 - sum_l * sum_l;
  if (!(D > 0)) return false;
  float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
  float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
  if (this_min > 0) {
    this_min = 0;
    this_scale = sum_xl / sum_l2;
  }
  float cur_error = 0;
  for (int i = 0; i < n; ++i) {
    float diff = this_scale * Laux[i] + this_min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    cur_error += weights[i] * diff;
  }
  *scale_out = this_scale;
  *min_out = this_min;
  *error_out = cur_error;
  return true;
}

// ggml make_qkx2_quants (asymmetric scale + min search).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights,
                     uint8_t* L, float* the_min, uint8_t* Laux, float rmin,
                     float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = std::max(0, std::min(nmax, l));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float this_scale, this_min, cur_error;
    if (TryQkx2Scale(n, nmax, x, weights, sum_w, sum_x, min, iscale, use_mad, Laux,
                     &this_scale, &this_min, &cur_error) &&
        cur_error < best_error) {
      for (int i = 0; i < n; ++i) L[i] = Laux[i];
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

void QuantF32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

void QuantF16(const float* x, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToFp16(x[i]);
}

void QuantBf16(const float* x, void* dst, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToBf16(x[i]);
}

// Absolute maximum and the signed value that attains it (first occurrence).
inline void SignedAbsMax(const float* x, int n, float* amax, float* max) {
  *amax = 0.0f;
  *max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (*amax < std::fabs(x[j])) {
      *amax = std::fabs(x[j]);
      *max = x[j];
    }
  }
}

void QuantQ4_0(const float* x, void* dst, int64_t n) {
  BlockQ4_0* y = static_cast<BlockQ4_0*>(dst);
  constexpr int qk = kQK4_0;
  for (int64_t i = 0; i < n / qk; ++i) {
    float amax, max;
    SignedAbsMax(x + i * qk, qk, &amax, &max);
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = x[i * qk + 0 + j] * id;
      const float x1 = x[i * qk + qk / 2 + j] * id;
      const uint8_t xi0 = std::min<int>(15, static_cast<int8_t>(x0 + 8.5f));
      const uint8_t xi1 = std::min<int>(15, static_cast<int8_t>(x1 + 8.5f));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void QuantQ4_1(const float* x, void* dst, int64_t n) {
  BlockQ4_1* y = static_cast<BlockQ4_1*>(dst);
  constexpr int qk = kQK4_1;
  for (int64_t i = 0; i < n / qk; ++i) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < qk; ++j) {
      const float v = x[i * qk + j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(min);
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = (x[i * qk + 0 + j] - min) * id;
      const float x1 = (x[i * qk + qk / 2 + j] - min) * id;
      const uint8_t xi0 = std::min<int>(15, static_cast<int8_t>(x0 + 0.5f));
      const uint8_t xi1 = std::min<int>(15, static_cast<int8_t>(x1 + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void QuantQ5_0(const float* x, void* dst, int64_t n) {
  BlockQ5_0* y = static_cast<BlockQ5_0*>(dst);
  constexpr int qk = kQK5_0;
  for (int64_t i = 0; i < n / qk; ++i) {
    float amax, max;
    SignedAbsMax(x + i * qk, qk, &amax, &max);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = x[i * qk + 0 + j] * id;
      const float x1 = x[i * qk + qk / 2 + j] * id;
      const uint8_t xi0 = std::min<int>(31, static_cast<int8_t>(x0 + 16.5f));
      const uint8_t xi1 = std::min<int>(31, static_cast<int8_t>(x1 + 16.5f));
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void QuantQ5_1(const float* x, void* dst, int64_t n) {
  BlockQ5_1* y = static_cast<BlockQ5_1*>(dst);
  constexpr int qk = kQK5_1;
  for (int64_t i = 0; i < n / qk; ++i) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < qk; ++j) {
      const float v = x[i * qk + j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < qk / 2; ++j) {
      const float x0 = (x[i * qk + 0 + j] - min) * id;
      const float x1 = (x[i * qk + qk / 2 + j] - min) * id;
      const uint8_t xi0 = static_cast<uint8_t>(x0 + 0.5f);
      const uint8_t xi1 = static_cast<uint8_t>(x1 + 0.5f);
      y[i].qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

void QuantQ8_0(const float* x, void* dst, int64_t n) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[i * kQK8_0 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::roundf(x[i * kQK8_0 + j] * id));
    }
  }
}

void QuantQ8_1(const float* x, void* dst, int64_t n) {
  BlockQ8_1* y = static_cast<BlockQ8_1*>(dst);
  constexpr int qk = kQK8_1;
  for (int64_t i = 0; i < n / qk; ++i) {
    float amax = 0.0f;
    for (int j = 0; j < qk; ++j) amax = std::max(amax, std::fabs(x[i * qk + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    int sum = 0;
    for (int j = 0; j < qk / 2; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::roundf(x[i * qk + j] * id));
      y[i].qs[qk / 2 + j] = static_cast<int8_t>(std::roundf(x[i * qk + qk / 2 + j] * id));
      sum += y[i].qs[j];
      sum += y[i].qs[qk / 2 + j];
    }
    y[i].s = Fp32ToFp16(sum * d);
  }
}

inline int BestIndexMxfp4(float x, float e) {
  int best_index = 0;
  float best_err = std::fabs(kValuesMxfp4[0] * e - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(kValuesMxfp4[i] * e - x);
    if (err < best_err) {
      best_index = i;
      best_err = err;
    }
  }
  return best_index;
}

void QuantMxfp4(const float* x, void* dst, int64_t n) {
  BlockMxfp4* y = static_cast<BlockMxfp4*>(dst);
  constexpr int qk = kQKMxfp4;
  for (int64_t i = 0; i < n / qk; ++i) {
    float amax = 0.0f;
    for (int j = 0; j < qk; ++j) amax = std::max(amax, std::fabs(x[i * qk + j]));
    // ggml casts without clamping (undefined outside 0..255); clamp instead.
    const float e_f = amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
    const uint8_t e = static_cast<uint8_t>(std::clamp(e_f, 0.0f, 255.0f));
    const float d = E8m0ToFp32Half(e);
    y[i].e = e;
    for (int j = 0; j < qk / 2; ++j) {
      const uint8_t x0 = BestIndexMxfp4(x[i * qk + 0 + j], d);
      const uint8_t x1 = BestIndexMxfp4(x[i * qk + qk / 2 + j], d);
      y[i].qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

void QuantQ2_K(const float* x, void* dst, int64_t n) {
  BlockQ2_K* y = static_cast<BlockQ2_K*>(dst);
  uint8_t L[kQK_K], Laux[16];
  float weights[16], mins[kQK_K / 16], scales[kQK_K / 16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j],
                                 Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        y[i].scales[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
      }
      y[i].d = Fp32ToFp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = 0;
      y[i].d = Fp32ToFp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQK_K / 16; ++j) {
        const int l = NearestInt(iscale * mins[j]);
        y[i].scales[j] |= static_cast<uint8_t>(l << 4);
      }
      y[i].dmin = Fp32ToFp16(max_min / q4scale);
    } else {
      y[i].dmin = Fp32ToFp16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = Fp16ToFp32(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = Fp16ToFp32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = NearestInt((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                  (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
    x += kQK_K;
  }
}

// Splits codes 0..7 into the Q3_K high-bit mask and 2-bit planes.
void PackQ3K(int8_t* L, BlockQ3_K* y) {
  std::memset(y->hmask, 0, kQK_K / 8);
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < kQK_K; ++j) {
    if (L[j] > 3) {
      y->hmask[m] |= hm;
      L[j] -= 4;
    }
    if (++m == kQK_K / 8) {
      m = 0;
      hm <<= 1;
    }
  }
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      y->qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                              (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

void QuantQ3_K(const float* x, void* dst, int64_t n) {
  BlockQ3_K* y = static_cast<BlockQ3_K*>(dst);
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, 12);
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        int8_t l = static_cast<int8_t>(NearestInt(iscale * scales[j]));
        l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
        PutQ3KScale(j, l, y[i].scales);
      }
      y[i].d = Fp32ToFp16(1 / iscale);
    } else {
      y[i].d = Fp32ToFp16(0.f);
    }
    int8_t sc[16];
    UnpackQ3KScales(y[i].scales, sc);
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = Fp16ToFp32(y[i].d) * (sc[j] - 32);
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = NearestInt(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    PackQ3K(L, &y[i]);
    x += kQK_K;
  }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per-32 scales and mins,
// quantised to 6 bits against the super-block maxima; fills L with codes.
void QuantKScalesMins(const float* x, int nmax, float rmin, float rdelta, int nstep,
                      uint8_t* L, uint8_t* packed, uint16_t* d_out, uint16_t* dmin_out) {
  uint8_t Laux[32];
  float weights[32], mins[kQK_K / 32], scales[kQK_K / 32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                               rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(packed, 0, kKScaleSize);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    PutScaleMinK4(j, ls, lm, packed);
  }
  *d_out = Fp32ToFp16(max_scale / 63.f);
  *dmin_out = Fp32ToFp16(max_min / 63.f);
  uint8_t sc, m;
  for (int j = 0; j < kQK_K / 32; ++j) {
    GetScaleMinK4(j, packed, &sc, &m);
    const float d = Fp16ToFp32(*d_out) * sc;
    if (!d) continue;
    const float dm = Fp16ToFp32(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

void QuantQ4_K(const float* x, void* dst, int64_t n) {
  BlockQ4_K* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantKScalesMins(x, 15, -1.f, 0.1f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
    x += kQK_K;
  }
}

void QuantQ5_K(const float* x, void* dst, int64_t n) {
  BlockQ5_K* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantKScalesMins(x, 31, -0.5f, 0.1f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n64 = 0; n64 < kQK_K; n64 += 64) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n64 + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n64 + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 <<= 2;
      m2 <<= 2;
      ql += 32;
    }
    x += kQK_K;
  }
}

void PackQ6K(const int8_t* L, BlockQ6_K* y) {
  uint8_t* ql = y->ql;
  uint8_t* qh = y->qh;
  for (int j = 0; j < kQK_K; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF;
      const uint8_t q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF;
      const uint8_t q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                   ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

void QuantQ6_K(const float* x, void* dst, int64_t n) {
  BlockQ6_K* y = static_cast<BlockQ6_K*>(dst);
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib, 1, nullptr);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = Fp32ToFp16(0.f);
      x += kQK_K;
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = Fp32ToFp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = Fp16ToFp32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = NearestInt(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    PackQ6K(L, &y[i]);
    x += kQK_K;
  }
}

void QuantQ8_K(const float* x, void* dst, int64_t n) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      // ggml leaves bsums untouched here; zero them so the block is defined.
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      x += kQK_K;
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = NearestInt(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(std::min(127, v));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
    x += kQK_K;
  }
}

// ggml best_index_int8: index of the nearest value in a sorted table (ties go
// up). REQUIRES: n is a power of two.
inline int BestIndexInt8(int n, const int8_t* val, float x) {
  const float x2 = x + x;
  int idx = 0;
  for (int step = n >> 1; step > 0; step >>= 1) {
    const int j = idx + step;
    idx = (x2 >= static_cast<float>(val[j - 1] + val[j])) ? j : idx;
  }
  return idx;
}

// Best IQ4 scale for one block of 32 (the sub-block part of ggml
// quantize_row_iq4_nl_impl with ntry = 7 and no importance weights).
float Iq4BlockScale(const float* xb, uint8_t* Lb) {
  constexpr int kNtry = 7;
  const int8_t* values = kValuesIq4Nl;
  float weight[32];
  for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) { amax = ax; max = xb[j]; }
  }
  if (amax < kGroupMaxEps) {
    std::memset(Lb, 0, 32);
    return 0;
  }
  float d = -max / values[0];
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const int l = BestIndexInt8(16, values, id * xb[j]);
    Lb[j] = static_cast<uint8_t>(l);
    const float q = values[l];
    sumqx += weight[j] * q * xb[j];
    sumq2 += weight[j] * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int itry = -kNtry; itry <= kNtry; ++itry) {
    id = (itry + values[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = values[BestIndexInt8(16, values, id * xb[j])];
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

void PackIq4(const uint8_t* L, int n, uint8_t* q4) {
  for (int i = 0; i < n / 32; ++i) {
    for (int j = 0; j < 16; ++j) {
      q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
    }
  }
}

// ggml quantize_iq4_nl(..., quant_weights = NULL): what llama-quantize writes.
void QuantIq4Nl(const float* x, void* dst, int64_t n) {
  BlockIq4Nl* y = static_cast<BlockIq4Nl*>(dst);
  uint8_t L[kQK4_NL];
  for (int64_t ib = 0; ib < n / kQK4_NL; ++ib) {
    const float* xb = x + ib * kQK4_NL;
    const float scale = Iq4BlockScale(xb, L);
    y[ib].d = Fp32ToFp16(scale);
    const float id = scale ? 1 / scale : 0;
    for (int j = 0; j < kQK4_NL; ++j) {
      L[j] = static_cast<uint8_t>(BestIndexInt8(16, kValuesIq4Nl, id * xb[j]));
    }
    PackIq4(L, kQK4_NL, y[ib].qs);
  }
}

// ggml quantize_iq4_xs(..., quant_weights = NULL).
void QuantIq4Xs(const float* x, void* dst, int64_t n) {
  BlockIq4Xs* y = static_cast<BlockIq4Xs*>(dst);
  uint8_t L[kQK_K];
  float scales[kQK_K / 32];
  for (int64_t ibl = 0; ibl < n / kQK_K; ++ibl) {
    const float* xs = x + ibl * kQK_K;
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      scales[ib] = Iq4BlockScale(xs + 32 * ib, L + 32 * ib);
      if (std::fabs(scales[ib]) > amax_scale) {
        amax_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    y[ibl].scales_h = 0;
    const float d = -max_scale / 32;
    y[ibl].d = Fp32ToFp16(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      int l = NearestInt(id * scales[ib]);
      l = std::max(-32, std::min(31, l));
      const float dl = d * l;
      const float idl = dl ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j) {
        L[32 * ib + j] = static_cast<uint8_t>(BestIndexInt8(16, kValuesIq4Nl, idl * xs[32 * ib + j]));
      }
      l += 32;
      const uint8_t l_l = l & 0xf, l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0) {
        y[ibl].scales_l[ib / 2] = l_l;
      } else {
        y[ibl].scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      }
      y[ibl].scales_h |= static_cast<uint16_t>(l_h << 2 * (ib % 8));
    }
    PackIq4(L, kQK_K, y[ibl].qs);
  }
}

}  // namespace

QuantRowFn ReferenceQuantizer(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return QuantF32;
    case GgmlType::kF16: return QuantF16;
    case GgmlType::kBF16: return QuantBf16;
    case GgmlType::kQ4_0: return QuantQ4_0;
    case GgmlType::kQ4_1: return QuantQ4_1;
    case GgmlType::kQ5_0: return QuantQ5_0;
    case GgmlType::kQ5_1: return QuantQ5_1;
    case GgmlType::kQ8_0: return QuantQ8_0;
    case GgmlType::kQ8_1: return QuantQ8_1;
    case GgmlType::kMXFP4: return QuantMxfp4;
    case GgmlType::kQ2_K: return QuantQ2_K;
    case GgmlType::kQ3_K: return QuantQ3_K;
    case GgmlType::kQ4_K: return QuantQ4_K;
    case GgmlType::kQ5_K: return QuantQ5_K;
    case GgmlType::kQ6_K: return QuantQ6_K;
    case GgmlType::kQ8_K: return QuantQ8_K;
    case GgmlType::kIQ4_NL: return QuantIq4Nl;
    case GgmlType::kIQ4_XS: return QuantIq4Xs;
    default: return nullptr;
  }
}

}  // namespace moesplit::quant::internal
