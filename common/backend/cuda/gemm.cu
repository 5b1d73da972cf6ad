// y = x . w^T for every weight format: the in-kernel-dequantising MatVec for
// small batches, cuBLAS SGEMM (over dequantised row chunks) for prefill.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda::raw {
namespace {

CallResult Cublas(cublasStatus_t s, const char* call) {
  return {static_cast<int>(s), call, true};
}

// y[:, r0 : r0 + rows] = x . a^T with a (rows x k) f32, row stride lda
// elements; y has n_rows_total columns.
CallResult SgemmRows(cublasHandle_t h, const float* a, int64_t lda, int64_t rows, int64_t k,
                     const float* x, int64_t n_tok, float* y, int64_t n_rows_total) {
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: Y^T (rows x n_tok, ld n_rows_total) = A^T' ...
  // C (m x n) = op(A) (m x k) . B (k x n): A stored k x m (lda), transposed.
  return Cublas(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                            static_cast<int>(n_tok), static_cast<int>(k), &alpha, a,
                            static_cast<int>(lda), x, static_cast<int>(k), &beta, y,
                            static_cast<int>(n_rows_total)),
                "cublasSgemm");
}

}  // namespace

CallResult CublasCreate(void** handle, void* stream) {
  cublasHandle_t h = nullptr;
  cublasStatus_t s = cublasCreate(&h);
  *handle = h;
  if (s != CUBLAS_STATUS_SUCCESS) return Cublas(s, "cublasCreate");
  s = cublasSetStream(h, static_cast<cudaStream_t>(stream));
  if (s != CUBLAS_STATUS_SUCCESS) return Cublas(s, "cublasSetStream");
  // Plain FP32 (no TF32): the consistency tests compare against f32 math.
  return Cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

void CublasDestroy(void* handle) {
  if (handle != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle));
}

CallResult MatMul(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                  const GemmContext& ctx, void* stream) {
  if (n_tok <= 0 || w.n_rows == 0) return {};
  if (n_tok <= kMaxMatVecTokens) return MatVec(w, x, n_tok, y, stream);
  cublasHandle_t h = static_cast<cublasHandle_t>(ctx.cublas);
  if (w.type == GgmlType::kF32 && w.row_bytes % 4 == 0) {
    return SgemmRows(h, static_cast<const float*>(w.data), static_cast<int64_t>(w.row_bytes / 4),
                     w.n_rows, w.n_cols, x, n_tok, y, w.n_rows);
  }
  const int64_t chunk = ctx.scratch_elems / w.n_cols;
  if (chunk < 1) return {cudaErrorInvalidValue, "MatMul: scratch smaller than one row"};
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += chunk) {
    const int64_t rows = w.n_rows - r0 < chunk ? w.n_rows - r0 : chunk;
    CallResult r = DequantRows(w, nullptr, r0, rows, ctx.scratch, stream);
    if (!r.ok()) return r;
    r = SgemmRows(h, ctx.scratch, w.n_cols, rows, w.n_cols, x, n_tok, y + r0, w.n_rows);
    if (!r.ok()) return r;
  }
  return {};
}

}  // namespace moesplit::cuda::raw
