// Tiled GEMM driver, activation tile packing, and the scalar unpack and
// tile kernel (the reference the SIMD and AMX kernels must equal).

#include "common/quant/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/gemm_impl.h"
#include "common/quant/internal/kernels.h"

namespace moesplit::quant {
namespace internal {
namespace {

uint64_t Align64(uint64_t x) { return (x + 63) & ~uint64_t{63}; }

// One token's row of act_type into lane `l` of a tile.
void PackToken(GgmlType act_type, const uint8_t* row, int64_t k, int l, uint8_t* tile,
               const TileLayout& t) {
  int8_t* q = reinterpret_cast<int8_t*>(tile + t.q);
  float* da = reinterpret_cast<float*>(tile + t.da);
  float* sa = reinterpret_cast<float*>(tile + t.sa);
  int32_t* qs16 = reinterpret_cast<int32_t*>(tile + t.qs16);
  auto put_codes = [&](const int8_t* codes, int64_t col0, int n) {
    for (int c = 0; c < n; c += 4) std::memcpy(q + (col0 + c) / 4 * 64 + 4 * l, codes + c, 4);
  };
  if (act_type == GgmlType::kQ8_K) {
    const BlockQ8_K* b = reinterpret_cast<const BlockQ8_K*>(row);
    for (int64_t i = 0; i < k / 256; ++i) {
      put_codes(b[i].qs, 256 * i, 256);
      for (int j = 0; j < 8; ++j) da[(8 * i + j) * 16 + l] = b[i].d;
      for (int g = 0; g < 16; ++g) qs16[(16 * i + g) * 16 + l] = b[i].bsums[g];
    }
    return;
  }
  const bool q8_1 = act_type == GgmlType::kQ8_1;
  for (int64_t i = 0; i < k / 32; ++i) {
    const int8_t* codes;
    if (q8_1) {
      const BlockQ8_1& b = reinterpret_cast<const BlockQ8_1*>(row)[i];
      codes = b.qs;
      da[i * 16 + l] = Fp16ToFp32(b.d);
      sa[i * 16 + l] = Fp16ToFp32(b.s);
    } else {
      const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[i];
      codes = b.qs;
      da[i * 16 + l] = Fp16ToFp32(b.d);
    }
    put_codes(codes, 32 * i, 32);
    for (int h = 0; h < 2; ++h) {
      int s = 0;
      for (int c = 0; c < 16; ++c) s += codes[16 * h + c];
      qs16[(2 * i + h) * 16 + l] = s;
    }
  }
}

// qs32 and the int16 pair sections from qs16.
void FinishTile(uint8_t* tile, const TileLayout& t) {
  const int32_t* qs16 = reinterpret_cast<const int32_t*>(tile + t.qs16);
  int32_t* qs32 = reinterpret_cast<int32_t*>(tile + t.qs32);
  int16_t* qp16 = reinterpret_cast<int16_t*>(tile + t.qp16);
  int16_t* qp32 = reinterpret_cast<int16_t*>(tile + t.qp32);
  for (int64_t b = 0; b < t.k / 32; ++b) {
    for (int l = 0; l < 16; ++l) {
      const int32_t a = qs16[(2 * b) * 16 + l], c = qs16[(2 * b + 1) * 16 + l];
      qs32[b * 16 + l] = a + c;
      qp16[(b * 16 + l) * 2] = static_cast<int16_t>(a);
      qp16[(b * 16 + l) * 2 + 1] = static_cast<int16_t>(c);
      qp32[((b / 2) * 16 + l) * 2 + b % 2] = static_cast<int16_t>(a + c);
    }
  }
}

inline int CodeValue(const UnpackLayout& L, bool plus128, uint8_t c) {
  if (L.is_signed && !plus128) return static_cast<int8_t>(c);
  return static_cast<int>(c) - PanelZero(L, plus128);
}

float Fma(float a, float b, float c) { return std::fma(a, b, c); }

}  // namespace

void PrefetchBytes(const uint8_t* p, uint64_t n) {
  for (uint64_t off = 0; off < n; off += 64) __builtin_prefetch(p + off, 0, 3);
}

TileLayout::TileLayout(int64_t k_) : k(k_) {
  q = 0;
  da = q + 16 * k;
  sa = da + Align64(2 * k);
  qs16 = sa + Align64(2 * k);
  qs32 = qs16 + Align64(4 * k);
  qp16 = qs32 + Align64(2 * k);
  qp32 = qp16 + Align64(2 * k);
  bytes = qp32 + Align64((k + 63) / 64 * 64);
}

PanelLayout::PanelLayout(const UnpackLayout& L, int64_t k_)
    : k(k_), nb(k_ / L.block), ng(L.super ? k_ / L.group : 0) {
  codes = 0;
  scale = Align64(16 * k);
  min = scale + Align64(16 * 4 * nb);
  sub = min + Align64(16 * 4 * nb);
  mins = sub + Align64(16 * 4 * ng);
  bytes = mins + Align64(16 * 2 * ng);
}

Panel MakePanel(const PanelLayout& p, uint8_t* base) {
  return {base + p.codes,
          reinterpret_cast<float*>(base + p.scale),
          reinterpret_cast<float*>(base + p.min),
          reinterpret_cast<int32_t*>(base + p.sub),
          reinterpret_cast<int16_t*>(base + p.mins),
          p.k,
          p.nb,
          p.ng};
}

void UnpackRowsScalar(GgmlType type, const UnpackLayout& L, const uint8_t* rows,
                      uint64_t row_bytes, int n_rows, bool plus128, const Panel& p) {
  const uint64_t bbytes = TypeInfo(type).type_size;
  const int gpb = L.super ? L.block / L.group : 0;
  for (int r = 0; r < 16; ++r) {
    uint8_t* codes = p.codes + r * p.k;
    if (r >= n_rows) {
      std::memset(codes, L.is_signed && plus128 ? 0x80 : L.zero, p.k);
      std::fill_n(p.scale + r * p.nb, p.nb, 0.0f);
      std::fill_n(p.min + r * p.nb, p.nb, 0.0f);
      std::fill_n(p.sub + r * p.ng, p.ng, 0);
      std::fill_n(p.mins + r * p.ng, p.ng, int16_t{0});
      continue;
    }
    for (int64_t b = 0; b < p.nb; ++b) {
      int16_t mins_unused[16];
      UnpackBlock(type, rows + r * row_bytes + b * bbytes,
                  {codes + b * L.block, L.super ? p.sub + r * p.ng + b * gpb : nullptr,
                   L.super && L.has_min ? p.mins + r * p.ng + b * gpb : mins_unused,
                   p.scale + r * p.nb + b, p.min + r * p.nb + b});
      if (!L.has_min) p.min[r * p.nb + b] = 0.0f;
      if (L.super && !L.has_min) std::fill_n(p.mins + r * p.ng + b * gpb, gpb, int16_t{0});
    }
    if (L.is_signed && plus128) {
      for (int64_t c = 0; c < p.k; ++c) codes[c] ^= 0x80;
    }
  }
}

void TileKernelScalar(const UnpackLayout& L, const Panel& p, int n_rows, int lanes, const uint8_t* tile,
                      const TileLayout& t, float out[16][16]) {
  const int8_t* q = reinterpret_cast<const int8_t*>(tile + t.q);
  const float* da = reinterpret_cast<const float*>(tile + t.da);
  const float* sa = reinterpret_cast<const float*>(tile + t.sa);
  const int32_t* qs16 = reinterpret_cast<const int32_t*>(tile + t.qs16);
  const bool plus128 = false;  // the scalar panel keeps signed codes as values
  auto code_dot = [&](const uint8_t* codes, int l, int64_t c0, int n) {
    int s = 0;
    for (int64_t c = c0; c < c0 + n; ++c) s += CodeValue(L, plus128, codes[c]) * q[c / 4 * 64 + 4 * l + c % 4];
    return s;
  };
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* codes = p.codes + r * p.k;
    for (int l = 0; l < lanes; ++l) {
      float acc = 0, pair[2] = {0, 0};  // 256-blocks; 32-blocks: even, odd
      for (int64_t b = 0; b < p.nb; ++b) {
        const float a_d = da[(b * L.block / 32) * 16 + l];
        if (!L.super) {
          float& a = pair[b & 1];
          a = Fma(static_cast<float>(code_dot(codes, l, 32 * b, 32)), p.scale[r * p.nb + b] * a_d, a);
          if (L.has_min) a = Fma(p.min[r * p.nb + b], sa[b * 16 + l], a);
          continue;
        }
        const int gpb = L.block / L.group;
        int32_t isum = 0, imin = 0;
        for (int g = 0; g < gpb; ++g) {
          const int64_t gi = b * gpb + g;
          isum += p.sub[r * p.ng + gi] * code_dot(codes, l, gi * L.group, L.group);
          const int32_t qsum = L.group == 16 ? qs16[gi * 16 + l] : qs16[2 * gi * 16 + l] + qs16[(2 * gi + 1) * 16 + l];
          imin += p.mins[r * p.ng + gi] * qsum;
        }
        acc = Fma(static_cast<float>(isum), p.scale[r * p.nb + b] * a_d, acc);
        if (L.has_min) acc = Fma(static_cast<float>(imin), -(p.min[r * p.nb + b] * a_d), acc);
      }
      out[r][l] = L.super ? acc : pair[0] + pair[1];
    }
  }
}

GemmKernels GetGemmKernels(GemmImpl impl) {
  if (impl == GemmImpl::kScalar) return {UnpackRowsScalar, TileKernelScalar, false};
  return X86GemmKernels(impl);
}

bool TileGemmWith(GemmImpl impl, const WeightView& w, int64_t row0, int64_t n_rows,
                  const uint8_t* tiles, int64_t n_tokens, float* y, int64_t ldy,
                  uint8_t* scratch) {
  const GemmKernels g = GetGemmKernels(impl);
  UnpackLayout L;
  if (g.unpack == nullptr || !GetUnpackLayout(w.type, &L)) return false;
  const int64_t k = w.n_cols;
  const TileLayout tl(k);
  const Panel p = MakePanel(PanelLayout(L, k), scratch);
  const int64_t n_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
  alignas(64) float out[16][16];
  for (int64_t rb = 0; rb < n_rows; rb += kPanelRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - rb));
    g.unpack(w.type, L, w.data + (row0 + rb) * w.row_bytes, w.row_bytes, nr, g.plus128, p);
    // The next panel's rows stream in while this one runs against the tiles.
    if (rb + kPanelRows < n_rows) {
      const int next = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - rb - kPanelRows));
      PrefetchBytes(w.data + (row0 + rb + kPanelRows) * w.row_bytes, next * w.row_bytes);
    }
    for (int64_t j = 0; j < n_tiles; ++j) {
      const int lanes = static_cast<int>(std::min<int64_t>(kTileTokens, n_tokens - j * kTileTokens));
      g.kernel(L, p, nr, lanes, tiles + j * tl.bytes, tl, out);
      for (int l = 0; l < lanes; ++l) {
        float* yt = y + (j * kTileTokens + l) * ldy + rb;
        for (int r = 0; r < nr; ++r) yt[r] = out[r][l];
      }
    }
  }
  return true;
}

