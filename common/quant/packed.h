// Row-interleaved ("packed") layout of quantised weight matrices (Q4_K,
// Q5_K, Q6_K, Q8_0, MXFP4, Q5_0) for integer dot instructions, and its
// matrix product.
//
// The GGUF layout keeps each row's superblocks together, so a dot kernel
// must reduce 16 int32 lanes to one number per row and decode the packed
// 6-bit sub-scales of every superblock: at decode that work, not the
// memory, bounds the speed. The packed layout interleaves 16 rows ("a
// strip") per 256-column superblock: one 64-byte load holds 4 consecutive
// codes of each of the 16 rows, so one VNNI vpdpbusd against a broadcast
// 4-byte activation quad yields 16 per-row partial sums in its 16 lanes, and
// the sub-scales, mins and scales are stored decoded, per row, ready to
// multiply lane-wise. Nothing is reduced across lanes.
//
// Packed superblock of a strip (16 rows r, columns 256 i .. 256 i + 255),
// Q4_K (2368 bytes; the GGUF rows take 16 x 144 = 2304):
//   [0, 2048)    codes: for group g < 8 (32 columns), chunk c < 4, the 64
//                bytes at 256 g + 64 c: byte 4 r + b = code(r, 32 g + 4 c + b)
//                | code(r, 32 g + 16 + 4 c + b) << 4
//   [2048, 2176) sub-scale of row r in group g at 2048 + 16 g + r (u8)
//   [2176, 2304) mins of groups 2p, 2p + 1 at 2176 + 32 p + 2 r (+1) (u8)
//   [2304, 2336) d of row r (f16 bits), [2336, 2368) dmin (f16 bits)
// Q5_K (2880 bytes; GGUF 16 x 176 = 2816): Q4_K's sections for the low 4
// bits, then
//   [2368, 2880) fifth bits: span g's 64 bytes at 2368 + 64 g; bit z of
//                byte 4 r + b is the fifth bit of code(r, 32 g + 4 z + b)
// Q6_K (3360 bytes, = 16 x 210):
//   [0, 2048)    low 4 bits of the codes as Q4_K's, over 32-column spans s
//   [2048, 3072) high 2 bits: span s, word w < 2, 64 bytes at
//                2048 + 128 s + 64 w: bits 2 j, 2 j + 1 of byte 4 r + b are
//                the high bits of code(r, 32 s + 4 (4 w + j) + b)
//   [3072, 3328) scale of row r in group g < 16 at 3072 + 16 g + r (i8)
//   [3328, 3360) d of row r (f16 bits)
// The 32-column types pack one 32-column block of 16 rows as their
// "superblock" (codes(r, k) = column 32 i + k of row r):
// Q8_0 (544 bytes, = 16 x 34):
//   [0, 512)     chunk c < 8, the 64 bytes at 64 c: byte 4 r + b =
//                code(r, 4 c + b) + 128 (u8, the int8 code with its sign bit
//                flipped, so vpdpbusd takes it unsigned; the bias times the
//                block's activation sum is taken off again, exactly)
//   [512, 544)   d of row r (f16 bits)
// MXFP4 (272 bytes, = 16 x 17):
//   [0, 256)     chunk c < 4, the 64 bytes at 64 c: byte 4 r + b = the GGUF
//                byte qs[4 c + b] of row r (low nibble: the table index of
//                column 4 c + b, high nibble: of column 16 + 4 c + b); the
//                kernel looks the indices up as table value + 12 (u8)
//   [256, 272)   e of row r (E8M0)
// Q5_0 (352 bytes, = 16 x 22):
//   [0, 256)     MXFP4's nibble bytes (the GGUF qs bytes: low nibbles the
//                low 4 bits of columns 0..15, high nibbles of 16..31)
//   [256, 320)   fifth bits: bit z of byte 4 r + b is the fifth bit of
//                code(r, 4 z + b) for z < 4, of code(r, 16 + 4 (z - 4) + b)
//                for z >= 4 (the column order of the nibble chunks); the
//                kernel gives vpdpbusd the 5-bit code (value + 16, u8)
//   [320, 352)   d of row r (f16 bits)
// (K-quant files store Q5_0 where rows are not whole 256-column superblocks:
// DeepSeek-V2-Lite's 1408-column ffn_down_exps, MLA's 128-column attn_k_b.)
// A strip is its n_cols / PackedColumns(type) packed superblocks in column
// order; strips follow each other.
//
// The product gives the bits of GetTypeTraits(type)->vec_dot on the GGUF
// rows (the canonical order of internal/unpack.h: exact integer sums, then
// per superblock fma(isum, d * d_a) and fma(imin, -(dmin * d_a)); for the
// 32-column types the even-block and odd-block chains, then their sum), at
// every kernel level, so packing changes no result.
//
// Thread-safe: pure functions over caller buffers.
#pragma once

#include <cstdint>

#include "common/gguf/types.h"

namespace moesplit::quant {

inline constexpr int kPackedStripRows = 16;

// True for the types with a packed layout (Q4_K, Q5_K, Q6_K, Q8_0, MXFP4,
// Q5_0).
bool PackedLayoutExists(GgmlType type);

// Columns of one packed superblock: 256 for the K-quants, 32 for Q8_0,
// MXFP4 and Q5_0; 0 for types without a layout. Packed matrices have whole ones.
int64_t PackedColumns(GgmlType type);

// True when packing `type` pays on this CPU: PackedLayoutExists and the CPU
// has AVX2 (packed_avx2.cc) or AVX-512 VNNI (packed_avx512.cc); elsewhere the
// scalar product would be slower than the GGUF kernels. MOESPLIT_PACKED=0 in
// the environment turns it off.
bool PackedPreferred(GgmlType type);

// Bytes of an n_rows x n_cols matrix of `type` in the packed layout; 0 when
// it has none or the shape does not fit (n_rows % 16, n_cols %
// PackedColumns(type)).
uint64_t PackedMatrixBytes(GgmlType type, int64_t n_rows, int64_t n_cols);

// Re-lays n_rows GGUF rows (row stride row_bytes) into dst
// (PackedMatrixBytes bytes). REQUIRES: PackedMatrixBytes(...) > 0.
void PackRows(GgmlType type, const uint8_t* src, uint64_t row_bytes, int64_t n_rows,
              int64_t n_cols, uint8_t* dst);

struct PackedView {
  GgmlType type = GgmlType::kQ4_K;
  const uint8_t* data = nullptr;  // PackRows output
  int64_t n_rows = 0;
  int64_t n_cols = 0;
};

// y[t * ldy + r] = vec_dot(W row (row0 + r), act[t]) for r < n_rows,
// t < n_tokens; act[t]: n_cols columns of the type's vec_dot_type (Q8_K
// for the K-quants, Q8_0 for the 32-column types).
// REQUIRES: row0 and n_rows multiples of 16, row0 + n_rows <= w.n_rows.
void PackedGemm(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                int64_t n_tokens, float* y, int64_t ldy);

// The same with the portable scalar kernel (the reference of the tests).
void PackedGemmScalar(const PackedView& w, int64_t row0, int64_t n_rows,
                      const uint8_t* const* act, int64_t n_tokens, float* y, int64_t ldy);

}  // namespace moesplit::quant
