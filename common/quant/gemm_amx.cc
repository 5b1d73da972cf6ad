// AMX-INT8 tile kernel of the tiled GEMM (internal/gemm_impl.h).
//
// Per 16-row weight panel and 16-token activation tile, for each scale
// group of G = 32 (or 16) columns:
//   tmm1 (A) = the 16 rows' G unsigned codes (rows p.k bytes apart),
//   tmm2 (B) = the tile's G/4 rows of 16 tokens x 4 signed codes (64 bytes
//              each: the tile layout is already AMX's B layout),
//   tmm0 (C) = 0, then tdpbusd: C[row][token] = exact int32 dot,
// stored to memory and finished with AVX-512 exactly as the AVX-512 kernel
// (zero-point correction, sub-scales, the canonical float steps), so the
// results are bit-identical to every other path.
//
// The tile operations go through an Ops policy: AmxOps executes the real
// instructions (only when CpuHasAmxInt8(): the CPU has AMX-TILE/INT8 and
// Linux granted XTILEDATA through arch_prctl); EmulatedOps computes the same
// tile product in C++, so tests check this kernel's data flow on any
// AVX-512 CPU. The tile configuration is loaded at the start of each kernel
// call and released at its end.

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

#include "common/quant/internal/gemm_impl.h"
#include "common/quant/internal/kernels.h"

namespace moesplit::quant::internal {

#if defined(__x86_64__)
namespace {

// ldtilecfg layout (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

TileConfig MakeConfig(int group) {
  TileConfig c;
  std::memset(&c, 0, sizeof(c));
  c.palette_id = 1;
  c.rows[0] = 16;  // C: 16 rows x 16 int32
  c.colsb[0] = 64;
  c.rows[1] = 16;  // A: 16 weight rows x group codes
  c.colsb[1] = static_cast<uint16_t>(group);
  c.rows[2] = static_cast<uint8_t>(group / 4);  // B: group/4 rows x (16 tokens x 4)
  c.colsb[2] = 64;
  return c;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")
// GCC bug 105593 (see gemm_x86.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

struct AmxOps {
  static void Begin(int group) {
    const TileConfig cfg = MakeConfig(group);
    // Not _tile_loadconfig(&cfg): GCC 12 does not see that the builtin reads
    // the whole 64-byte block and drops the rows/colsb stores, leaving every
    // tile unconfigured (TILEZERO then raises #UD). The "m" operand makes the
    // read explicit.
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
  }
  static void End() { _tile_release(); }
  // c[16][16] = A (16 x group u8, stride a_stride) . B (group/4 x 64 s8).
  static void Dot(int /*group*/, const uint8_t* a, int64_t a_stride, const int8_t* b, int32_t* c) {
    _tile_zero(0);
    _tile_loadd(1, a, a_stride);
    _tile_loadd(2, b, 64);
    _tile_dpbusd(0, 1, 2);
    _tile_stored(0, c, 64);
  }
};

// TDPBUSD's definition, in C++.
struct EmulatedOps {
  static void Begin(int) {}
  static void End() {}
  static void Dot(int group, const uint8_t* a, int64_t a_stride, const int8_t* b, int32_t* c) {
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 16; ++n) {
        int32_t s = 0;
        for (int k4 = 0; k4 < group / 4; ++k4) {
          for (int i = 0; i < 4; ++i) s += a[m * a_stride + 4 * k4 + i] * b[k4 * 64 + 4 * n + i];
        }
        c[m * 16 + n] = s;
      }
    }
  }
};

inline __m512i ZeroInitAmx(const int32_t* qs, int zshift) {
  if (zshift < 0) return _mm512_setzero_si512();
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512(qs), zshift));
}

