// Matrix products of quantised weights with f32 activations.
//
//   y[t, r] = sum_i W[r, i] * x[t, i]     t < n_tokens, r < n_rows, i < n_cols
//
// W: n_rows rows of n_cols elements of `type` (row stride `row_bytes`), in
// ggml order (one row = one output feature), or packed (packed.h; then
// computed by PackedGemm, same bits). x: n_tokens x n_cols f32,
// y: n_tokens x n_rows f32, both dense row-major. Each activation row is
// converted once to the weight's vec_dot_type, then rows are split over the
// pool's threads: one vec_dot_rows per (row tile, token) for few tokens, the
// tiled GEMM of gemm.h (bit-identical to vec_dot) for 5 or more.
//
// Errors (InvalidArgument, y untouched): unsupported type or one without a
// dot kernel (Q8_1, Q8_K), negative sizes, n_cols not whole blocks, row_bytes
// smaller than one row, data or row_bytes not aligned for the block struct
// (4 bytes for F32, 1 for MXFP4, 2 otherwise; GGUF tensors always are), null
// buffers where there is work. n_cols == 0 gives
// y = 0. Results do not depend on the pool size: each output is one vec_dot.
//
// Thread-safe: reentrant; `pool` may be nullptr (single-threaded).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/gguf/types.h"

namespace moesplit::quant {

struct WeightView {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  uint64_t row_bytes = 0;
  // data is in packed.h's strip layout (Q4_K / Q5_K / Q6_K, whole strips and
  // superblocks); row_bytes is then the GGUF row size.
  bool packed = false;
};

absl::Status MatMul(const WeightView& w, const float* x, int64_t n_tokens,
                    float* y, ThreadPool* pool);

// Products of one activation (a layer's q, k and v; an FFN's gate and up):
// each y = W x as MatMul computes it, the same bits, but in one dispatch over
// the pool when every product runs row by row or packed (packed weights, or
// fewer tokens than the tiled GEMM takes) with one column count: the
// threads split the products' rows together, instead of each product waking
// them and the small ones (K, V at decode) running on too few. Otherwise one
// MatMul after another. Errors as MatMul's, checked for every product before
// any is computed.
struct Product {
  WeightView w;
  float* y = nullptr;
};
absl::Status MatMuls(absl::Span<const Product> products, const float* x, int64_t n_tokens,
                     ThreadPool* pool);

// Products of one matrix's row groups with activations of their own (MLA's
// per-head attn_k_b / attn_v_b, every head stacked): for g < n_groups,
// y_g = W_g x_g, W_g the rows [g r, (g + 1) r) of w (r = w.n_rows /
// n_groups; packed: r whole 16-row strips, the strips of a group
// consecutive), x_g = x + g * n_tokens * w.n_cols and y_g = y + g * n_tokens
// * r, both dense row-major. Each y_g has MatMul(W_g, x_g)'s bits. One
// dispatch for all groups (the activations converted together, the threads
// splitting every group's rows) when the products run packed or row by row
// and r is whole 16-row units; otherwise one MatMul per group. Errors as
// MatMul's, and InvalidArgument when n_groups does not divide w.n_rows.
absl::Status GroupedMatMul(const WeightView& w, int64_t n_groups, const float* x, int64_t n_tokens,
                           float* y, ThreadPool* pool);

}  // namespace moesplit::quant
