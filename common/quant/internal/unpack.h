// Integer form of the quantised weight formats, and the canonical dot order
// that every SIMD kernel (vec_dot and the tiled GEMM) reproduces bit for bit.
//
// Each quantised weight type is seen as blocks of `block` elements (32 for
// the ggml 32-element formats, 256 for K-quants and IQ4_XS) holding integer
// codes c and scales:
//   value(k) = scale * (c_k - zero)                     Q4_0 Q5_0 Q8_0 IQ4_NL MXFP4
//   value(k) = scale * c_k + min                        Q4_1 Q5_1
//   value(k) = d * sub_g * (c_k - zero) - dmin * mn_g   K-quants, IQ4_XS (group g)
// The i-quants and ternary types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, TQ1_0, TQ2_0) are 256-blocks of the same form without
// mins: signed codes (grid value times sign; 8 * grid value + delta sign for
// IQ1, whose +-1/8 delta becomes integral), odd sub-scales 2 s + 1 (1 for
// TQ), groups of 16 (IQ2_XS, IQ2_S, IQ1_M) or 32, and d = the f16 scale times
// ggml's power-of-two factor (1/8 for IQ2 and IQ1, 1/4 for IQ3_XXS), exact.
// with signed codes (zero = 0) for Q8_0, IQ4_NL, IQ4_XS and MXFP4, whose
// codes are the table values. The canonical dot of a weight row with an
// activation row of the type's vec_dot_type (Q8_0 / Q8_1 / Q8_K blocks q):
//   32-blocks:  acc = fma(float(Σ_k (c_k - zero) q_k), scale * d_a, acc)
//               then for Q4_1/Q5_1 acc = fma(min, s_a, acc), with acc the
//               even-block or the odd-block accumulator (two FMA chains);
//               the dot is acc_even + acc_odd
//   256-blocks: isum = Σ_g sub_g Σ_{k in g} (c_k - zero) q_k       (int32)
//               acc  = fma(float(isum), d * d_a, acc)
//               with mins: imin = Σ_g mn_g Σ_{k in g} q_k (from bsums)
//                          acc  = fma(float(imin), -(dmin * d_a), acc)
// block after block from 0. Integer sums are exact (no saturation for any
// input: activation codes are in [-127, 127]), so kernels may add them in
// any order; the float steps are the ones above, in block order.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>

#include "common/gguf/types.h"
#include "common/quant/quant.h"

namespace moesplit::quant::internal {

struct UnpackLayout {
  int block = 32;          // elements per weight block: 32 or 256
  int group = 32;          // elements per sub-scale group (256-blocks): 16 or 32
  bool super = false;      // 256-element block with integer sub-scales
  bool is_signed = false;  // codes are signed values (zero = 0)
  int zero = 0;            // unsigned codes: value = code - zero
  bool has_min = false;    // Q4_1/Q5_1 (float min), Q2_K/Q4_K/Q5_K (int mins)
};

// Layout of a quantised weight type; false for F32/F16/BF16 and others.
bool GetUnpackLayout(GgmlType type, UnpackLayout* out);

// One block of `type` in integer form. codes: block bytes (int8 values when
// is_signed, else uint8 codes). 32-blocks: *scale, *min (Q4_1/Q5_1).
// 256-blocks: sub[block/group] sub-scales, mins[block/group] (when has_min),
// *scale = d, *min = dmin.
struct UnpackedBlock {
  uint8_t* codes;
  int32_t* sub;
  int16_t* mins;
  float* scale;
  float* min;
};
void UnpackBlock(GgmlType type, const void* block, const UnpackedBlock& out);

// Scalar dot in the canonical order (the bit-exact reference of the SIMD
// kernels); nullptr for types without an UnpackLayout.
VecDotFn CanonicalVecDot(GgmlType type);

}  // namespace moesplit::quant::internal
