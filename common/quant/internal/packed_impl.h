// Offsets of the packed superblock sections (packed.h) and the SIMD entry.
#pragma once

#include <cstdint>

#include "common/quant/internal/blocks.h"
#include "common/quant/packed.h"

namespace moesplit::quant::internal {

inline constexpr uint64_t kQ4KSub = 2048, kQ4KMins = 2176, kQ4KD = 2304, kQ4KDmin = 2336;
inline constexpr uint64_t kQ4KSuperBytes = 2368;
// Q5_K: Q4_K's sections, then the fifth bits.
inline constexpr uint64_t kQ5KHigh = 2368, kQ5KSuperBytes = 2880;
inline constexpr uint64_t kQ6KHigh = 2048, kQ6KScales = 3072, kQ6KD = 3328;
inline constexpr uint64_t kQ6KSuperBytes = 3360;
// 32-column blocks: Q8_0 codes (biased by 128) then d; MXFP4 nibbles then e;
// Q5_0 nibbles, fifth bits, then d.
inline constexpr uint64_t kQ8_0D = 512, kQ8_0SuperBytes = 544;
inline constexpr uint64_t kMxfp4E = 256, kMxfp4SuperBytes = 272;
inline constexpr uint64_t kQ5_0High = 256, kQ5_0D = 320, kQ5_0SuperBytes = 352;
// The unsigned codes the packed 32-column types give vpdpbusd are the
// signed values plus this bias (Q8_0: code ^ 0x80; MXFP4: table value + 12;
// Q5_0: its own 5-bit code, value + 16).
inline constexpr int kQ8_0Bias = 128, kMxfp4Bias = 12, kQ5_0Bias = 16;

// Bytes of one packed superblock of 16 rows; 0 for types without a layout.
uint64_t PackedSuperBytes(GgmlType type);

// Bias of a packed 32-column type's codes (kQ8_0Bias, kMxfp4Bias, kQ5_0Bias).
int PackedCodeBias(GgmlType type);

void PackedGemmScalarImpl(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                          int64_t n_tokens, float* y, int64_t ldy);

// Per token and 32-column block of the activations: -bias * (sum of its
// codes), the start of the block's integer sum over the biased codes, and
// its scale d_a.
struct BlockTerm {
  int32_t neg_corr;
  float da;
};

// The activations' BlockTerms (Q8_0 rows), into thread-local scratch
// (terms[t * nb + i] for token t, block i).
const BlockTerm* BlockTerms(const BlockQ8_0* const* a, int64_t n_tokens, int64_t nb, int bias);

// The AVX2 product (packed_avx2.cc) of every packed type; false for the
// other types or when not compiled in. REQUIRES: CpuHasAvx2().
bool PackedGemmAvx2(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                    int64_t n_tokens, float* y, int64_t ldy);

// The AVX-512 VNNI product (packed_avx512.cc); false when not compiled in.
// REQUIRES: CpuHasAvx512Vnni().
bool PackedGemmAvx512(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                      int64_t n_tokens, float* y, int64_t ldy);

}  // namespace moesplit::quant::internal
