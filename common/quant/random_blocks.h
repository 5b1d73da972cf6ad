// Random, valid quantised tensors for synthetic test models.
//
// FillRandomBlocks writes n_elements values of `type` (whole blocks) whose
// dequantised values have mean ~0 and standard deviation ~`scale`:
//   - F32 / F16 / BF16: uniform on [-sqrt(3)*scale, sqrt(3)*scale].
//   - block formats: uniformly random codes (every code of the format occurs),
//     positive sub-block scales drawn from a fixed small range, and a
//     per-block scale factor in [0.5, 1.5] (times a constant chosen from the
//     exact moments of those distributions so the expected variance is
//     scale^2). Formats with a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) get mins
//     that centre each sub-block. Where ggml's own quantisers emit block
//     scales of either sign (Q4_0, Q5_0, Q3_K, Q6_K, IQ4_NL, IQ4_XS) the
//     block scale gets a random sign, which centres their asymmetric
//     codebooks; all other scales are positive. MXFP4 mixes the two
//     power-of-two exponents around the target in the proportion that gives
//     the exact expected variance. Int8 codes avoid -128.
//   - i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): every
//     bit pattern is a valid block, so grid indices, signs, deltas and
//     sub-block scales are random bits; only the (positive) f16 block scale
//     is planned, from the exact moments of the codebooks.
//   - TQ1_0, TQ2_0: uniform digits in {0, 1, 2} (values -d, 0, d), packed as
//     ggml's quantisers pack them.
// The output depends only on (type, seed, scale, n_elements); it is produced
// by a wyrand stream at several GB/s on one core.
//
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4, IQ1_S, IQ1_M, IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0.
//
// Errors (InvalidArgument, nothing written): unsupported type, negative
// n_elements or one that is not a multiple of the block size, null dst with
// n_elements > 0, dst not aligned for the block struct (4 bytes for F32 and
// Q8_K, 1 for MXFP4, 2 otherwise), scale not finite and > 0, or a scale for which the f16
// block scales would drop below 2^-20 (too few significant bits) or exceed
// 6e4. Accepted ranges: F32/BF16/MXFP4 any; F16 up to 3.6e4; Q4_x/Q5_x from
// ~2e-5; Q8_0/Q8_1/Q8_K/IQ4_NL from ~1.5e-4; Q2_K/Q3_K from ~6e-5; Q4_K
// 2.3e-4, Q5_K 4.6e-4, Q6_K 9e-4, IQ4_XS 1.6e-3; upper limits 2.4e4 (Q4_1,
// Q5_1) or more. Every type accepts 0.005 .. 1e4.
//
// Thread-safe: reentrant; dst must hold RowBytes(type, n_elements) bytes.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "common/gguf/types.h"

namespace moesplit::quant {

absl::Status FillRandomBlocks(GgmlType type, uint64_t seed, float scale, uint8_t* dst,
                              int64_t n_elements);

}  // namespace moesplit::quant
