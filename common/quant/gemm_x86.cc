// x86 tiled-GEMM kernels (internal/gemm_impl.h): SIMD weight unpacking
// (AVX2 instructions, shared by both levels), the AVX2 tile kernel
// (maddubs/madd, 8 token lanes per register) and the AVX-512 tile kernel
// (VNNI vpdpbusd, 16 token lanes per register, 8 weight rows per pass).
// Both follow the canonical order of internal/unpack.h exactly, so their
// results equal TileKernelScalar's and the SIMD vec_dot kernels' bit for
// bit. Compiled with `#pragma GCC target` in anonymous namespaces.

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/gemm_impl.h"
#include "common/quant/internal/iq_grids.h"
#include "common/quant/internal/kernels.h"

namespace moesplit::quant::internal {

#if defined(__x86_64__)


namespace {

inline int ZeroShift(int zero) { return zero == 0 ? -1 : __builtin_ctz(static_cast<unsigned>(zero)); }

constexpr bool Is256(GgmlType t) {
  return t == GgmlType::kQ2_K || t == GgmlType::kQ3_K || t == GgmlType::kQ4_K ||
         t == GgmlType::kQ5_K || t == GgmlType::kQ6_K || t == GgmlType::kIQ4_XS;
}

// Rows n_rows..15 of the panel: zero codes and scales (their outputs are
// computed by the 8-row passes but never stored).
void ZeroPanelRows(const UnpackLayout& L, int n_rows, bool plus128, const Panel& p) {
  for (int r = n_rows; r < 16; ++r) {
    std::memset(p.codes + r * p.k, L.is_signed && plus128 ? 0x80 : L.zero, p.k);
    std::memset(p.scale + r * p.nb, 0, 4 * p.nb);
    std::memset(p.min + r * p.nb, 0, 4 * p.nb);
    std::memset(p.sub + r * p.ng, 0, 4 * p.ng);
    std::memset(p.mins + r * p.ng, 0, 2 * p.ng);
  }
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

inline __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void Store256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

inline __m256i BitsToBytes(uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101,
                                         0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

inline __m256i Fifth32(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return _mm256_and_si256(BitsToBytes(bits), _mm256_set1_epi8(0x10));
}

inline __m256i Table(const int8_t* values, bool plus128) {
  __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(values));
  if (plus128) t = _mm_xor_si128(t, _mm_set1_epi8(static_cast<char>(0x80)));
  return _mm256_broadcastsi128_si256(t);
}

// Codes (and scales) of one 32-element block.
template <GgmlType kType>
inline void Unpack32(const uint8_t* blk, bool plus128, __m256i table, uint8_t* codes, float* scale,
                     float* min) {
  __m256i c;
  if constexpr (kType == GgmlType::kQ4_0) {
    const auto& b = *reinterpret_cast<const BlockQ4_0*>(blk);
    c = Nibbles32(b.qs);
    *scale = _cvtsh_ss(b.d);
  } else if constexpr (kType == GgmlType::kQ4_1) {
    const auto& b = *reinterpret_cast<const BlockQ4_1*>(blk);
    c = Nibbles32(b.qs);
    *scale = _cvtsh_ss(b.d);
    *min = _cvtsh_ss(b.m);
  } else if constexpr (kType == GgmlType::kQ5_0) {
    const auto& b = *reinterpret_cast<const BlockQ5_0*>(blk);
    c = _mm256_or_si256(Nibbles32(b.qs), Fifth32(b.qh));
    *scale = _cvtsh_ss(b.d);
  } else if constexpr (kType == GgmlType::kQ5_1) {
    const auto& b = *reinterpret_cast<const BlockQ5_1*>(blk);
    c = _mm256_or_si256(Nibbles32(b.qs), Fifth32(b.qh));
    *scale = _cvtsh_ss(b.d);
    *min = _cvtsh_ss(b.m);
  } else if constexpr (kType == GgmlType::kQ8_0) {
    const auto& b = *reinterpret_cast<const BlockQ8_0*>(blk);
    c = Load256(b.qs);
    if (plus128) c = _mm256_xor_si256(c, _mm256_set1_epi8(static_cast<char>(0x80)));
    *scale = _cvtsh_ss(b.d);
  } else if constexpr (kType == GgmlType::kIQ4_NL) {
    const auto& b = *reinterpret_cast<const BlockIq4Nl*>(blk);
    c = _mm256_shuffle_epi8(table, Nibbles32(b.qs));
    *scale = _cvtsh_ss(b.d);
  } else {
    static_assert(kType == GgmlType::kMXFP4);
    const auto& b = *reinterpret_cast<const BlockMxfp4*>(blk);
    c = _mm256_shuffle_epi8(table, Nibbles32(b.qs));
    *scale = E8m0ToFp32Half(b.e);
  }
  Store256(codes, c);
}

// 16 signed byte sub-scales to int32.
inline void StoreSub16(int32_t* sub, __m128i bytes) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sub), _mm256_cvtepi8_epi32(bytes));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sub + 8), _mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
}