inline int32_t Dword(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <typename Ops>
void TileKernelAmxT(const UnpackLayout& L, const Panel& p, int n_rows, const uint8_t* tile,
                    const TileLayout& tl, float out[16][16]) {
  const int8_t* q = reinterpret_cast<const int8_t*>(tile + tl.q);
  const float* da = reinterpret_cast<const float*>(tile + tl.da);
  const float* sa = reinterpret_cast<const float*>(tile + tl.sa);
  const int32_t* qs16 = reinterpret_cast<const int32_t*>(tile + tl.qs16);
  const int32_t* qs32 = reinterpret_cast<const int32_t*>(tile + tl.qs32);
  const int32_t* qp16 = reinterpret_cast<const int32_t*>(tile + tl.qp16);
  const int32_t* qp32 = reinterpret_cast<const int32_t*>(tile + tl.qp32);
  const int zero = PanelZero(L, true);
  const int zshift = zero == 0 ? -1 : __builtin_ctz(static_cast<unsigned>(zero));
  const int group = L.super ? L.group : 32;
  const int gpb = L.super ? 256 / group : 1;
  const int32_t* qsg = group == 16 ? qs16 : qs32;
  alignas(64) int32_t c[16 * 16];
  // 256-blocks: facc[0]; 32-blocks: facc[b & 1] (even and odd blocks).
  __m512 facc[2][16];
  for (int r = 0; r < 16; ++r) facc[0][r] = facc[1][r] = _mm512_setzero_ps();
  Ops::Begin(group);
  for (int64_t b = 0; b < p.nb; ++b) {
    __m512i isum[16];
    for (int r = 0; r < 16; ++r) isum[r] = _mm512_setzero_si512();
    for (int g = 0; g < gpb; ++g) {
      const int64_t gi = b * gpb + g;
      Ops::Dot(group, p.codes + gi * group, p.k, q + gi * (group / 4) * 64, c);
      const __m512i init = ZeroInitAmx(qsg + 16 * gi, zshift);
      for (int r = 0; r < n_rows; ++r) {
        const __m512i iacc = _mm512_add_epi32(_mm512_load_si512(c + 16 * r), init);
        if (L.super) {
          isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(iacc, _mm512_set1_epi32(p.sub[r * p.ng + gi])));
        } else {
          isum[r] = iacc;
        }
      }
    }
    const __m512 dav = _mm512_loadu_ps(da + 16 * (b * L.block / 32));
    __m512* fa = facc[L.super ? 0 : (b & 1)];
    for (int r = 0; r < n_rows; ++r) {
      const __m512 s = _mm512_mul_ps(_mm512_set1_ps(p.scale[r * p.nb + b]), dav);
      fa[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), s, fa[r]);
      if (!L.has_min) continue;
      if (!L.super) {
        fa[r] = _mm512_fmadd_ps(_mm512_set1_ps(p.min[r * p.nb + b]), _mm512_loadu_ps(sa + 16 * b), fa[r]);
        continue;
      }
      const int32_t* qpg = group == 16 ? qp16 : qp32;
      __m512i imin = _mm512_setzero_si512();
      for (int pp = 0; pp < gpb / 2; ++pp) {
        const int32_t mn = Dword(p.mins + r * p.ng + b * gpb + 2 * pp);
        imin = _mm512_dpwssd_epi32(imin, _mm512_set1_epi32(mn), _mm512_loadu_si512(qpg + 16 * (b * gpb / 2 + pp)));
      }
      const __m512 sm = _mm512_mul_ps(_mm512_set1_ps(p.min[r * p.nb + b]), dav);
      fa[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), sm, fa[r]);
    }
  }
  Ops::End();
  for (int r = 0; r < n_rows; ++r) {
    _mm512_storeu_ps(out[r], L.super ? facc[0][r] : _mm512_add_ps(facc[0][r], facc[1][r]));
  }
}

void TileKernelAmx(const UnpackLayout& L, const Panel& p, int n_rows, int /*lanes*/, const uint8_t* tile,
                   const TileLayout& t, float out[16][16]) {
  TileKernelAmxT<AmxOps>(L, p, n_rows, tile, t, out);
}

void TileKernelAmxEmulated(const UnpackLayout& L, const Panel& p, int n_rows, int /*lanes*/,
                           const uint8_t* tile, const TileLayout& t, float out[16][16]) {
  TileKernelAmxT<EmulatedOps>(L, p, n_rows, tile, t, out);
}

#pragma GCC pop_options

}  // namespace

GemmKernels AmxGemmKernels(GemmImpl impl) {
  if (impl == GemmImpl::kAmx && CpuHasAmxInt8()) return {UnpackRowsX86, TileKernelAmx, true};
  if (impl == GemmImpl::kAmxEmulated && CpuHasAvx512Vnni()) {
    return {UnpackRowsX86, TileKernelAmxEmulated, true};
  }
  return {};
}

#else

GemmKernels AmxGemmKernels(GemmImpl) { return {}; }

#endif

}  // namespace moesplit::quant::internal
