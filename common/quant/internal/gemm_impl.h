// Internals of the tiled GEMM (gemm.h): the activation tile and weight panel
// layouts, and the per-implementation unpack and tile kernels.
//
// Activation tile (kTileTokens = 16 tokens, k columns), sections 64-byte
// aligned, lane l = token l of the tile:
//   q     int8  [k/4][16][4]   codes, 4 consecutive columns per token
//   da    f32   [k/32][16]     activation scale of each 32-column block
//                              (the Q8_K scale repeated over its 8 blocks)
//   sa    f32   [k/32][16]     Q8_1 block sum (s), else 0
//   qs16  i32   [k/16][16]     sum of the 16 codes of each 16-column group
//   qs32  i32   [k/32][16]     same per 32 columns
//   qp16  i16x2 [k/32][16]     (qs16[2i], qs16[2i+1]) pairs
//   qp32  i16x2 [ceil(k/64)][16]  (qs32[2i], qs32[2i+1]) pairs (0-padded)
// Weight panel (kPanelRows = 16 rows, k columns):
//   codes u8  [16][k]          codes; signed formats either as int8 values
//                              (plus128 = false) or value + 128 (true)
//   scale f32 [16][nb]         32-blocks: scale; 256-blocks: d
//   min   f32 [16][nb]         32-blocks: min;   256-blocks: dmin
//   sub   i32 [16][k/group]    256-blocks: sub-scales
//   mins  i16 [16][k/group]    256-blocks: mins
// with nb = k / block. Rows past the weight's last are all zero.
//
// Thread-safe: pure functions over caller buffers.
#pragma once

#include <cstdint>

#include "common/gguf/types.h"
#include "common/quant/gemm.h"
#include "common/quant/internal/unpack.h"

namespace moesplit::quant::internal {

struct TileLayout {
  explicit TileLayout(int64_t k);
  int64_t k;
  uint64_t q, da, sa, qs16, qs32, qp16, qp32, bytes;  // section offsets, total
};

struct PanelLayout {
  PanelLayout(const UnpackLayout& L, int64_t k);
  int64_t k, nb, ng;                                 // columns, blocks, groups per row
  uint64_t codes, scale, min, sub, mins, bytes;      // section offsets, total
};

struct Panel {
  uint8_t* codes;
  float* scale;
  float* min;
  int32_t* sub;
  int16_t* mins;
  int64_t k, nb, ng;  // row strides of codes, scale/min, sub/mins
};
Panel MakePanel(const PanelLayout& p, uint8_t* base);

// Zero point of the panel codes: value = code - zero for unsigned codes;
// signed formats stored +128 have zero 128, stored as int8 values zero 0.
inline int PanelZero(const UnpackLayout& L, bool plus128) {
  return L.is_signed ? (plus128 ? 128 : 0) : L.zero;
}

// Unpacks rows [0, n_rows) (n_rows <= 16; rows are row_bytes apart) of
// `type` into the panel and zeroes rows n_rows..15.
using UnpackRowsFn = void (*)(GgmlType type, const UnpackLayout& L, const uint8_t* rows,
                              uint64_t row_bytes, int n_rows, bool plus128, const Panel& p);
void UnpackRowsScalar(GgmlType type, const UnpackLayout& L, const uint8_t* rows,
                      uint64_t row_bytes, int n_rows, bool plus128, const Panel& p);

// out[r][l] = canonical dot of panel row r with tile lane l, r < n_rows,
// l < lanes (the tile's tokens; other entries of out are unspecified).
using TileKernelFn = void (*)(const UnpackLayout& L, const Panel& p, int n_rows, int lanes,
                              const uint8_t* tile, const TileLayout& t, float out[16][16]);
void TileKernelScalar(const UnpackLayout& L, const Panel& p, int n_rows, int lanes, const uint8_t* tile,
                      const TileLayout& t, float out[16][16]);

enum class GemmImpl { kScalar, kAvx2, kAvx512, kAmx, kAmxEmulated };

struct GemmKernels {
  UnpackRowsFn unpack = nullptr;
  TileKernelFn kernel = nullptr;
  bool plus128 = false;
};

// The implementation's functions; unpack == nullptr when this build or CPU
// lacks it (kAmx needs AMX-INT8 and the kernel's permission; kAmxEmulated,
// the AMX kernel with its tile instructions emulated in C++ for tests, needs
// AVX-512).
GemmKernels GetGemmKernels(GemmImpl impl);
// Defined in gemm_x86.cc / gemm_amx.cc.
GemmKernels X86GemmKernels(GemmImpl impl);
GemmKernels AmxGemmKernels(GemmImpl impl);
// The SIMD unpacker of the AMX kernels: the AVX-512 one (with the i-quants'
// 64-value decoder) where the CPU has AVX-512 VNNI, else the AVX2 one
// (x86-64 with AVX2 only).
void UnpackRowsX86(GgmlType type, const UnpackLayout& L, const uint8_t* rows, uint64_t row_bytes,
                   int n_rows, bool plus128, const Panel& p);

// Prefetch hints for n bytes from p (no effect on results).
void PrefetchBytes(const uint8_t* p, uint64_t n);

// TileGemm with a chosen implementation (tests); false when unavailable.
bool TileGemmWith(GemmImpl impl, const WeightView& w, int64_t row0, int64_t n_rows,
                  const uint8_t* tiles, int64_t n_tokens, float* y, int64_t ldy,
                  uint8_t* scratch);

}  // namespace moesplit::quant::internal