// Q4_K / Q5_K 6-bit scales and mins as bytes (ggml's utmp trick).
inline void UnpackK4ScaleBytes(const uint8_t* packed, uint8_t out[16]) {
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
  const uint32_t uaux = u[1] & kmask1;
  u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
  u[2] = uaux;
  u[0] &= kmask1;
  std::memcpy(out, u, 16);
}

// Codes and sub-scales of one 256-element block, per format.
struct Out256 {
  uint8_t* codes;
  int32_t* sub;
  int16_t* mins;
  float* d;
  float* dmin;
};

inline void Unpack256Q2K(const BlockQ2_K& b, const Out256& o) {
  const __m256i m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i q = Load256(b.qs + 32 * h);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) Store256(o.codes + 128 * h + 32 * s, _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3));
  }
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
  StoreSub16(o.sub, _mm_and_si128(sc, _mm_set1_epi8(0xF)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.mins),
                      _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0xF))));
  *o.d = _cvtsh_ss(b.d);
  *o.dmin = _cvtsh_ss(b.dmin);
}

inline void Unpack256Q3K(const BlockQ3_K& b, const Out256& o) {
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  const __m256i hm = Load256(b.hmask);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i q = Load256(b.qs + 32 * h);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
      const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + s), one), 2);
      Store256(o.codes + 128 * h + 32 * s, _mm256_or_si256(lo, hb));
    }
  }
  int8_t raw[16];
  UnpackQ3KScales(b.scales, raw);
  StoreSub16(o.sub, _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(raw)), _mm_set1_epi8(32)));
  *o.d = _cvtsh_ss(b.d);
}

template <typename Block>
inline void Unpack256Q45K(const Block& b, const Out256& o) {
  constexpr bool kFive = std::is_same_v<Block, BlockQ5_K>;
  const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
  __m256i qh = _mm256_setzero_si256();
  if constexpr (kFive) qh = Load256(b.qh);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i q = Load256(b.qs + 32 * j);
    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if constexpr (kFive) {
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
    }
    Store256(o.codes + 64 * j, lo);
    Store256(o.codes + 64 * j + 32, hi);
  }
  uint8_t sm[16];  // scales 0..7, mins 0..7
  UnpackK4ScaleBytes(b.scales, sm);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.sub),
                      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm))));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o.mins),
                   _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8))));
  *o.d = _cvtsh_ss(b.d);
  *o.dmin = _cvtsh_ss(b.dmin);
}

