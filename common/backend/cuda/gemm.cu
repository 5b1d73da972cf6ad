// y = x . w^T for every weight format: the in-kernel-dequantising MatVec for
// small batches; for prefill, weight rows dequantised to f32 in chunks and a
// tiled SGEMM kernel. (Not cuBLAS: libcublasLt's 94 KB of static TLS breaks
// thread creation in libraries that use small thread stacks, such as the
// civetweb server behind the Prometheus exposer, in any process that loads
// it.)
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

constexpr int kTile = 64;   // rows (of w) and tokens per block
constexpr int kTileK = 16;  // reduction slice held in shared memory

// Y[t][r] = sum_k X[t][k] * W[r][k] for r < R, t < T. W rows have stride
// lda, X rows ldx, Y rows ldy (elements). 256 threads; thread (tx, ty)
// computes rows ty + 16 i and tokens tx + 16 j of the 64 x 64 tile.
__global__ void __launch_bounds__(256) SgemmKernel(const float* __restrict__ w, int64_t lda,
                                                  const float* __restrict__ x, int64_t ldx,
                                                  float* __restrict__ y, int64_t ldy, int64_t R,
                                                  int64_t T, int64_t K) {
  __shared__ float ws[kTileK][kTile + 1];
  __shared__ float xs[kTileK][kTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTile;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  }
  for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTile * kTileK; i += blockDim.x) {
      const int row = i / kTileK, kk = i % kTileK;
      const int64_t k = k0 + kk;
      const int64_t r = r0 + row, t = t0 + row;
      ws[kk][row] = (r < R && k < K) ? w[r * lda + k] : 0.0f;
      xs[kk][row] = (t < T && k < K) ? x[t * ldx + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = ws[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = xs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = r0 + ty + 16 * i;
    if (r >= R) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t t = t0 + tx + 16 * j;
      if (t < T) y[t * ldy + r] = acc[i][j];
    }
  }
}

CallResult Sgemm(const float* w, int64_t lda, int64_t rows, int64_t k, const float* x,
                 int64_t n_tok, float* y, int64_t ldy, void* stream) {
  const int64_t gy = (n_tok + kTile - 1) / kTile;
  if (gy > 65535) return {cudaErrorInvalidValue, "MatMul: too many tokens for one launch"};
  const dim3 grid(static_cast<unsigned>((rows + kTile - 1) / kTile), static_cast<unsigned>(gy));
  SgemmKernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(w, lda, x, k, y, ldy, rows,
                                                                  n_tok, k);
  return {cudaGetLastError(), "SgemmKernel<<<>>>"};
}

}  // namespace

CallResult MatMul(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                  const GemmContext& ctx, void* stream) {
  if (n_tok <= 0 || w.n_rows == 0) return {};
  if (n_tok <= kMaxMatVecTokens) return MatVec(w, x, n_tok, y, stream);
  if (w.type == GgmlType::kF32 && w.row_bytes % 4 == 0) {
    return Sgemm(static_cast<const float*>(w.data), static_cast<int64_t>(w.row_bytes / 4),
                 w.n_rows, w.n_cols, x, n_tok, y, w.n_rows, stream);
  }
  const int64_t chunk = ctx.scratch_elems / w.n_cols;
  if (chunk < 1) return {cudaErrorInvalidValue, "MatMul: scratch smaller than one row"};
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += chunk) {
    const int64_t rows = w.n_rows - r0 < chunk ? w.n_rows - r0 : chunk;
    CallResult r = DequantRows(w, nullptr, r0, rows, ctx.scratch, stream);
    if (!r.ok()) return r;
    r = Sgemm(ctx.scratch, w.n_cols, rows, w.n_cols, x, n_tok, y + r0, w.n_rows, stream);
    if (!r.ok()) return r;
  }
  return {};
}

}  // namespace moesplit::cuda::raw
