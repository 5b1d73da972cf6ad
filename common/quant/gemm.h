// Tiled products of quantised weight rows with many activation rows (the
// prefill case), bit-identical to one vec_dot per (row, token).
//
//   y[t * ldy + r] = vec_dot(n = k, W row (row0 + r), activation row t)
//   for r < n_rows, t < n_tokens.
//
// Activations: rows already converted to the weight type's vec_dot_type
// (Q8_0, Q8_1 or Q8_K, by the quantiser in TypeTraits) are regrouped by
// PackActTiles into tiles of kTileTokens tokens: int8 codes interleaved 4
// columns x 16 tokens (the VNNI / AMX B-operand layout), per-token block
// scales and code sums. TileGemm unpacks kPanelRows weight rows at a time
// into int8 codes plus scales (once per call, in caller scratch) and runs
// them against every tile with integer dot instructions (AVX2 maddubs,
// AVX-512 VNNI vpdpbusd, or AMX-INT8 tdpbusd where the CPU and Linux allow
// it), then the float steps of the canonical order (internal/unpack.h).
// Because the SIMD vec_dot kernels follow the same canonical order, the two
// paths give the same bits: whether a token goes through vec_dot or a tile
// does not change its result.
//
// Thread-safe: pure functions over caller buffers; scratch must not be
// shared between concurrent calls.
#pragma once

#include <cstdint>

#include "common/gguf/types.h"
#include "common/quant/matmul.h"
#include "common/quant/quant.h"

namespace moesplit::quant {

inline constexpr int kTileTokens = 16;
inline constexpr int kPanelRows = 16;

// True when, at the active kernel level, TileGemm can compute `type` and
// its results equal GetTypeTraits(type)->vec_dot bit for bit: a quantised
// weight type whose active vec_dot is this library's SIMD kernel (AVX2 level
// or above on x86-64). False for F32/F16/BF16, at the scalar level, or after
// RegisterVecDot replaced the kernel.
bool TileGemmAvailable(GgmlType type);

// Bytes of the tiles for n_tokens rows of k columns (a multiple of 64).
// REQUIRES: k a multiple of 32.
uint64_t ActTileBytes(int64_t k, int64_t n_tokens);

// Packs rows[t] (t < n_tokens), each a row of `act_type` (Q8_0, Q8_1 or
// Q8_K) of k elements, into dst (ActTileBytes(k, n_tokens) bytes, 64-byte
// aligned). Lanes past n_tokens in the last tile are zero.
// REQUIRES: k a multiple of the act_type block size.
void PackActTiles(GgmlType act_type, const uint8_t* const* rows, int64_t n_tokens, int64_t k,
                  uint8_t* dst);

// Scratch bytes TileGemm needs for rows of `type` with k columns.
uint64_t TileGemmScratchBytes(GgmlType type, int64_t k);

// The product above. `tiles` from PackActTiles with the weight type's
// vec_dot_type; scratch: TileGemmScratchBytes bytes, 64-byte aligned.
// REQUIRES: TileGemmAvailable(w.type); 0 <= row0, row0 + n_rows <= w.n_rows.
void TileGemm(const WeightView& w, int64_t row0, int64_t n_rows, const uint8_t* tiles,
              int64_t n_tokens, float* y, int64_t ldy, uint8_t* scratch);

}  // namespace moesplit::quant