inline void Unpack256Q6K(const BlockQ6_K& b, const Out256& o) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = Load256(b.ql + 64 * h), ql1 = Load256(b.ql + 64 * h + 32);
    const __m256i qh = Load256(b.qh + 32 * h);
    uint8_t* c = o.codes + 128 * h;
    auto hb = [&](int shift) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), m3), 4); };
    Store256(c, _mm256_or_si256(_mm256_and_si256(ql0, m4), hb(0)));
    Store256(c + 32, _mm256_or_si256(_mm256_and_si256(ql1, m4), hb(2)));
    Store256(c + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), hb(4)));
    Store256(c + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), hb(6)));
  }
  StoreSub16(o.sub, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  *o.d = _cvtsh_ss(b.d);
}

inline void Unpack256Iq4Xs(const BlockIq4Xs& b, __m256i table, const Out256& o) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  for (int g = 0; g < 8; g += 2) {
    const __m256i q = Load256(b.qs + 16 * g);
    const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    Store256(o.codes + 32 * g, _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20)));
    Store256(o.codes + 32 * g + 32, _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31)));
  }
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    o.sub[g] = (((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b.scales_h >> (2 * g)) & 3) << 4)) - 32;
  }
  *o.d = _cvtsh_ss(b.d);
}

template <GgmlType kType>
inline void Unpack256(const uint8_t* blk, __m256i table, const Out256& o) {
  if constexpr (kType == GgmlType::kQ2_K) Unpack256Q2K(*reinterpret_cast<const BlockQ2_K*>(blk), o);
  if constexpr (kType == GgmlType::kQ3_K) Unpack256Q3K(*reinterpret_cast<const BlockQ3_K*>(blk), o);
  if constexpr (kType == GgmlType::kQ4_K) Unpack256Q45K(*reinterpret_cast<const BlockQ4_K*>(blk), o);
  if constexpr (kType == GgmlType::kQ5_K) Unpack256Q45K(*reinterpret_cast<const BlockQ5_K*>(blk), o);
  if constexpr (kType == GgmlType::kQ6_K) Unpack256Q6K(*reinterpret_cast<const BlockQ6_K*>(blk), o);
  if constexpr (kType == GgmlType::kIQ4_XS) Unpack256Iq4Xs(*reinterpret_cast<const BlockIq4Xs*>(blk), table, o);
}

template <GgmlType kType>
void UnpackRowsSimdT(const UnpackLayout& L, const uint8_t* rows, uint64_t row_bytes, int n_rows,
                     bool plus128, const Panel& p) {
  const uint64_t bbytes = TypeInfo(kType).type_size;
  const __m256i table = Table(kType == GgmlType::kMXFP4 ? kValuesMxfp4 : kValuesIq4Nl, plus128);
  const int gpb = L.super ? L.block / L.group : 0;
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* row = rows + r * row_bytes;
    uint8_t* codes = p.codes + r * p.k;
    for (int64_t b = 0; b < p.nb; ++b) {
      if constexpr (Is256(kType)) {
        Unpack256<kType>(row + b * bbytes, table,
                         {codes + 256 * b, p.sub + r * p.ng + b * gpb, p.mins + r * p.ng + b * gpb,
                          p.scale + r * p.nb + b, p.min + r * p.nb + b});
      } else {
        Unpack32<kType>(row + b * bbytes, plus128, table, codes + 32 * b, p.scale + r * p.nb + b,
                        p.min + r * p.nb + b);
      }
    }
  }
}

void UnpackRowsSimd(GgmlType type, const UnpackLayout& L, const uint8_t* rows, uint64_t row_bytes,
                    int n_rows, bool plus128, const Panel& p) {
  switch (type) {
#define MOESPLIT_CASE(T) \
  case GgmlType::T: UnpackRowsSimdT<GgmlType::T>(L, rows, row_bytes, n_rows, plus128, p); break;
    MOESPLIT_CASE(kQ4_0)
    MOESPLIT_CASE(kQ4_1)
    MOESPLIT_CASE(kQ5_0)
    MOESPLIT_CASE(kQ5_1)
    MOESPLIT_CASE(kQ8_0)
    MOESPLIT_CASE(kIQ4_NL)
    MOESPLIT_CASE(kMXFP4)
    MOESPLIT_CASE(kQ2_K)
    MOESPLIT_CASE(kQ3_K)
    MOESPLIT_CASE(kQ4_K)
    MOESPLIT_CASE(kQ5_K)
    MOESPLIT_CASE(kQ6_K)
    MOESPLIT_CASE(kIQ4_XS)
#undef MOESPLIT_CASE
    // The i-quants and ternary types: the scalar integer form (UnpackBlock).
    default: return UnpackRowsScalar(type, L, rows, row_bytes, n_rows, plus128, p);
  }
  if (n_rows < 16) ZeroPanelRows(L, n_rows, plus128, p);
}