namespace {

// The implementation TileGemm uses at the active level (kScalar: none).
GemmImpl ActiveImpl() {
  const KernelLevel level = ActiveKernelLevel();
  if (level >= KernelLevel::kAmx && GetGemmKernels(GemmImpl::kAmx).unpack != nullptr) return GemmImpl::kAmx;
  if (level >= KernelLevel::kAvx512 && GetGemmKernels(GemmImpl::kAvx512).unpack != nullptr) {
    return GemmImpl::kAvx512;
  }
  if (level >= KernelLevel::kAvx2 && GetGemmKernels(GemmImpl::kAvx2).unpack != nullptr) return GemmImpl::kAvx2;
  return GemmImpl::kScalar;
}

}  // namespace
}  // namespace internal

bool TileGemmAvailable(GgmlType type) {
  const TypeTraits* t = GetTypeTraits(type);
  internal::UnpackLayout L;
  if (t == nullptr || t->vec_dot == nullptr || !internal::GetUnpackLayout(type, &L)) return false;
  if (internal::ActiveImpl() == internal::GemmImpl::kScalar) return false;
  for (KernelLevel level : {KernelLevel::kAvx2, KernelLevel::kAvx512}) {
    const VecDotFn fn = internal::LibrarySimdVecDot(type, level);
    if (fn != nullptr && fn == t->vec_dot) return true;
  }
  return false;
}

