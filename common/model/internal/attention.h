// Attention of one query head over an f16 KV cache, computed the way
// llama.cpp's CPU flash-attention kernel does it for prompt batches
// (ggml-cpu ops.cpp, ggml_compute_forward_flash_attn_ext_f16_one_chunk, with
// F16 K/V; llama.cpp uses it for batches of fewer than 64 queries):
//
//   q16 = f16(q)                               (round to nearest even)
//   M = -inf, S = 0, acc16[0..dv) = 0          (acc16: an f16 accumulator)
//   for j in 0 .. n_kv-1 (position order):
//     s = DotF16(K[j], q16) * scale
//     if s > M: ms = exp(M - s); M = s; acc16 = f16(acc16 * ms); vs = 1
//     else:     ms = 1;          vs = exp(s - M)
//     acc16 = f16(fma(V[j], vs, acc16))
//     S = fma(S, ms, vs)                      (the build contracts S*ms + vs)
//   out = f32(acc16) * (1 / S)
//
// With a sink logit z (gpt-oss's learned per-head sink: a softmax entry that
// has no value), after the loop, as ggml applies it:
//   out32 = f32(acc16)
//   if z > M: ms = exp(M - z); out32 = out32 * ms; S = fma(S, ms, 1)
//   else:     S = fma(S, 1, exp(z - M))
//   out = out32 * (1 / S)
// (z = -inf, the default, changes nothing.)
//
// DotF16 sums like ggml_vec_dot_f16 compiled for AVX-512: 4 x 16 lanes of
// FMA accumulators over blocks of 64, reduced as
// ((a0+a2)+(a1+a3)), then 16 -> 8 -> 4 lanes (upper + lower halves), then
// (l0+l2)+(l1+l3); the tail past a multiple of 64 is added in double.
//
// Every kernel has a portable scalar form and, on x86 CPUs, AVX2 (+FMA, F16C)
// and AVX-512 (F, DQ) forms chosen at run time; all give bit-identical
// results (element-wise operations in the same order, IEEE
// round-to-nearest-even conversions). kAvx2 / kScalar force a form (tests).
//
// Thread-safe: pure functions (AttendGroup's scratch is per thread).
#pragma once

#include <cmath>
#include <cstdint>

namespace moesplit::model::internal {

enum class F16Kernels { kAuto, kAvx2, kScalar };

// sum_i x[i] * y[i] over f16 vectors, in ggml's AVX-512 order (see above).
float DotF16(int64_t n, const uint16_t* x, const uint16_t* y,
             F16Kernels k = F16Kernels::kAuto);
// y[i] = f16(fma(x[i], v, y[i])).
void MadF16(int64_t n, uint16_t* y, const uint16_t* x, float v,
            F16Kernels k = F16Kernels::kAuto);
// y[i] = f16(y[i] * v).
void ScaleF16(int64_t n, uint16_t* y, float v, F16Kernels k = F16Kernels::kAuto);
// dst[i] = f16(src[i]).
void ToF16(int64_t n, const float* src, uint16_t* dst);

// y[i] = std::exp(x[i]) bit for bit. Where VectorExpInUse(), 16 lanes at a
// time (AVX-512) or 8 (AVX2): glibc's expf (2.28 and later) rebuilt in
// vector lanes, which a check at first use compares with the library;
// AttendGroup's softmax uses it.
void ExpF32(int64_t n, const float* x, float* y);
bool VectorExpInUse();

struct HeadAttention {
  const uint16_t* q16 = nullptr;  // dk f16 query values
  const uint16_t* k = nullptr;    // key of position 0 (this KV head)
  const uint16_t* v = nullptr;    // value of position 0 (this KV head)
  int64_t k_stride = 0;           // elements from one position's key to the next
  int64_t v_stride = 0;
  int64_t n_kv = 0;               // positions attended: 0 .. n_kv-1
  int64_t dk = 0;
  int64_t dv = 0;
  float scale = 1.0f;
  float sink = -INFINITY;         // the sink logit, -inf for none
};

// out[0..dv) = attention of `a` (see the file comment). `acc16` is dv
// elements of scratch. REQUIRES: n_kv >= 1.
void AttendHead(const HeadAttention& a, uint16_t* acc16, float* out,
                F16Kernels k = F16Kernels::kAuto);

// Several queries against one KV head: e.g. the query heads of a GQA group,
// for one or more tokens of a sequence. Query i (dk f32 values at q[i],
// rounded to f16 as q16) attends to positions 0 .. n_kv[i]-1 of k/v (the
// strides, dk, dv and scale as in HeadAttention) into out[i][0..dv).
struct GroupAttention {
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  int64_t k_stride = 0;
  int64_t v_stride = 0;
  int64_t dk = 0;
  int64_t dv = 0;
  float scale = 1.0f;
  int64_t n_q = 0;
  const float* const* q = nullptr;  // n_q pointers
  const int64_t* n_kv = nullptr;    // n_q counts, each >= 1
  float* const* out = nullptr;      // n_q pointers
  const float* sinks = nullptr;     // n_q sink logits, or nullptr for none
};

// Bit for bit AttendHead(q16 = f16(q[i]), n_kv[i]) for every query i. The
// AVX-512 form is fused: each key and value row is converted once for all
// queries; per chunk of positions the scores come first (they do not depend
// on the accumulator), then the online softmax of 16 queries at once (one
// query per lane, exp as ExpF32), then each query's accumulation over the
// chunk with its f16 accumulator in f32 registers, rounded through f16
// after every step (the bits storing it would give). The AVX2 form is the
// same with 8-lane registers, the softmax of 8 queries at once. kScalar
// runs AttendHead per query. Scratch is thread-local.
void AttendGroup(const GroupAttention& g, F16Kernels k = F16Kernels::kAuto);

// The thread-local scratch bytes AttendGroup's fused forms use per query of
// a group with key and value widths dk and dv (callers size groups by it so
// that a group's working set stays in the core's cache).
int64_t GroupQueryBytes(int64_t dk, int64_t dv);

}  // namespace moesplit::model::internal