// ---- AVX2 tile kernel: 4 rows x 8 token lanes per pass ------------------------

struct TileView {
  const int8_t* q;
  const float* da;
  const float* sa;
  const int32_t* qs16;
  const int32_t* qs32;
  const int32_t* qp16;
  const int32_t* qp32;
};

inline TileView ViewTile(const uint8_t* tile, const TileLayout& t) {
  return {reinterpret_cast<const int8_t*>(tile + t.q),    reinterpret_cast<const float*>(tile + t.da),
          reinterpret_cast<const float*>(tile + t.sa),    reinterpret_cast<const int32_t*>(tile + t.qs16),
          reinterpret_cast<const int32_t*>(tile + t.qs32), reinterpret_cast<const int32_t*>(tile + t.qp16),
          reinterpret_cast<const int32_t*>(tile + t.qp32)};
}

inline int32_t Dword(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// iacc + sum over 4 columns of w (4 bytes broadcast) times the lanes' codes.
template <bool kSigned>
inline __m256i DotW4(__m256i iacc, int32_t w4, __m256i a) {
  const __m256i w = _mm256_set1_epi32(w4);
  __m256i p16;
  if constexpr (kSigned) {
    p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  } else {
    p16 = _mm256_maddubs_epi16(w, a);
  }
  return _mm256_add_epi32(iacc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

#include "common/quant/internal/gemm_half.inc"

template <bool kSigned, bool kMin>
void Block32KernelAvx2(const UnpackLayout& L, const Panel& p, int n_rows, int lanes, const uint8_t* tile,
                       const TileLayout& tl, float out[16][16]) {
  const TileView t = ViewTile(tile, tl);
  const int zshift = ZeroShift(PanelZero(L, false));
  for (int r0 = 0; r0 < n_rows; r0 += 4) {
    for (int half = 0; 8 * half < lanes; ++half) Block32Half<4, kSigned, kMin>(p, r0, half, t, zshift, out);
  }
}

template <int G, bool kSigned, bool kMin>
void SuperKernelAvx2(const UnpackLayout& L, const Panel& p, int n_rows, int lanes, const uint8_t* tile,
                     const TileLayout& tl, float out[16][16]) {
  const TileView t = ViewTile(tile, tl);
  const int zshift = ZeroShift(PanelZero(L, false));
  for (int r0 = 0; r0 < n_rows; r0 += 4) {
    for (int half = 0; 8 * half < lanes; ++half) SuperHalf<4, G, kSigned, kMin>(p, r0, half, t, zshift, out);
  }
}

void TileKernelAvx2(const UnpackLayout& L, const Panel& p, int n_rows, int lanes, const uint8_t* tile,
                    const TileLayout& t, float out[16][16]) {
  if (!L.super) {
    if (L.is_signed) return Block32KernelAvx2<true, false>(L, p, n_rows, lanes, tile, t, out);
    if (L.has_min) return Block32KernelAvx2<false, true>(L, p, n_rows, lanes, tile, t, out);
    return Block32KernelAvx2<false, false>(L, p, n_rows, lanes, tile, t, out);
  }
  if (L.group == 16) {
    if (L.is_signed) return SuperKernelAvx2<16, true, false>(L, p, n_rows, lanes, tile, t, out);
    if (L.has_min) return SuperKernelAvx2<16, false, true>(L, p, n_rows, lanes, tile, t, out);
    return SuperKernelAvx2<16, false, false>(L, p, n_rows, lanes, tile, t, out);
  }
  if (L.is_signed) return SuperKernelAvx2<32, true, false>(L, p, n_rows, lanes, tile, t, out);
  if (L.has_min) return SuperKernelAvx2<32, false, true>(L, p, n_rows, lanes, tile, t, out);
  return SuperKernelAvx2<32, false, false>(L, p, n_rows, lanes, tile, t, out);
}

#pragma GCC pop_options

// ---- AVX-512 tile kernel: 8 rows x 16 token lanes per pass (VNNI) --------------

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
// GCC 12 warns about the undefined pass-through operand of unmasked AVX-512
// intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// 8-lane kernels with 256-bit vpdpbusd, for tiles of at most 8 tokens.
namespace vnni256 {
template <bool kSigned>
inline __m256i DotW4(__m256i iacc, int32_t w4, __m256i a) {
  return _mm256_dpbusd_epi32(iacc, _mm256_set1_epi32(w4), a);  // the +128 panel: unsigned codes
}
#include "common/quant/internal/gemm_half.inc"
}  // namespace vnni256

inline __m512i ZeroInit512(const int32_t* qs, int zshift) {
  if (zshift < 0) return _mm512_setzero_si512();
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512(qs), zshift));
}

template <bool kMin>
__attribute__((always_inline)) inline void Block32Avx512Step(const Panel& p, int r0, const TileView& t, int zshift,
                                                             int64_t b, __m512 (&facc)[8]) {
  constexpr int R = 8;
  const uint8_t* codes = p.codes + r0 * p.k;
  const __m512i init = ZeroInit512(t.qs32 + 16 * b, zshift);
  __m512i iacc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) iacc[r] = init;
#pragma GCC unroll 16
  for (int k4 = 0; k4 < 8; ++k4) {
    const __m512i a = _mm512_loadu_si512(t.q + (8 * b + k4) * 64);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      iacc[r] = _mm512_dpbusd_epi32(iacc[r], _mm512_set1_epi32(Dword(codes + r * p.k + 32 * b + 4 * k4)), a);
    }
  }
  const __m512 dav = _mm512_loadu_ps(t.da + 16 * b);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_mul_ps(_mm512_set1_ps(p.scale[(r0 + r) * p.nb + b]), dav);
    facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r]), s, facc[r]);
  }
  if constexpr (kMin) {
    const __m512 sav = _mm512_loadu_ps(t.sa + 16 * b);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) facc[r] = _mm512_fmadd_ps(_mm512_set1_ps(p.min[(r0 + r) * p.nb + b]), sav, facc[r]);
  }
}