uint64_t ActTileBytes(int64_t k, int64_t n_tokens) {
  return internal::TileLayout(k).bytes * static_cast<uint64_t>((n_tokens + kTileTokens - 1) / kTileTokens);
}

void PackActTiles(GgmlType act_type, const uint8_t* const* rows, int64_t n_tokens, int64_t k,
                  uint8_t* dst) {
  const internal::TileLayout t(k);
  const int64_t n_tiles = (n_tokens + kTileTokens - 1) / kTileTokens;
  for (int64_t j = 0; j < n_tiles; ++j) {
    uint8_t* tile = dst + j * t.bytes;
    const int lanes = static_cast<int>(std::min<int64_t>(kTileTokens, n_tokens - j * kTileTokens));
    std::memset(tile, 0, t.bytes);
    for (int l = 0; l < lanes; ++l) internal::PackToken(act_type, rows[j * kTileTokens + l], k, l, tile, t);
    internal::FinishTile(tile, t);
  }
}

uint64_t TileGemmScratchBytes(GgmlType type, int64_t k) {
  internal::UnpackLayout L;
  if (!internal::GetUnpackLayout(type, &L)) return 0;
  return internal::PanelLayout(L, k).bytes;
}

void TileGemm(const WeightView& w, int64_t row0, int64_t n_rows, const uint8_t* tiles,
              int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch) {
  internal::TileGemmWith(internal::ActiveImpl(), w, row0, n_rows, tiles, n_tokens, y, ldy, scratch);
}

}  // namespace moesplit::quant