// 32-element-block formats: two accumulators per output (even, odd blocks).
template <bool kMin>
void Block32Avx512(const Panel& p, int r0, const TileView& t, int zshift, float out[16][16]) {
  constexpr int R = 8;
  __m512 even[R], odd[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) even[r] = odd[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= p.nb; b += 2) {
    Block32Avx512Step<kMin>(p, r0, t, zshift, b, even);
    Block32Avx512Step<kMin>(p, r0, t, zshift, b + 1, odd);
  }
  if (b < p.nb) Block32Avx512Step<kMin>(p, r0, t, zshift, b, even);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out[r0 + r], _mm512_add_ps(even[r], odd[r]));
}

template <int G, bool kMin>
void SuperAvx512(const Panel& p, int r0, const TileView& t, int zshift, float out[16][16]) {
  constexpr int R = 8, kGpb = 256 / G;
  const int32_t* qsg = G == 16 ? t.qs16 : t.qs32;
  const int32_t* qpg = G == 16 ? t.qp16 : t.qp32;
  const uint8_t* codes = p.codes + r0 * p.k;
  __m512 facc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) facc[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < p.nb; ++sb) {
    __m512i isum[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    for (int g = 0; g < kGpb; ++g) {
      const int64_t gi = sb * kGpb + g;
      const __m512i init = ZeroInit512(qsg + 16 * gi, zshift);
      __m512i iacc[R];
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) iacc[r] = init;
      #pragma GCC unroll 16
      for (int k4 = 0; k4 < G / 4; ++k4) {
        const __m512i a = _mm512_loadu_si512(t.q + (gi * (G / 4) + k4) * 64);
        #pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          iacc[r] = _mm512_dpbusd_epi32(iacc[r], _mm512_set1_epi32(Dword(codes + r * p.k + gi * G + 4 * k4)), a);
        }
      }
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(iacc[r], _mm512_set1_epi32(p.sub[(r0 + r) * p.ng + gi])));
      }
    }
    const __m512 dav = _mm512_loadu_ps(t.da + 16 * (sb * 8));
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_mul_ps(_mm512_set1_ps(p.scale[(r0 + r) * p.nb + sb]), dav);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), s, facc[r]);
    }
    if constexpr (kMin) {
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        __m512i imin = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int pp = 0; pp < kGpb / 2; ++pp) {
          const int32_t mn = Dword(reinterpret_cast<const uint8_t*>(p.mins + (r0 + r) * p.ng + sb * kGpb + 2 * pp));
          imin = _mm512_dpwssd_epi32(imin, _mm512_set1_epi32(mn), _mm512_loadu_si512(qpg + 16 * (sb * kGpb / 2 + pp)));
        }
        const __m512 s = _mm512_mul_ps(_mm512_set1_ps(p.min[(r0 + r) * p.nb + sb]), dav);
        facc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), s, facc[r]);
      }
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out[r0 + r], facc[r]);
}

// The i-quants' panel rows with internal/iq_avx512.inc's decoder (64 codes
// per step, the same integer form as UnpackBlock's); every other type as
// UnpackRowsSimd.
#include "common/quant/internal/iq_avx512.inc"

template <typename Block>
void UnpackIqRows512(const uint8_t* rows, uint64_t row_bytes, int n_rows, bool plus128, const Panel& p) {
  constexpr int kGpb = 256 / IqStep<Block>::kGroup;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(plus128 ? 0x80 : 0));
  alignas(64) int32_t lanes[16];
  for (int r = 0; r < n_rows; ++r) {
    const Block* x = reinterpret_cast<const Block*>(rows + r * row_bytes);
    uint8_t* codes = p.codes + r * p.k;
    int32_t* sub = p.sub + r * p.ng;
    for (int64_t b = 0; b < p.nb; ++b) {
      const auto prep = IqStep<Block>::Prepare(x[b]);
      for (int h = 0; h < 4; ++h) {
        const IqStepOut s = IqStep<Block>::Of(x[b], h, prep);
        const __m512i c = _mm512_mask_sub_epi8(s.w, s.neg, _mm512_setzero_si512(), s.w);
        _mm512_storeu_si512(codes + 256 * b + 64 * h, _mm512_xor_si512(c, flip));
        _mm512_store_si512(lanes, s.scale);
        for (int g = 0; g < kGpb / 4; ++g) sub[b * kGpb + (kGpb / 4) * h + g] = lanes[g * (16 * 4 / kGpb)];
      }
      p.scale[r * p.nb + b] = IqD(x[b]);
      p.min[r * p.nb + b] = 0.0f;
    }
    std::memset(p.mins + r * p.ng, 0, 2 * p.ng);
  }
}

void UnpackRowsAvx512(GgmlType type, const UnpackLayout& L, const uint8_t* rows, uint64_t row_bytes,
                      int n_rows, bool plus128, const Panel& p) {
  switch (type) {
    case GgmlType::kIQ1_S: UnpackIqRows512<BlockIq1S>(rows, row_bytes, n_rows, plus128, p); break;
    case GgmlType::kIQ1_M: UnpackIqRows512<BlockIq1M>(rows, row_bytes, n_rows, plus128, p); break;
    case GgmlType::kIQ2_XXS: UnpackIqRows512<BlockIq2Xxs>(rows, row_bytes, n_rows, plus128, p); break;
    case GgmlType::kIQ2_XS: UnpackIqRows512<BlockIq2Xs>(rows, row_bytes, n_rows, plus128, p); break;
    case GgmlType::kIQ2_S: UnpackIqRows512<BlockIq2S>(rows, row_bytes, n_rows, plus128, p); break;
    case GgmlType::kIQ3_XXS: UnpackIqRows512<BlockIq3Xxs>(rows, row_bytes, n_rows, plus128, p); break;
    case GgmlType::kIQ3_S: UnpackIqRows512<BlockIq3S>(rows, row_bytes, n_rows, plus128, p); break;
    default: return UnpackRowsSimd(type, L, rows, row_bytes, n_rows, plus128, p);
  }
  if (n_rows < 16) ZeroPanelRows(L, n_rows, plus128, p);
}

void TileKernelAvx512(const UnpackLayout& L, const Panel& p, int n_rows, int lanes, const uint8_t* tile,
                      const TileLayout& tl, float out[16][16]) {
  const TileView t = ViewTile(tile, tl);
  const int zshift = ZeroShift(PanelZero(L, true));
  const bool half = lanes <= 8;
  for (int r0 = 0; r0 < n_rows; r0 += 8) {
    if (!L.super) {
      if (L.has_min) {
        half ? vnni256::Block32Half<8, false, true>(p, r0, 0, t, zshift, out) : Block32Avx512<true>(p, r0, t, zshift, out);
      } else {
        half ? vnni256::Block32Half<8, false, false>(p, r0, 0, t, zshift, out)
             : Block32Avx512<false>(p, r0, t, zshift, out);
      }
    } else if (L.group == 16) {
      if (L.has_min) {
        half ? vnni256::SuperHalf<8, 16, false, true>(p, r0, 0, t, zshift, out)
             : SuperAvx512<16, true>(p, r0, t, zshift, out);
      } else {
        half ? vnni256::SuperHalf<8, 16, false, false>(p, r0, 0, t, zshift, out)
             : SuperAvx512<16, false>(p, r0, t, zshift, out);
      }
    } else if (L.has_min) {
      half ? vnni256::SuperHalf<8, 32, false, true>(p, r0, 0, t, zshift, out) : SuperAvx512<32, true>(p, r0, t, zshift, out);
    } else {
      half ? vnni256::SuperHalf<8, 32, false, false>(p, r0, 0, t, zshift, out)
           : SuperAvx512<32, false>(p, r0, t, zshift, out);
    }
  }
}

#pragma GCC pop_options

}  // namespace

void UnpackRowsX86(GgmlType type, const UnpackLayout& L, const uint8_t* rows, uint64_t row_bytes,
                   int n_rows, bool plus128, const Panel& p) {
  if (CpuHasAvx512Vnni()) return UnpackRowsAvx512(type, L, rows, row_bytes, n_rows, plus128, p);
  UnpackRowsSimd(type, L, rows, row_bytes, n_rows, plus128, p);
}

GemmKernels X86GemmKernels(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::kAvx2:
      if (CpuHasAvx2()) return {UnpackRowsSimd, TileKernelAvx2, false};
      return {};
    case GemmImpl::kAvx512:
      if (CpuHasAvx512Vnni()) return {UnpackRowsAvx512, TileKernelAvx512, true};
      return {};
    case GemmImpl::kAmx:
    case GemmImpl::kAmxEmulated:
      return AmxGemmKernels(impl);
    default:
      return {};
  }
}

#else  // !__x86_64__

GemmKernels X86GemmKernels(GemmImpl) { return {}; }

#endif

}  // namespace moesplit::quant::internal
